"""A pool's queue: one job at a time on a pool, whoever submits it; the others wait their turn.

The queue is the registry's job rows, which every kernel, script and Jupyter server of the user
shares: a job joins the queue by being written (``queued``, in arrival order), waits while an open
job is ahead of it, and runs when none is (``running``). So a second notebook attached to a busy
pool waits instead of taking workers that another job is using.

A job ahead whose submitting process is gone (a kernel killed while its job ran or waited) holds
nobody up: whoever finds it ends its row (``failed`` if it ran, ``cancelled`` if it waited), with the
reason, and goes on; its ranks, if they still run, are ended by the next job's process group build
(:mod:`.process_group`). Interrupting a waiting job takes it out of the queue (``cancelled while
queued``); a job that asked not to wait is refused at once, naming the job that holds the pool.

The queue holds across the processes of one host (the registry's reach): a row submitted from
another host is taken to be alive.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from ..errors import PerSurface, Phrase, PoolBusyError, Value
from ..store import JobRecord as JobRow
from ..store import JobStatus, QueuePlace, Submitter, process_is_alive, process_started_at

if TYPE_CHECKING:
    from ..pools import Pool
    from .record import JobRecord

POLL_S = 0.1  # a waiting job looks at the queue this often
DETACHED = ", detached"  # ends the submitter label of a job the agent runs for someone (its notebook)
REDESCRIBE_S = 1.0  # and tells how long the holder has run at most this often


@functools.cache
def this_submitter() -> Submitter:
    """This process as the submitter of its jobs: its notebook (the kernel's ``JPY_SESSION_NAME``,
    which Jupyter sets to the notebook's path), else its script, else its pid."""
    pid = os.getpid()
    notebook = os.environ.get("JPY_SESSION_NAME")
    if notebook:
        label = f"notebook {os.path.basename(notebook)}"
    elif "ipykernel" in sys.modules or "ipykernel_launcher" in sys.argv[0]:
        label = f"kernel pid {pid}"
    elif sys.argv and sys.argv[0] and sys.argv[0] != "-c":
        label = f"{os.path.basename(sys.argv[0])} (pid {pid})"
    else:
        label = f"pid {pid}"
    return Submitter(label=label, pid=pid, host=socket.gethostname(), started_at=process_started_at(pid))


def is_detached(job: JobRow) -> bool:
    """Whether the agent runs ``job`` for its submitter (no kernel waits for it)."""
    return (job.submitter or "").endswith(DETACHED)


def describe_job(job: JobRow, now: float) -> str:
    """``job-1a2b3c4da910 (notebook train.ipynb, running 12 s)``: a job as the people waiting for it see it."""
    state = f"running {now - job.started_at:.0f} s" if job.status is JobStatus.RUNNING else "queued"
    return f"{job.id} ({job.submitter or 'an earlier release'}, {state})"


@dataclass(frozen=True)
class QueueWait:
    """What a waiting job is told: the job that holds the pool, how many are ahead, how long it waited."""

    pool: str
    job_id: str
    ahead: tuple[JobRow, ...]  # the open jobs ahead, the holder first
    waited_s: float
    at: float  # wall-clock time of this look at the queue

    @property
    def holder(self) -> JobRow:
        return self.ahead[0]

    def describe(self) -> str:
        """``waiting for job-1a2b3c4da910 (notebook train.ipynb, running 12 s); 1 more job ahead``."""
        more = len(self.ahead) - 1
        behind = f"{more} more job{'s' if more > 1 else ''} ahead" if more else "next in line"
        return (
            f"pool '{self.pool}' is busy: {self.job_id} is waiting for {describe_job(self.holder, self.at)}; {behind}"
        )


# told while the job waits (updated in place by the notebook), then None once its turn came
WaitCallback = Callable[[QueueWait | None], None]


class WaitLines:
    """A :data:`WaitCallback` for a terminal: one line when the wait starts or its holder changes,
    one when it is over (``stream`` default: this process's stderr)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self._holder: str | None = None
        self._since = 0.0

    def __call__(self, wait: QueueWait | None) -> None:
        out = self.stream or sys.stderr
        if wait is None:
            if self._holder is not None:
                print(
                    f"[gpugeek] the pool is free: running after {time.monotonic() - self._since:.1f} s in the queue",
                    file=out,
                    flush=True,
                )
            self._holder = None
            return
        if self._holder is None:
            self._since = time.monotonic() - wait.waited_s
        if wait.holder.id != self._holder:
            print(f"[gpugeek] {wait.describe()}", file=out, flush=True)
            self._holder = wait.holder.id


@dataclass(frozen=True)
class Turn:
    """How a job's wait ended: it runs (``cancelled`` is None), after ``waited_s``; or it left the
    queue without running, and ``cancelled`` says why."""

    waited_s: float
    cancelled: str | None = None
    previous: str | None = None  # the pool's previous job, whoever ran it (None: this is its first)


class PoolQueue:
    """The queue of ``pool``'s jobs, as seen from this process."""

    def __init__(self, pool: Pool, clock: Callable[[], float] = time.time) -> None:
        self.pool = pool
        self.clock = clock

    def wait_turn(
        self,
        record: JobRecord,
        wait: bool = True,
        on_wait: WaitCallback | None = None,
        cancelled: Callable[[], str | None] = lambda: None,
        submitted_by: str | None = None,
    ) -> Turn:
        """Join the queue and return when ``record``'s job may run (or has left the queue).

        ``wait=False``: a busy pool raises :class:`PoolBusyError` naming its holder, and the job is
        forgotten. A ``KeyboardInterrupt`` while waiting, or ``cancelled()`` saying why, leaves the
        queue: the turn says ``cancelled while queued``. ``submitted_by`` names who people know
        sent the job when this process runs it for them (a detached job: its notebook).
        """
        started = time.monotonic()
        submitter = this_submitter()
        if submitted_by is not None:
            submitter = dataclasses.replace(submitter, label=f"{submitted_by}{DETACHED}")
            keeper = self.pool.running.keeper_pid
            if keeper is not None:  # a kept Slurm pool: the job lives while its scheduler's process does
                submitter = dataclasses.replace(submitter, pid=keeper, started_at=process_started_at(keeper))
        place: QueuePlace = record.queue(submitter)
        told: tuple[str, ...] | None = None
        told_at = 0.0
        try:
            while True:
                if place.status is JobStatus.RUNNING:  # its turn came
                    if told is not None and on_wait is not None:
                        on_wait(None)
                    return Turn(time.monotonic() - started, previous=place.previous)
                if place.status is not JobStatus.QUEUED:  # it was ended while waiting (its pool stopped)
                    return Turn(time.monotonic() - started, cancelled=record.failure_reason() or "it left the queue")
                orphans = [job.id for job in place.ahead if self._submitter_gone(job)]
                if orphans:
                    record.end_orphans(orphans, "its submitter ended (the process that ran or queued it is gone)")
                    place = record.take_turn()
                    continue
                now = self.clock()
                if not wait:
                    record.withdraw()
                    raise self._busy(place.ahead[0], now)
                ids = tuple(job.id for job in place.ahead)
                if on_wait is not None and (ids != told or time.monotonic() - told_at >= REDESCRIBE_S):
                    on_wait(
                        QueueWait(self.pool.name, record.job_id, tuple(place.ahead), time.monotonic() - started, now)
                    )
                    told, told_at = ids, time.monotonic()
                time.sleep(POLL_S)
                why = cancelled()
                if why is not None:
                    return self._leave(
                        record, place, f"cancelled while queued: {why}", on_wait, told is not None, started
                    )
                place = record.take_turn()
        except KeyboardInterrupt:
            return self._leave(record, place, "cancelled while queued", on_wait, told is not None, started)

    def _leave(
        self,
        record: JobRecord,
        place: QueuePlace,
        reason: str,
        on_wait: WaitCallback | None,
        told: bool,
        started: float,
    ) -> Turn:
        if place.ahead:
            reason += f" (waiting for {describe_job(place.ahead[0], self.clock())})"
        record.leave_queue(reason)
        if on_wait is not None and told:
            on_wait(None)
        return Turn(time.monotonic() - started, cancelled=reason)

    @staticmethod
    def _submitter_gone(job: JobRow) -> bool:
        if job.submitter_pid is None or job.submitter_host != socket.gethostname():
            return False
        return not process_is_alive(job.submitter_pid, job.submitter_started_at or 0.0)

    def _busy(self, holder: JobRow, now: float) -> PoolBusyError:
        return PoolBusyError(
            Phrase(
                "pool {name} is busy with {holder}; {advice}",
                name=Value(self.pool.name),
                holder=describe_job(holder, now),
                advice=PerSurface(
                    core="wait for it, or submit again later",
                    magic="run again without --no-wait to wait your turn",
                    python="call again with wait=True to wait your turn",
                    server='send "wait": true to wait your turn',
                ),
            )
        )
