"""Schedules and their runs: what to run when, and one row per occurrence.

Schedule statuses: ``active <-> paused`` (by hand, or ``paused`` after ``max_failures`` failed runs
in a row, with the reason); either -> ``deleted`` (final: the row and its runs stay, unlisted).

Run statuses: ``waiting`` (its occurrence came while the previous run went on, overlap ``queue``)
-> ``running`` -> ``succeeded | failed | cancelled``; ``skipped`` (the previous run still went on,
overlap ``skip``; or a queued one found another waiting) is written final at once; ``lost``: its
agent stopped before the run's job was recorded.
"""

from __future__ import annotations

import enum
import sqlite3
from dataclasses import dataclass
from typing import Any

from ..errors import ConflictError, NotFoundError, PerSurface, Phrase, Value
from ._connection import Database


class ScheduleStatus(str, enum.Enum):
    ACTIVE = "active"
    PAUSED = "paused"
    DELETED = "deleted"

    def __str__(self) -> str:
        return self.value


class RunStatus(str, enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    LOST = "lost"

    @property
    def is_final(self) -> bool:
        return self not in (RunStatus.WAITING, RunStatus.RUNNING)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ScheduleRecord:
    """One row of ``schedules`` (``request`` is the pickled job request each run is made from)."""

    id: str
    name: str
    kind: str
    request: bytes
    every_s: float | None
    cron: str | None
    timezone: str
    resume: str | None
    checkpoints: str
    pool_name: str | None
    pool_spec_json: str | None
    overlap: str
    max_failures: int
    failures: int
    status: ScheduleStatus
    reason: str | None
    created_at: float
    next_run_at: float
    created_by: str | None


@dataclass(frozen=True)
class ScheduleRun:
    """One row of ``schedule_runs``: an occurrence of a schedule and what became of it."""

    id: int
    schedule_id: str
    due_at: float
    missed: int  # how many occurrences this one run stands for, when several came due while no agent ran
    status: RunStatus
    job_id: str | None
    pool_name: str | None
    resumed_from: str | None
    reason: str | None
    started_at: float | None
    ended_at: float | None


def _schedule(row: sqlite3.Row) -> ScheduleRecord:
    values = dict(row)
    values["status"] = ScheduleStatus(values["status"])
    values["request"] = bytes(values["request"])
    return ScheduleRecord(**values)


def _run(row: sqlite3.Row) -> ScheduleRun:
    values = dict(row)
    values["status"] = RunStatus(values["status"])
    return ScheduleRun(**values)


_OPEN_RUNS = "('waiting', 'running')"
_LISTED = PerSurface(
    core="gpugeek_jupyter.schedules.list_schedules() lists them",
    magic="%gpugeek_schedules lists them",
    server="GET /gpugeek/schedules lists them",
)


class ScheduleQueries(Database):
    """The ``schedules`` and ``schedule_runs`` tables."""

    def add_schedule(self, **fields: Any) -> ScheduleRecord:
        """Record a new active schedule (``fields``: the columns of :class:`ScheduleRecord` but the
        status, failures and reason); a live schedule of the same name is a ConflictError."""
        fields = {**fields, "status": ScheduleStatus.ACTIVE.value, "created_at": fields.get("created_at", self.clock())}
        names = ", ".join(fields)
        marks = ", ".join(f":{k}" for k in fields)
        try:
            with self._write() as db:
                db.execute(f"INSERT INTO schedules ({names}) VALUES ({marks})", fields)
        except sqlite3.IntegrityError:
            raise ConflictError(
                Phrase("a schedule named {value} exists (delete it first, or pick another {field})"),
                field="name",
                value=fields["name"],
                rule="a name no schedule has",
            ) from None
        return self.schedule(fields["id"])

    def schedule(self, id_or_name: str) -> ScheduleRecord:
        """The schedule of that id, or the live one of that name; NotFoundError naming it."""
        rows = self._read(
            "SELECT * FROM schedules WHERE id = ? OR (name = ? AND status != 'deleted') ORDER BY status = 'deleted'",
            (id_or_name, id_or_name),
        )
        if not rows:
            raise NotFoundError(Phrase("no schedule {name} ({listed})", name=Value(id_or_name), listed=_LISTED))
        return _schedule(rows[0])

    def list_schedules(self, include_deleted: bool = False) -> list[ScheduleRecord]:
        """Every schedule, oldest first (deleted ones only when asked)."""
        where = "" if include_deleted else "WHERE status != 'deleted'"
        return [_schedule(r) for r in self._read(f"SELECT * FROM schedules {where} ORDER BY created_at, id")]

    def active_schedules(self) -> list[ScheduleRecord]:
        return [
            _schedule(r) for r in self._read("SELECT * FROM schedules WHERE status = 'active' ORDER BY next_run_at")
        ]

    def set_schedule_status(
        self, schedule_id: str, status: ScheduleStatus, reason: str | None = None, next_run_at: float | None = None
    ) -> ScheduleRecord:
        """Pause, resume (the failures in a row start again from 0) or delete a schedule."""
        with self._write() as db:
            db.execute(
                "UPDATE schedules SET status = ?, reason = ?, next_run_at = COALESCE(?, next_run_at),"
                " failures = CASE WHEN ? = 'active' THEN 0 ELSE failures END WHERE id = ? AND status != 'deleted'",
                (status.value, reason, next_run_at, status.value, schedule_id),
            )
        return self.schedule(schedule_id)

    def set_next_run(self, schedule_id: str, next_run_at: float) -> None:
        with self._write() as db:
            db.execute("UPDATE schedules SET next_run_at = ? WHERE id = ?", (next_run_at, schedule_id))

    def count_outcome(self, schedule_id: str, failed: bool, why: str | None = None) -> ScheduleRecord:
        """Count a run's outcome: a success ends a row of failures; the ``max_failures``-th failure in a
        row pauses the schedule, saying so with ``why`` (the last failure)."""
        with self._write() as db:
            if not failed:
                db.execute("UPDATE schedules SET failures = 0 WHERE id = ?", (schedule_id,))
            else:
                db.execute("UPDATE schedules SET failures = failures + 1 WHERE id = ?", (schedule_id,))
                db.execute(
                    "UPDATE schedules SET status = 'paused', reason = 'paused after ' || failures ||"
                    " ' failed runs in a row (the last: ' || ? || ')' WHERE id = ? AND status = 'active'"
                    " AND failures >= max_failures",
                    (why or "no reason recorded", schedule_id),
                )
        return self.schedule(schedule_id)

    # -- runs ---------------------------------------------------------------------------------------
    def add_run(
        self, schedule_id: str, due_at: float, status: RunStatus, missed: int = 0, reason: str | None = None
    ) -> ScheduleRun:
        """Record an occurrence: ``running`` and ``waiting`` from now, or one that is final at once
        (``skipped``)."""
        now = self.clock()
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO schedule_runs (schedule_id, due_at, missed, status, reason, started_at, ended_at)"
                " VALUES (?,?,?,?,?,?,?)",
                (
                    schedule_id,
                    due_at,
                    missed,
                    status.value,
                    reason,
                    now if status is RunStatus.RUNNING else None,
                    now if status.is_final else None,
                ),
            )
            run_id = int(cursor.lastrowid or 0)
        return self.run(run_id)

    def run(self, run_id: int) -> ScheduleRun:
        rows = self._read("SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
        if not rows:
            raise NotFoundError(Phrase("no run {run} of any schedule", run=Value(run_id)))
        return _run(rows[0])

    def start_run(self, run_id: int) -> None:
        """A waiting run begins."""
        with self._write() as db:
            db.execute(
                "UPDATE schedule_runs SET status = 'running', started_at = ? WHERE id = ? AND status = 'waiting'",
                (self.clock(), run_id),
            )

    def run_submitted(self, run_id: int, job_id: str, pool_name: str, resumed_from: str | None) -> None:
        """The run's job is recorded (and runs on ``pool_name``, from checkpoint ``resumed_from``)."""
        with self._write() as db:
            db.execute(
                "UPDATE schedule_runs SET job_id = ?, pool_name = ?, resumed_from = ? WHERE id = ?",
                (job_id, pool_name, resumed_from, run_id),
            )

    def end_run(self, run_id: int, status: RunStatus, reason: str | None = None) -> bool:
        """The run ended so (once: an ended run never moves back); whether this call ended it."""
        with self._write() as db:
            cursor = db.execute(
                f"UPDATE schedule_runs SET status = ?, reason = ?, ended_at = ? WHERE id = ? AND status IN {_OPEN_RUNS}",
                (status.value, reason, self.clock(), run_id),
            )
            return cursor.rowcount == 1

    def schedule_runs(self, schedule_id: str, limit: int = 50) -> list[ScheduleRun]:
        """The schedule's runs, newest first."""
        rows = self._read(
            "SELECT * FROM schedule_runs WHERE schedule_id = ? ORDER BY id DESC LIMIT ?", (schedule_id, limit)
        )
        return [_run(r) for r in rows]

    def open_runs(self) -> list[ScheduleRun]:
        """Every run still waiting or running, of any schedule, oldest first."""
        return [_run(r) for r in self._read(f"SELECT * FROM schedule_runs WHERE status IN {_OPEN_RUNS} ORDER BY id")]
