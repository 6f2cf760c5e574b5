"""Job rows: one per distributed job, with its outcome once it ends."""

from __future__ import annotations

import json
from typing import Any

from ..errors import NotFoundError, PerSurface, Phrase, Value
from ._connection import Database
from ._records import OPEN_JOB_SQL, JobRecord, JobStatus, QueuePlace, Submitter, job_record

# a pool's open jobs ahead of one of its jobs, in arrival order; rows of releases before the queue
# (no submitter) wait for nobody
_AHEAD = (
    f"SELECT * FROM jobs WHERE pool_id = :pool AND status IN {OPEN_JOB_SQL} AND submitter_pid IS NOT NULL"
    " AND rowid < (SELECT rowid FROM jobs WHERE id = :id) ORDER BY rowid"
)
# the pool's newest job before one of its jobs that ran ranks (one that left the queue did not)
_PREVIOUS = (
    f"SELECT id FROM jobs WHERE pool_id = :pool AND status NOT IN {OPEN_JOB_SQL} AND rank_exits_json IS NOT NULL"
    " AND rowid < (SELECT rowid FROM jobs WHERE id = :id) ORDER BY rowid DESC LIMIT 1"
)

_FINISH = (
    "UPDATE jobs SET status = :status, ended_at = CASE WHEN :final THEN :now ELSE ended_at END,"
    " restarts = :restarts, rank_exits_json = :rank_exits, failure_reason = :reason, summary_json = :summary"
    " WHERE id = :id"
)


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
        """Record a job that runs now, outside any queue (as releases before the queue wrote them)."""
        with self._write() as db:
            self._insert(db, job_id, pool_id, pool_name, kind, code_sha256, ranks, hyperparams, JobStatus.RUNNING, None)
        return self.job(job_id)

    def queue_job(
        self,
        job_id: str,
        pool_id: int,
        pool_name: str,
        kind: str,
        code_sha256: str,
        ranks: int,
        submitter: Submitter,
        hyperparams: dict[str, Any] | None = None,
    ) -> QueuePlace:
        """Put a job at the end of its pool's queue; its place there.

        One transaction: a job with nobody ahead is written ``running`` at once (the common case
        costs one write), else ``queued``; :meth:`take_turn` then moves it on when its turn comes.
        """
        with self._write() as db:
            now = self._insert(
                db, job_id, pool_id, pool_name, kind, code_sha256, ranks, hyperparams, JobStatus.QUEUED, submitter
            )
            return self._take_turn(db, job_id, pool_id, now, just_queued=True)

    def _insert(
        self,
        db: Any,
        job_id: str,
        pool_id: int,
        pool_name: str,
        kind: str,
        code_sha256: str,
        ranks: int,
        hyperparams: dict[str, Any] | None,
        status: JobStatus,
        submitter: Submitter | None,
    ) -> float:
        now = self.clock()
        db.execute(
            "INSERT INTO jobs (id, pool_id, pool_name, kind, code_sha256, hyperparams_json, ranks, status,"
            " started_at, queued_at, submitter, submitter_pid, submitter_host, submitter_started_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                job_id,
                pool_id,
                pool_name,
                kind,
                code_sha256,
                json.dumps(hyperparams or {}, default=str),
                ranks,
                status.value,
                now,
                now if submitter is not None else None,
                submitter.label if submitter else None,
                submitter.pid if submitter else None,
                submitter.host if submitter else None,
                submitter.started_at if submitter else None,
            ),
        )
        return now

    def take_turn(self, job_id: str, pool_id: int) -> QueuePlace:
        """The place of job ``job_id`` in its pool's queue; with nobody ahead, a queued job is
        ``running`` from now on."""
        with self._write() as db:
            return self._take_turn(db, job_id, pool_id, self.clock())

    def _take_turn(self, db: Any, job_id: str, pool_id: int, now: float, just_queued: bool = False) -> QueuePlace:
        status = JobStatus.QUEUED  # a row written in this transaction is: no need to read it back
        if not just_queued:
            own = db.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            status = JobStatus(own["status"]) if own else JobStatus.CANCELLED
            if status is not JobStatus.QUEUED:
                return QueuePlace(status, [], None)
        ahead = [job_record(r) for r in db.execute(_AHEAD, {"pool": pool_id, "id": job_id})]
        previous = None
        if not ahead:
            db.execute("UPDATE jobs SET status = 'running', started_at = ? WHERE id = ?", (now, job_id))
            status = JobStatus.RUNNING
            row = db.execute(_PREVIOUS, {"pool": pool_id, "id": job_id}).fetchone()
            previous = row["id"] if row else None
        return QueuePlace(status, ahead, previous)

    def leave_queue(self, job_id: str, reason: str) -> bool:
        """A queued job leaves its pool's queue without running: ``cancelled`` with ``reason``, its run
        (and its cost) empty. False when it was no longer queued."""
        now = self.clock()
        with self._write() as db:
            gone = db.execute(
                "UPDATE jobs SET status = 'cancelled', started_at = ?, ended_at = ?, failure_reason = ?"
                " WHERE id = ? AND status = 'queued'",
                (now, now, reason, job_id),
            )
            return bool(gone.rowcount)

    def withdraw_job(self, job_id: str) -> None:
        """Forget a queued job that was refused at once (it asked not to wait): it never was."""
        with self._write() as db:
            db.execute("DELETE FROM jobs WHERE id = ? AND status = 'queued'", (job_id,))

    def end_orphaned_jobs(self, job_ids: list[str], reason: str) -> None:
        """Open jobs whose submitter is gone: a running one failed, a queued one cancelled, with ``reason``."""
        now = self.clock()
        with self._write() as db:
            db.execute(
                "UPDATE jobs SET ended_at = :now, failure_reason = COALESCE(failure_reason, :reason),"
                " started_at = CASE WHEN status = 'queued' THEN :now ELSE started_at END,"
                " status = CASE WHEN status = 'queued' THEN 'cancelled' ELSE 'failed' END"
                f" WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN {OPEN_JOB_SQL}",
                {"now": now, "reason": reason, "ids": json.dumps(job_ids)},
            )

    def set_job_ranks(self, job_id: str, ranks: int) -> None:
        """The job runs on ``ranks`` ranks (its pool's size was not yet known when it was queued)."""
        with self._write() as db:
            db.execute("UPDATE jobs SET ranks = ? WHERE id = ?", (ranks, job_id))

    def open_jobs(self, pool_id: int) -> list[JobRecord]:
        """The pool's queue: its running and queued jobs, in arrival order."""
        rows = self._read(
            f"SELECT * FROM jobs WHERE pool_id = ? AND status IN {OPEN_JOB_SQL} AND submitter_pid IS NOT NULL"
            " ORDER BY rowid",
            (pool_id,),
        )
        return [job_record(r) for r in rows]

    def queue_positions(self, pool_ids: list[int]) -> dict[str, int]:
        """Each queued job of these pools -> its place in its pool's queue (1: next to run)."""
        rows = self._read(
            "SELECT id, status, pool_id FROM jobs WHERE pool_id IN (SELECT value FROM json_each(?))"
            f" AND status IN {OPEN_JOB_SQL} AND submitter_pid IS NOT NULL ORDER BY pool_id, rowid",
            (json.dumps(sorted(set(pool_ids))),),
        )
        positions: dict[str, int] = {}
        place: dict[int, int] = {}
        for row in rows:
            if row["status"] == JobStatus.QUEUED.value:
                place[row["pool_id"]] = place.get(row["pool_id"], 0) + 1
                positions[row["id"]] = place[row["pool_id"]]
        return positions

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

    def note_job(self, job_id: str, key: str, text: str) -> None:
        """Keep ``text`` under ``key`` in a running job's summary (a slow rank named), readable before
        it ends; :meth:`finish_job` writes the whole summary, its notes included, at the end."""
        with self._write() as db:
            db.execute(
                "UPDATE jobs SET summary_json = json_set(COALESCE(summary_json, '{}'), ?, ?) WHERE id = ?",
                (f"$.{key}", text, job_id),
            )

    def finish_job(
        self,
        job_id: str,
        status: JobStatus | str,
        restarts: int,
        rank_exits: list[Any],
        failure_reason: str | None,
        summary: dict[str, Any],
        behind: bool = False,
    ) -> None:
        """Record a job's outcome: its final ``status`` (``ended_at`` now), restarts, each rank's exit,
        why it failed (``None``: it did not) and a JSON-ready summary. ``behind``: written a moment
        later, by this process's next write at the latest (:mod:`._behind`)."""
        status = JobStatus(status)
        params = {
            "id": job_id,
            "status": status.value,
            "final": status.is_final,
            "now": self.clock(),
            "restarts": int(restarts),
            "rank_exits": json.dumps(rank_exits, default=str),
            "reason": failure_reason,
            "summary": json.dumps(summary, default=str),
        }
        if behind:
            self._write_behind(_FINISH, params)
            return
        with self._write() as db:
            db.execute(_FINISH, params)

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
