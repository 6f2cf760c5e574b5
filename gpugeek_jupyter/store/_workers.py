"""Worker intervals: when each worker ran and how it was priced (cost is computed from these rows)."""

from __future__ import annotations

import json

from ._connection import Database
from ._records import WorkerInterval, worker_interval


class WorkerQueries(Database):
    """The ``workers`` table."""

    def open_worker_interval(
        self,
        pool_id: int,
        worker_name: str,
        pricing: str,
        address: str | None = None,
        host: str | None = None,
        pid: int | None = None,
        started_at: float | None = None,
    ) -> int:
        """Record that a worker started (default: now); returns the interval's id."""
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO workers (pool_id, worker_name, address, host, pid, pricing, started_at) VALUES (?,?,?,?,?,?,?)",
                (
                    pool_id,
                    worker_name,
                    address,
                    host,
                    pid,
                    pricing,
                    started_at if started_at is not None else self.clock(),
                ),
            )
            return int(cursor.lastrowid or 0)

    def close_worker_interval(self, interval_id: int, reason: str, stopped_at: float | None = None) -> None:
        """Record that a worker stopped (default: now); an interval closes once."""
        with self._write() as db:
            db.execute(
                "UPDATE workers SET stopped_at = ?, stop_reason = ? WHERE id = ? AND stopped_at IS NULL",
                (stopped_at if stopped_at is not None else self.clock(), reason, interval_id),
            )

    def worker_intervals(self, pool_id: int | None = None) -> list[WorkerInterval]:
        """The intervals of pool ``pool_id`` (default: of every pool), oldest first."""
        if pool_id is None:
            rows = self._read("SELECT * FROM workers ORDER BY id")
        else:
            rows = self._read("SELECT * FROM workers WHERE pool_id = ? ORDER BY id", (pool_id,))
        return [worker_interval(r) for r in rows]

    def open_worker_intervals(self, pool_ids: list[int]) -> list[WorkerInterval]:
        """The still-open intervals (running workers) of the given pools, oldest first; one indexed query."""
        if not pool_ids:
            return []
        rows = self._read(
            "SELECT * FROM workers WHERE pool_id IN (SELECT value FROM json_each(?)) AND stopped_at IS NULL ORDER BY id",
            (json.dumps(pool_ids),),
        )
        return [worker_interval(r) for r in rows]

    def worker_seconds(self, pool_id: int, start: float, end: float, open_end: float) -> dict[str, float]:
        """Worker-seconds per pricing inside ``[start, end]``, open intervals counted up to ``open_end``."""
        rows = self._read(
            "SELECT pricing, SUM(MAX(0.0, MIN(COALESCE(stopped_at, ?), ?) - MAX(started_at, ?))) AS seconds"
            " FROM workers WHERE pool_id = ? GROUP BY pricing",
            (open_end, end, start, pool_id),
        )
        return {row["pricing"]: float(row["seconds"] or 0.0) for row in rows}
