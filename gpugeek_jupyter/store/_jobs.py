"""Job rows: one per distributed job, with its outcome once it ends."""

from __future__ import annotations

import json
from typing import Any

from ..errors import NotFoundError, PerSurface, Phrase, Value
from ._connection import Database
from ._records import JobRecord, JobStatus, job_record


class JobQueries(Database):
    """The ``jobs`` table. Every update is a fixed statement: callers say what happened, not which columns."""

    def add_job(
        self,
        job_id: str,
        pool_id: int,
        pool_name: str,
        kind: str,
        code_sha256: str,
        ranks: int,
        hyperparams: dict[str, Any] | None = None,
    ) -> JobRecord:
        """Record a job that starts running now."""
        with self._write() as db:
            db.execute(
                "INSERT INTO jobs (id, pool_id, pool_name, kind, code_sha256, hyperparams_json, ranks, status, started_at)"
                " VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    job_id,
                    pool_id,
                    pool_name,
                    kind,
                    code_sha256,
                    json.dumps(hyperparams or {}, default=str),
                    ranks,
                    JobStatus.RUNNING.value,
                    self.clock(),
                ),
            )
        return self.job(job_id)

    def set_job_status(
        self,
        job_id: str,
        status: JobStatus | str,
        failure_reason: str | None = None,
        ended_at: float | None = None,
    ) -> None:
        """Move a job to ``status``; a final status sets ``ended_at`` (default now). ``failure_reason``
        replaces the job's when given.

        >>> registry.set_job_status("job-7", JobStatus.CANCELLED, ended_at=pool.ended_at)  # doctest: +SKIP
        """
        status = JobStatus(status)
        end = (ended_at if ended_at is not None else self.clock()) if status.is_final else None
        with self._write() as db:
            db.execute(
                "UPDATE jobs SET status = :status, failure_reason = COALESCE(:reason, failure_reason),"
                " ended_at = CASE WHEN :final THEN :ended_at ELSE ended_at END WHERE id = :id",
                {
                    "id": job_id,
                    "status": status.value,
                    "reason": failure_reason,
                    "final": status.is_final,
                    "ended_at": end,
                },
            )

    def set_job_failure_reason(self, job_id: str, failure_reason: str) -> None:
        """Say why a job will end before it does (a guard stopping its pool), leaving its status as it is."""
        with self._write() as db:
            db.execute("UPDATE jobs SET failure_reason = ? WHERE id = ?", (failure_reason, job_id))

    def finish_job(
        self,
        job_id: str,
        status: JobStatus | str,
        restarts: int,
        rank_exits: list[Any],
        failure_reason: str | None,
        summary: dict[str, Any],
    ) -> None:
        """Record a job's outcome: its final ``status`` (``ended_at`` now), restarts, each rank's exit,
        why it failed (``None``: it did not) and a JSON-ready summary."""
        status = JobStatus(status)
        with self._write() as db:
            db.execute(
                "UPDATE jobs SET status = :status, ended_at = CASE WHEN :final THEN :now ELSE ended_at END,"
                " restarts = :restarts, rank_exits_json = :rank_exits, failure_reason = :reason, summary_json = :summary"
                " WHERE id = :id",
                {
                    "id": job_id,
                    "status": status.value,
                    "final": status.is_final,
                    "now": self.clock(),
                    "restarts": int(restarts),
                    "rank_exits": json.dumps(rank_exits, default=str),
                    "reason": failure_reason,
                    "summary": json.dumps(summary, default=str),
                },
            )

    def job(self, job_id: str) -> JobRecord:
        """The job with ``job_id``; NotFoundError otherwise."""
        rows = self._read("SELECT * FROM jobs WHERE id = ?", (job_id,))
        if not rows:
            raise NotFoundError(
                Phrase(
                    "no job with id {job_id}{see}",
                    job_id=Value(job_id),
                    see=PerSurface(
                        core="",
                        python=" (see ClusterClient().jobs())",
                        magic=" (see %gpugeek_jobs)",
                        server=" (see GET /gpugeek/jobs)",
                    ),
                )
            )
        return job_record(rows[0])

    def list_jobs(self, pool_id: int | None = None, limit: int = 200) -> list[JobRecord]:
        """The ``limit`` newest jobs (of pool ``pool_id``, when given), newest first."""
        if pool_id is None:
            rows = self._read("SELECT * FROM jobs ORDER BY started_at DESC LIMIT ?", (limit,))
        else:
            rows = self._read("SELECT * FROM jobs WHERE pool_id = ? ORDER BY started_at DESC LIMIT ?", (pool_id, limit))
        return [job_record(r) for r in rows]
