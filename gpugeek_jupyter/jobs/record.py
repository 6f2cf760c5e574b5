"""The one writer of a job's row in the registry while its pool is live.

A row is created when the job joins its pool's queue (:mod:`.pool_queue`): ``running`` at once when
nobody is ahead, else ``queued`` until its turn; it is ended once, with the job's final status. A stop of the pool reaches the job through the pool's before-stop
event, so the job ends ``cancelled`` with the stop's reason before its workers go; the store closes
what is still open when a pool ends (``cancelled`` for a stop, ``failed`` for a failed or lost pool).

The end of a job that succeeded within :data:`ENDED_BEHIND_WITHIN_S` is written behind: by this
process's next registry write (the next job's queue row), before its next read, or within
``store._behind.WRITE_WITHIN_S``. A process killed in between loses that end (its row is ended as a
dead submitter's by whoever finds it in the queue); a job that ran longer has its end written before
its result is returned, so a crash never loses it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..pools.versions import pool_software
from ..store import JobStatus, QueuePlace, Submitter
from .logs import rank_state
from .request import JobRequest
from .result import JobResult

if TYPE_CHECKING:
    from ..pools import Pool

ENDED_BEHIND_WITHIN_S = 1.0  # a job that succeeded within this has its end row written behind


class JobRecord:
    """The registry row of one job of ``pool``."""

    def __init__(self, pool: Pool, job_id: str, request: JobRequest, kept: bool = True) -> None:
        self.registry = pool.registry  # the registry that holds this pool's row
        self.pool = pool
        self.job_id = job_id
        self.request = request
        self.kept = kept  # False: the agent's own work (warming the group up), not a user's job
        self.written = False
        self.world_size = 0  # as the row says
        self.also_tell: Callable[[dict[str, Any]], None] | None = None  # lineage, to the job's MLflow run
        self.notes: dict[str, str] = {}  # said while it ran (a slow rank): kept in its summary

    # -- the queue (kept records only: the agent's own work runs within a job's turn) ------------
    def queue(self, submitter: Submitter) -> QueuePlace:
        """Join the pool's queue (``running`` at once when nobody is ahead)."""
        self.world_size = self.request.world_size(int(self.pool.spec.count))
        place = self.registry.queue_job(
            self.job_id,
            self.pool.id,
            self.pool.name,
            self.request.kind,
            self.request.sha256,
            self.world_size,
            submitter,
            self.request.hyperparams,
        )
        self.written = True
        return place

    def take_turn(self) -> QueuePlace:
        return self.registry.take_turn(self.job_id, self.pool.id)

    def leave_queue(self, reason: str) -> None:
        self.registry.leave_queue(self.job_id, reason)

    def withdraw(self) -> None:
        """Refused at once (it asked not to wait): no row is left."""
        self.registry.withdraw_job(self.job_id)
        self.written = False

    def end_orphans(self, job_ids: list[str], reason: str) -> None:
        """End the rows of jobs ahead whose submitter is gone."""
        self.registry.end_orphaned_jobs(job_ids, reason)

    def failure_reason(self) -> str | None:
        return self.registry.job(self.job_id).failure_reason

    # -- the run ----------------------------------------------------------------------------------
    def started(self, world_size: int) -> None:
        """The ranks were launched (idempotent: a restart keeps the row); the world size is written
        again only when it is not the one the job was queued with (an elastic pool)."""
        if self.written and world_size != self.world_size:
            self.registry.set_job_ranks(self.job_id, world_size)
            self.world_size = world_size

    def lineage(self, record: dict[str, Any]) -> None:
        """Keep a rank's lineage record (:mod:`.lineage`) with the job."""
        if self.kept:
            self.registry.add_lineage(self.job_id, record["role"], record["uri"], record["fingerprint"])
        if self.also_tell is not None:
            self.also_tell(record)

    def note(self, key: str, text: str) -> None:
        """Keep what was said of the running job (``slow_rank``: the line naming it) with its row."""
        self.notes[key] = text
        if self.written and self.kept:
            self.registry.note_job(self.job_id, key, text)

    def finished(self, result: JobResult) -> None:
        """The job's final status, restarts, per-rank exits and why it failed; the end of a job that
        succeeded within :data:`ENDED_BEHIND_WITHIN_S` is written behind (``Registry.finish_job``)."""
        if not self.written:
            return
        self.registry.finish_job(
            self.job_id,
            status=result.status,
            restarts=result.restarts,
            rank_exits=result.returncodes,
            failure_reason=result.failure,
            summary={
                "duration_s": round(result.duration_s, 4),
                "failed_rank": result.failed_rank,
                "states": {str(r.rank): rank_state(r.status) for r in result.ranks},  # JobLogs.states reads them
                **({"where": result.where} if result.where else {}),
                **({"sizes": result.sizes} if len(result.sizes) > 1 else {}),
                **({"software": software} if (software := pool_software(self.pool)) else {}),  # lineage
                **self.notes,
            },
            behind=result.ok and result.duration_s < ENDED_BEHIND_WITHIN_S,
        )

    def crashed(self, error: BaseException) -> None:
        """The driver itself failed: the row must not stay ``running``."""
        if self.written:
            self.registry.set_job_status(
                self.job_id, JobStatus.FAILED, failure_reason=f"{type(error).__name__}: {error}"
            )
