"""The ``lineage`` table: what each job read, resumed from and wrote (see :mod:`gpugeek_jupyter.jobs.lineage`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._connection import Database

ROLES = ("input", "resumed_from", "output")


@dataclass(frozen=True)
class LineageRecord:
    """One thing a job read (``input``), resumed from (``resumed_from``) or wrote (``output``)."""

    job_id: str
    role: str
    uri: str
    fingerprint: dict[str, Any]
    recorded_at: float


class LineageQueries(Database):
    """Rows are kept once per job, role and location (every rank may report the same dataset)."""

    def add_lineage(self, job_id: str, role: str, uri: str, fingerprint: dict[str, Any]) -> None:
        """Record that ``job_id`` read, resumed from or wrote ``uri`` (as ``fingerprint`` describes
        it); a second report of the same job, role and location is the first's (a checkpoint
        written again at the same step keeps its newest fingerprint)."""
        if role not in ROLES:
            raise ValueError(f"lineage role must be one of {', '.join(ROLES)}, got {role!r}")
        with self._write() as db:
            db.execute(
                "INSERT INTO lineage (job_id, role, uri, fingerprint, recorded_at) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (job_id, role, uri) DO UPDATE SET fingerprint = excluded.fingerprint"
                " WHERE excluded.role = 'output'",
                (job_id, role, uri, json.dumps(fingerprint, sort_keys=True, default=str), self.clock()),
            )

    def lineage_of(self, job_id: str) -> list[LineageRecord]:
        """What ``job_id`` read, resumed from and wrote, in the order it was recorded."""
        rows = self._read("SELECT * FROM lineage WHERE job_id = ? ORDER BY id", (job_id,))
        return [_record(row) for row in rows]

    def writer_of(self, uri: str) -> LineageRecord | None:
        """The newest record of a job writing ``uri`` (None: no job of this registry did)."""
        rows = self._read("SELECT * FROM lineage WHERE uri = ? AND role = 'output' ORDER BY id DESC LIMIT 1", (uri,))
        return _record(rows[0]) if rows else None


def _record(row: Any) -> LineageRecord:
    return LineageRecord(
        job_id=row["job_id"],
        role=row["role"],
        uri=row["uri"],
        fingerprint=json.loads(row["fingerprint"]),
        recorded_at=float(row["recorded_at"]),
    )
