"""What an attempt's watch hears: the jobs control plane's events, one type per kind.

Each running job has one :data:`Events` queue; :class:`~.watch.AttemptWatch` is its only reader and
dispatches on the event's type. Who puts what, and when:

=================  ==============================================  ===================================
event              emitted by                                      when
=================  ==============================================  ===================================
``RankAnswered``   :meth:`.transport.PoolTransport.launch`         a rank's call returned: its
                   (on the pool client's event loop)               :class:`~.payload.RankOutcome`
                                                                   pickled, or the error that
                                                                   replaced it (the worker died or
                                                                   was unreachable)
``RankOutput``     the agent's subscription to ``OUTPUT_TOPIC``    a rank printed (sent by
                   (:func:`rank_event`, on dask's event thread)    :mod:`.capture`, lines coalesced)
``RankProgress``   the same subscription                           a rank's tqdm bar moved or closed
                                                                   (:mod:`.capture`)
``RankMetrics``    the same subscription                           a rank's ``gg.log`` values, a
                                                                   batch (:mod:`.metrics`)
``RankLineage``    the same subscription                           a rank read data, resumed from a
                                                                   checkpoint or wrote one (:mod:`.lineage`)
``RankEnded``      the same subscription                           a rank's code ended other than
                                                                   ``ok``, sent before its answer so
                                                                   the others stop at once (:mod:`.rank`)
``WorkerRemoved``  :class:`~.roster.WorkerRoster`, through the     the scheduler removed a worker of
                   agent (the scheduler's ``remove-worker`` event)  the layout (it died or was ended)
``PoolStopping``   :meth:`.agent.JobAgent.end_job_before_stop`     the pool is about to stop (budget,
                   (the pool's before-stop hook)                   idle timeout, a stop from elsewhere)
``CancelRequested`` :meth:`.agent.JobAgent.cancel` (another         the job is cancelled (its handle's
                   thread; from another process, the agent's       ``cancel()``, the panel's Cancel,
                   subscription to ``CANCEL_TOPIC``)               :mod:`.cancel`)
=================  ==============================================  ===================================

The rank-side events carry the ``launch`` they belong to, so that a late word from an earlier
launch of the same job is told apart.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RankAnswered:
    """The worker at ``address`` answered the launch: the rank's outcome as it travels (pickled, see
    :func:`~.payload.outcome_to_wire`), or the error instead."""

    address: str
    answer: bytes | BaseException


@dataclass(frozen=True)
class RankOutput:
    """Text a rank wrote to ``stream`` ("stdout" or "stderr")."""

    launch: str
    rank: int
    stream: str
    text: str
    seq: int = -1  # its place in the rank's words of this launch (-1: not told)


@dataclass(frozen=True)
class RankProgress:
    """A rank's progress bar's state: ``{"id", "desc", "n", "total", "unit", "elapsed", "rate", "closed", ...}``."""

    launch: str
    rank: int
    progress: dict[str, Any]
    seq: int = -1  # its place in the rank's words of this launch (-1: not told)


@dataclass(frozen=True)
class RankMetrics:
    """A batch of a rank's ``gg.log`` values: ``(step, time, name, value)`` rows."""

    launch: str
    rank: int
    rows: list[tuple[int, float, str, float]]
    seq: int = -1  # its place in the rank's words of this launch (-1: not told)


@dataclass(frozen=True)
class RankEnded:
    """A rank's code ended with ``status`` other than ``ok`` (its answer follows)."""

    launch: str
    rank: int
    status: str


@dataclass(frozen=True)
class WorkerRemoved:
    """The scheduler removed the worker at ``address``."""

    address: str


@dataclass(frozen=True)
class PoolStopping:
    """The pool is stopping for ``reason``: the job ends first, recorded with it."""

    reason: str


@dataclass(frozen=True)
class RankLineage:
    """A rank's lineage record: ``{"role", "uri", "fingerprint"}`` (:mod:`.lineage`)."""

    launch: str
    rank: int
    record: dict[str, Any]
    seq: int = -1  # its place in the rank's words of this launch (-1: not told)


@dataclass(frozen=True)
class CancelRequested:
    """Someone asked the job to stop, for ``reason``: it ends ``cancelled`` as when interrupted."""

    reason: str


JobEvent = (
    RankAnswered
    | RankOutput
    | RankProgress
    | RankMetrics
    | RankLineage
    | RankEnded
    | WorkerRemoved
    | PoolStopping
    | CancelRequested
)
Events = queue.Queue[JobEvent]


def rank_event(message: dict[str, Any]) -> RankOutput | RankProgress | RankMetrics | RankLineage | RankEnded:
    """The event a rank's ``OUTPUT_TOPIC`` message stands for.

    >>> rank_event({"job": "j", "launch": "ab12", "rank": 1, "seq": 0, "stream": "stdout", "text": "hi\\n"})
    RankOutput(launch='ab12', rank=1, stream='stdout', text='hi\\n', seq=0)

    Raises ``KeyError``, ``TypeError`` or ``ValueError`` for a message of another shape.
    """
    launch, rank = str(message.get("launch", "")), int(message["rank"])
    if "ended" in message:
        return RankEnded(launch, rank, str(message["ended"]))
    seq = int(message.get("seq", -1))
    if "progress" in message:
        return RankProgress(launch, rank, dict(message["progress"]), seq)
    if "metrics" in message:
        rows = [(int(step), float(at), str(name), float(value)) for step, at, name, value in message["metrics"]]
        return RankMetrics(launch, rank, rows, seq)
    if "lineage" in message:
        lineage = dict(message["lineage"])
        return RankLineage(
            launch,
            rank,
            {"role": str(lineage["role"]), "uri": str(lineage["uri"]), "fingerprint": dict(lineage["fingerprint"])},
            seq,
        )
    return RankOutput(launch, rank, str(message["stream"]), str(message["text"]), seq)
