"""How an attempt of a job ends: an explicit state and a result keyed by rank.

Modelled on torchelastic's ``WorkerState`` and ``RunResult``. An attempt runs until every rank has
answered; the first cause to stop it (:class:`StopCause`) fixes its state, else it ``SUCCEEDED``
when every rank returned. The agent (:mod:`.agent`) reads only the state to decide what follows:

- ``NOT_STARTED``: nothing of the user's ran (a rebuilt group, a busy or vanished worker); it is run
  again at once, a few times, and otherwise treated as ``FAILED``;
- ``FAILED``: a rank failed or its worker died; restarted while ``max_restarts`` allows;
- ``SUCCEEDED``, ``TIMED_OUT``, ``INTERRUPTED``, ``POOL_STOPPED``, ``CANNOT_COMPLETE`` (a cell run
  on some ranks waits in a collective that needs the others): the job ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..store import JobStatus
from .result import RankReport


class StopCause(str, Enum):
    """Why the ranks of an attempt were told to stop before they all returned."""

    FAILED = "failed"  # a rank failed or died: its peers stop
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"  # the notebook's interrupt
    POOL_STOPPED = "pool-stopped"  # the pool is stopping (budget, idle, a stop from elsewhere)
    CANNOT_COMPLETE = "cannot-complete"  # a rank waits in a collective whose peers do not run (--ranks)


class AttemptState(str, Enum):
    """How one attempt ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NOT_STARTED = "not-started"
    TIMED_OUT = "timed-out"
    INTERRUPTED = "interrupted"
    POOL_STOPPED = "pool-stopped"
    CANNOT_COMPLETE = "cannot-complete"

    @property
    def job_status(self) -> JobStatus:
        """The job's status when the job ends with this attempt."""
        if self is AttemptState.SUCCEEDED:
            return JobStatus.SUCCEEDED
        if self in (AttemptState.INTERRUPTED, AttemptState.POOL_STOPPED):
            return JobStatus.CANCELLED
        return JobStatus.FAILED

    @property
    def restartable(self) -> bool:
        """A new attempt may follow (``max_restarts`` permitting)."""
        return self in (AttemptState.FAILED, AttemptState.NOT_STARTED)


@dataclass
class AttemptResult:
    """The outcome of one attempt: per-rank reports and values keyed by global rank."""

    state: AttemptState
    ranks: dict[int, RankReport] = field(default_factory=dict)
    values: dict[int, Any] = field(default_factory=dict)
    failure: str | None = None  # one line
    failed_rank: int | None = None
    traceback: str | None = None  # the failing rank's, user frames only
    stop_reason: str | None = None  # POOL_STOPPED: why the pool stopped
    where: str | None = None  # where the ranks were when it timed out or they did not stop (group_where)

    @property
    def ok(self) -> bool:
        return self.state is AttemptState.SUCCEEDED

    @property
    def status(self) -> JobStatus:
        return self.state.job_status

    def reports(self) -> list[RankReport]:
        """The rank reports in rank order."""
        return [self.ranks[rank] for rank in sorted(self.ranks)]

    def values_in_rank_order(self) -> list[Any]:
        return [self.values.get(rank) for rank in sorted(self.ranks)]
