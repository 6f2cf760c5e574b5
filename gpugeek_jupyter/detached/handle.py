"""``JobHandle``: a job that runs without a kernel waiting for it, reachable from any process.

>>> handle = gpugeek_jupyter.job("job-1a2b3c4da910")     # doctest: +SKIP
>>> handle.status(), handle.wait(timeout=600).result().values     # doctest: +SKIP
('running', [0.29, 0.29])
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import GpugeekError, JobFailedError, Phrase, Value
from ..polling import wait_for
from ..store import JobRecord, get_registry
from .results import load_result
from .stream import follow

if TYPE_CHECKING:
    import pandas

    from ..jobs.result import JobResult
    from ..jobs.where import WhereReport

WAIT_POLL_S = 0.2
SWEEP_S = 1.0  # while waiting, pools whose owner died (an agent killed) are swept this often
RESULT_GRACE_S = 10.0  # after its row ended, the agent writes the result file within this
CANCEL_WAIT_S = 30.0  # a cancelled attached job ends within this (its ranks stopped, then their workers)


class JobHandle:
    """A detached job (or any job of the registry) by its id."""

    def __init__(self, job_id: str) -> None:
        self.id = job_id
        self._swept_at = 0.0

    def __repr__(self) -> str:
        return f"<JobHandle {self.id} {self.status()}>"

    def record(self) -> JobRecord:
        """The job's registry row (status, times, submitter, failure)."""
        return get_registry().job(self.id)

    def status(self) -> str:
        """``queued``, ``running``, ``succeeded``, ``failed`` or ``cancelled``."""
        return self.record().status.value

    def done(self) -> bool:
        """Whether the job has ended; a job whose agent died is ended here (its pool is swept lost)."""
        now = time.monotonic()
        if now - self._swept_at >= SWEEP_S:  # sweep first, then one read says it all
            self._swept_at = now
            from ..config import get_config

            get_registry().mark_lost_pools(get_config().lost_after_seconds)
        return self.record().status.is_final

    def wait(self, timeout: float | None = None) -> JobHandle:
        """Block until the job has ended (``timeout`` seconds at most: then ``TimeoutError``)."""
        if not wait_for(self.done, timeout=math.inf if timeout is None else timeout, interval=WAIT_POLL_S):
            raise TimeoutError(f"job {self.id!r} is still {self.status()} after {timeout:.0f} s")
        return self

    def result(self, timeout: float | None = None) -> JobResult:
        """The job's result, every rank's value in ``.values``, once it has ended (waits for it)."""
        self.wait(timeout)
        result = wait_for(lambda: load_result(self.id), timeout=RESULT_GRACE_S, interval=WAIT_POLL_S)
        if result is None:
            record = self.record()
            raise GpugeekError(
                Phrase(
                    "job {job} ended {status} and left no result{why}: only detached jobs keep one",
                    job=Value(self.id),
                    status=record.status.value,
                    why=f" ({record.failure_reason})" if record.failure_reason else "",
                )
            )
        return result

    def events(self, follow_live: bool = True) -> Iterator[dict[str, Any]]:
        """The job's output events from its start (the replay), then, with ``follow_live``, as they come."""
        return follow(self.id, keep_following=lambda: follow_live and not self.done())

    def logs(self, rank: int | None = None, follow: bool = False) -> str | Iterator[str]:
        """What the ranks wrote so far (``rank``: that rank's only); with ``follow``, an iterator of
        lines labelled ``[rank N]`` that goes on until the job ends."""
        from ..jobs.logs import JobLogs

        if follow:
            return self._follow_lines(rank)
        ranks = [rank] if rank is not None else JobLogs.ranks(self.id)
        return "".join(JobLogs.read(self.id, r) for r in ranks)

    def metrics(self) -> pandas.DataFrame:
        """The values its ranks logged with ``gg.log`` so far (``job, attempt, rank, step, time,
        name, value``), while it runs too."""
        from ..jobs.metrics import metrics_frame

        return metrics_frame(self.id)

    def cancel(self, reason: str = "cancelled from its handle", timeout: float = CANCEL_WAIT_S) -> JobHandle:
        """Stop the job (a queued one leaves its pool's queue), whichever process runs it: the
        detached agent, or the notebook or script that submitted it (its cell ends ``cancelled``
        with ``reason``); returns once it has ended (``timeout`` s at most: then ``JobFailedError``)."""
        from ..jobs.pool_queue import is_detached

        record = self.record()
        if record.status.is_final:
            return self
        if is_detached(record):
            self._cancel_detached(record, reason)
        else:
            from ..jobs.cancel import request_cancel

            request_cancel(record, reason)
        if not wait_for(self.done, timeout=timeout, interval=WAIT_POLL_S):
            raise JobFailedError(
                Phrase(
                    "job {job} is still {status} {timeout} s after the cancel: {submitter} has not "
                    "stopped it (is the process busy, or gone?)",
                    job=Value(self.id),
                    status=self.status(),
                    timeout=f"{timeout:.0f}",
                    submitter=record.submitter or "the process that runs it",
                )
            )
        return self

    def _cancel_detached(self, record: JobRecord, reason: str) -> None:
        from .connection import running_agent

        agent = running_agent()
        if agent is None or not agent.cancel(self.id, reason)["cancelled"]:
            raise JobFailedError(
                Phrase(
                    "job {job} is not a detached job of this user's agent: interrupt the process that runs "
                    "it ({submitter})",
                    job=Value(self.id),
                    submitter=record.submitter or "its submitter is not recorded",
                )
            )

    def where(self) -> WhereReport:
        """Where each rank of the running job is (as ``%gpugeek_where``)."""
        from ..jobs.where import where_report

        return where_report(self.record().pool_name)

    def _follow_lines(self, rank: int | None) -> Iterator[str]:
        for event in self.events():
            if event["kind"] == "out" and (rank is None or event["rank"] == rank):
                for line in event["text"].splitlines():
                    yield f"[rank {event['rank']}] {line}"


def job(job_id: str) -> JobHandle:
    """The handle of job ``job_id`` (as ``%gpugeek_jobs`` lists it), from any process of the user."""
    handle = JobHandle(job_id)
    handle.record()  # NotFoundError naming the id, when there is no such job
    return handle
