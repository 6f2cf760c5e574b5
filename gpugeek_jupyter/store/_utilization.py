"""Utilization samples and data volumes: what cost needs for idle spend, storage and network."""

from __future__ import annotations

import json

from ._connection import Database
from ._records import DataVolume, UtilizationSample

_SAMPLE_COLUMNS = "pool_id, at, mean_util, gpus, net_bytes"


class UtilizationQueries(Database):
    """The ``utilization`` and ``data_volumes`` tables."""

    def add_utilization(
        self, pool_id: int, mean_util: float, gpus: int, net_bytes: int = 0, at: float | None = None
    ) -> None:
        """Record one heartbeat's mean utilization (0..1) and the bytes the pool's hosts sent since the last."""
        with self._write() as db:
            db.execute(
                "INSERT INTO utilization (pool_id, at, mean_util, gpus, net_bytes) VALUES (?,?,?,?,?)",
                (pool_id, at if at is not None else self.clock(), float(mean_util), int(gpus), int(net_bytes)),
            )

    def utilization(
        self, pool_id: int, since: float | None = None, until: float | None = None
    ) -> list[UtilizationSample]:
        """The pool's samples in ``[since, until]`` (default: all of them), oldest first."""
        rows = self._read(
            f"SELECT {_SAMPLE_COLUMNS} FROM utilization WHERE pool_id = ? AND at >= ? AND at <= ? ORDER BY at, id",
            (pool_id, since if since is not None else float("-inf"), until if until is not None else float("inf")),
        )
        return [UtilizationSample(**dict(r)) for r in rows]

    def latest_utilization(self, pool_id: int, count: int) -> list[UtilizationSample]:
        """The pool's ``count`` newest samples, oldest first (one index read, however long the pool ran)."""
        cursor = self._connection().cursor()
        cursor.row_factory = None  # plain tuples, in _SAMPLE_COLUMNS order: the panel reads these every poll
        rows = cursor.execute(
            f"SELECT {_SAMPLE_COLUMNS} FROM utilization WHERE pool_id = ? ORDER BY at DESC, id DESC LIMIT ?",
            (pool_id, count),
        ).fetchall()
        return [UtilizationSample(*row) for row in reversed(rows)]

    def utilization_series(self, pool_id: int, since: float, until: float) -> list[tuple[float, float]]:
        """``(at, mean_util)`` of the samples in ``[since, until]`` and of the nearest one on each side
        (a sample covers the time since the one before it), oldest first. Plain tuples: the lean form
        that a week of heartbeats (300,000 rows) needs."""
        cursor = self._connection().cursor()
        cursor.row_factory = None  # building Row objects would dominate the time
        select = "SELECT at, mean_util FROM utilization WHERE pool_id = ? AND "
        before = cursor.execute(select + "at < ? ORDER BY at DESC, id DESC LIMIT 1", (pool_id, since)).fetchall()
        inside = cursor.execute(select + "at >= ? AND at <= ? ORDER BY at, id", (pool_id, since, until)).fetchall()
        after = cursor.execute(select + "at > ? ORDER BY at, id LIMIT 1", (pool_id, until)).fetchall()
        return before + inside + after

    def network_bytes(self, pool_id: int, since: float, until: float) -> int:
        """Bytes the pool's hosts were measured to send in samples taken in ``(since, until]``: the
        running total at ``until`` minus the one at ``since`` (two index lookups, however many samples)."""
        if until <= since:
            return 0
        total_at = (
            "COALESCE((SELECT net_total FROM utilization WHERE pool_id = :pool AND at <= {0}"
            " ORDER BY at DESC, id DESC LIMIT 1), 0)"
        )
        rows = self._read(
            f"SELECT {total_at.format(':until')} - {total_at.format(':since')} AS sent",
            {"pool": pool_id, "since": since, "until": until},
        )
        return int(rows[0]["sent"])

    def add_data_volume(
        self,
        pool_id: int,
        storage_gb: float | None = None,
        network_gb: float | None = None,
        source: str = "recorded",
        job_id: str | None = None,
    ) -> None:
        """Record storage held and/or network sent (GB) by a pool or one of its jobs, ``recorded`` or ``stated``."""
        with self._write() as db:
            db.execute(
                "INSERT INTO data_volumes (pool_id, job_id, at, storage_gb, network_gb, source) VALUES (?,?,?,?,?,?)",
                (pool_id, job_id, self.clock(), storage_gb, network_gb, source),
            )

    def data_volumes(self, pool_id: int) -> list[DataVolume]:
        """The pool's data volumes (its jobs' included), oldest first."""
        rows = self._read(
            "SELECT pool_id, job_id, at, storage_gb, network_gb, source FROM data_volumes WHERE pool_id = ? ORDER BY at, id",
            (pool_id,),
        )
        return [DataVolume(**dict(r)) for r in rows]

    def data_volume_marks(self, pool_ids: list[int]) -> dict[int, int]:
        """Per pool, the id of its newest data volume (pools without any are left out): a new row
        changes the mark, so a reader can keep what it computed from the older rows until then."""
        if not pool_ids:
            return {}
        rows = self._read(
            "SELECT pool_id, MAX(id) AS mark FROM data_volumes WHERE pool_id IN (SELECT value FROM json_each(?))"
            " GROUP BY pool_id",
            (json.dumps(pool_ids),),
        )
        return {int(r["pool_id"]): int(r["mark"]) for r in rows}
