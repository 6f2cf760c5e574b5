"""Pool rows: registration, status transitions, heartbeats, lookups and the lost-pool sweeper."""

from __future__ import annotations

import enum
import json
import logging
import os
import socket
import sqlite3
from typing import Any

from ..errors import ConflictError, NotFoundError, PerSurface, Phrase, Value
from ._connection import Database
from ._processes import notebook_label, process_is_alive, process_started_at
from ._records import LIVE_SQL, OPEN_JOB_SQL, JobStatus, PoolRecord, PoolStatus, pool_record

log = logging.getLogger(__name__)

OWNER_EXITED = "its owner process exited without stopping it"


class Keep(enum.Enum):
    """Default of an optional column argument: leave the column as it is (``None`` clears it)."""

    KEEP = "keep"


KEEP = Keep.KEEP


class PoolQueries(Database):
    """The ``pools`` table (and, for final statuses, the rows of the pool they close)."""

    def add_pool(
        self,
        name: str,
        backend: str,
        spec: dict[str, Any],
        prices: dict[str, Any],
        owner: str,
        namespace: str | None = None,
    ) -> PoolRecord:
        """Insert a pool in ``starting``, owned by this process (labelled with its notebook, if any);
        ConflictError if a live pool has that name."""
        now = self.clock()
        pid = os.getpid()
        try:
            with self._write() as db:
                cursor = db.execute(
                    "INSERT INTO pools (name, backend, spec_json, prices_json, status, namespace, owner, owner_pid,"
                    " owner_host, owner_started_at, created_at, heartbeat_at, owner_label)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        name,
                        backend,
                        json.dumps(spec),
                        json.dumps(prices),
                        PoolStatus.STARTING.value,
                        namespace,
                        owner,
                        pid,
                        socket.gethostname(),
                        process_started_at(pid),
                        now,
                        now,
                        notebook_label(),
                    ),
                )
                pool_id = int(cursor.lastrowid or 0)
        except sqlite3.IntegrityError:
            raise ConflictError.pool_name_taken(name) from None
        return self.pool_by_id(pool_id)

    def set_pool_status(
        self,
        pool_id: int,
        status: PoolStatus,
        reason: str | None = None,
        ended_at: float | None = None,
        *,
        scheduler_address: str | None | Keep = KEEP,
        dashboard_link: str | None | Keep = KEEP,
    ) -> None:
        """Move a pool to ``status`` (``ready`` stamps ``ready_at``); a final status sets ``ended_at``
        (default now) and closes the pool's open worker intervals and pending or running jobs there
        (``cancelled`` by a stop, ``failed`` with a failed or lost pool, with ``reason`` when given).

        ``reason`` (when given) replaces the pool's reason and is recorded as an event; the addresses
        change only when passed (``None`` clears them).

        >>> registry.set_pool_status(pool.id, PoolStatus.READY, scheduler_address="tcp://10.0.0.5:8786")  # doctest: +SKIP
        """
        now = self.clock()
        status = PoolStatus(status)
        final = not status.is_live
        end = (ended_at if ended_at is not None else now) if final else None
        with self._write() as db:
            db.execute(
                "UPDATE pools SET status = :status, reason = COALESCE(:reason, reason),"
                " ready_at = CASE WHEN :status = 'ready' THEN :now ELSE ready_at END,"
                " ended_at = CASE WHEN :final THEN :ended_at ELSE ended_at END,"
                " scheduler_address = CASE WHEN :set_scheduler THEN :scheduler_address ELSE scheduler_address END,"
                " dashboard_link = CASE WHEN :set_dashboard THEN :dashboard_link ELSE dashboard_link END"
                " WHERE id = :id",
                {
                    "id": pool_id,
                    "status": status.value,
                    "reason": reason,
                    "now": now,
                    "final": final,
                    "ended_at": end,
                    "set_scheduler": scheduler_address is not KEEP,
                    "scheduler_address": None if scheduler_address is KEEP else scheduler_address,
                    "set_dashboard": dashboard_link is not KEEP,
                    "dashboard_link": None if dashboard_link is KEEP else dashboard_link,
                },
            )
            if final:
                db.execute(
                    "UPDATE workers SET stopped_at = ?, stop_reason = COALESCE(stop_reason, ?)"
                    " WHERE pool_id = ? AND stopped_at IS NULL",
                    (end, f"pool {status.value}", pool_id),
                )
                # a job still open when its pool ends: cancelled by a stop, failed with a failed or lost pool
                ended_job = JobStatus.CANCELLED if status is PoolStatus.STOPPED else JobStatus.FAILED
                # (a job that was still queued never ran: its run, and its cost, is empty)
                db.execute(
                    "UPDATE jobs SET status = :status, ended_at = :end,"
                    " started_at = CASE WHEN status = 'queued' THEN :end ELSE started_at END,"
                    " failure_reason = COALESCE(failure_reason, CASE WHEN status = 'queued'"
                    " THEN :reason || ' while it was queued' ELSE :reason END)"
                    f" WHERE pool_id = :pool AND status IN {OPEN_JOB_SQL}",
                    {
                        "status": ended_job.value,
                        "end": end,
                        "reason": reason or f"pool {status.value}",
                        "pool": pool_id,
                    },
                )
            if reason:
                db.execute(
                    "INSERT INTO pool_events (pool_id, at, kind, message) VALUES (?,?,?,?)",
                    (pool_id, now, status.value, reason),
                )

    def heartbeat(self, pool_ids: list[int]) -> dict[int, bool]:
        """Refresh heartbeats; returns, per pool, whether someone asked for it to stop."""
        if not pool_ids:
            return {}
        now = self.clock()
        marks = ",".join("?" * len(pool_ids))
        with self._write() as db:
            db.execute(f"UPDATE pools SET heartbeat_at = ? WHERE id IN ({marks})", (now, *pool_ids))
            rows = db.execute(f"SELECT id, stop_requested FROM pools WHERE id IN ({marks})", tuple(pool_ids)).fetchall()
        return {int(r["id"]): bool(r["stop_requested"]) for r in rows}

    def request_stop(self, name: str) -> PoolRecord:
        """Flag live pool ``name`` for its owner to stop (the owner's heartbeat carries it out)."""
        record = self.live_pool(name)
        with self._write() as db:
            db.execute("UPDATE pools SET stop_requested = 1 WHERE id = ?", (record.id,))
        return self.pool_by_id(record.id)

    def set_pool_owner_process(self, pool_id: int, pid: int, started_at: float) -> None:
        """The process whose life is the pool's lease from now on (a kept Slurm pool's scheduler
        process: the pool outlives the agent that owns it); on this host."""
        with self._write() as db:
            db.execute(
                "UPDATE pools SET owner_pid = ?, owner_started_at = ?, owner_host = ? WHERE id = ?",
                (pid, started_at, socket.gethostname(), pool_id),
            )

    def set_pool_owner(self, pool_id: int, owner: str) -> None:
        """Who owns the pool now, as people read it (a new agent that took the pool back)."""
        with self._write() as db:
            db.execute("UPDATE pools SET owner = ? WHERE id = ?", (owner, pool_id))

    def add_event(self, pool_id: int, kind: str, message: str) -> None:
        """Record that something happened to a pool (budget warnings, stops, failures)."""
        with self._write() as db:
            db.execute(
                "INSERT INTO pool_events (pool_id, at, kind, message) VALUES (?,?,?,?)",
                (pool_id, self.clock(), kind, message),
            )

    def events(self, pool_id: int) -> list[dict[str, Any]]:
        """The pool's events, oldest first (``id``, ``pool_id``, ``at``, ``kind``, ``message``)."""
        return [dict(r) for r in self._read("SELECT * FROM pool_events WHERE pool_id = ? ORDER BY id", (pool_id,))]

    # -- lookups ---------------------------------------------------------------------------------
    def pool_by_id(self, pool_id: int) -> PoolRecord:
        """The pool with ``pool_id``; NotFoundError otherwise."""
        rows = self._read("SELECT * FROM pools WHERE id = ?", (pool_id,))
        if not rows:
            raise NotFoundError(f"no pool with id {pool_id}")
        return pool_record(rows[0])

    def live_pool(self, name: str) -> PoolRecord:
        """The live pool called ``name``; NotFoundError listing live names otherwise."""
        rows = self._read(f"SELECT * FROM pools WHERE name = ? AND status IN {LIVE_SQL}", (name,))
        if rows:
            return pool_record(rows[0])
        live = [p.name for p in self.list_pools(live_only=True)]
        hint: Any = (
            f"running pools: {', '.join(live)}"
            if live
            else PerSurface(
                core="no pool is running; launch one first",
                python="no pool is running; launch one with gpugeek_jupyter.launch(gpu_type='cpu', count=2)",
                magic="no pool is running; start one with %gpugeek_launch",
                server="no pool is running; launch one with POST /gpugeek/pools",
            )
        )
        raise NotFoundError(Phrase("no running pool named {name} ({hint})", name=Value(name), hint=hint))

    def latest_pool(self, name: str) -> PoolRecord:
        """The newest pool called ``name``, live or ended."""
        rows = self._read("SELECT * FROM pools WHERE name = ? ORDER BY id DESC LIMIT 1", (name,))
        if not rows:
            raise NotFoundError(
                Phrase(
                    "no pool named {name} in the registry{see}",
                    name=Value(name),
                    see=PerSurface(
                        core="",
                        python=" (see gpugeek_jupyter.list_pools())",
                        magic=" (see %gpugeek_pools --all)",
                        server=" (see GET /gpugeek/pools?state=ended)",
                    ),
                )
            )
        return pool_record(rows[0])

    def pools_named(self, name: str, after_id: int = 0) -> list[PoolRecord]:
        """Every pool called ``name`` with an id above ``after_id``, oldest first."""
        rows = self._read("SELECT * FROM pools WHERE name = ? AND id > ? ORDER BY id", (name, after_id))
        return [pool_record(r) for r in rows]

    def newest_pool_id(self) -> int:
        """The highest pool id so far (0 for an empty registry); later pools have higher ids."""
        return int(self._read("SELECT COALESCE(MAX(id), 0) FROM pools")[0][0])

    def list_pools(self, live_only: bool = False, namespace: str | None = None) -> list[PoolRecord]:
        """Every pool (or every live one), oldest first: the whole history, for reports and scripts."""
        sql = "SELECT * FROM pools"
        clauses, args = [], []
        if live_only:
            clauses.append(f"status IN {LIVE_SQL}")
        if namespace is not None:
            clauses.append("namespace = ?")
            args.append(namespace)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        return [pool_record(r) for r in self._read(sql + " ORDER BY id", tuple(args))]

    def recent_pools(
        self, ended_since: float, namespace: str | None = None, ended_limit: int | None = None
    ) -> list[PoolRecord]:
        """Live pools plus pools that ended at or after ``ended_since`` (only the ``ended_limit`` that
        ended last, when given), oldest first. Both parts are index range reads, whatever the history."""
        scope, args = ("", ()) if namespace is None else (" AND namespace = ?", (namespace,))
        live = self._read(f"SELECT * FROM pools WHERE status IN {LIVE_SQL}{scope}", args)
        ended = self._read(
            f"SELECT * FROM pools WHERE ended_at >= ? AND status NOT IN {LIVE_SQL}{scope} ORDER BY ended_at DESC LIMIT ?",
            (ended_since, *args, -1 if ended_limit is None else ended_limit),
        )
        return sorted((pool_record(r) for r in (*live, *ended)), key=lambda r: r.id)

    def ended_pools(
        self, before_id: int | None = None, limit: int = 50, namespace: str | None = None
    ) -> list[PoolRecord]:
        """Up to ``limit`` ended pools with ids below ``before_id`` (default: all), newest first: one
        page of history; the last record's id is the next page's ``before_id``."""
        scope, args = ("", ()) if namespace is None else (" AND namespace = ?", (namespace,))
        rows = self._read(
            f"SELECT * FROM pools WHERE id < ? AND status NOT IN {LIVE_SQL}{scope} ORDER BY id DESC LIMIT ?",
            (before_id if before_id is not None else 2**63 - 1, *args, limit),
        )
        return [pool_record(r) for r in rows]

    def status_token(self) -> str:
        """A short text that changes whenever a pool or job is added, changes status or ends: what a
        watcher compares to know that a listing would differ (``GET /gpugeek/changes``). Index reads
        only (the live pools, the open jobs, the newest ids and end), whatever the history."""
        import hashlib

        live = self._read(f"SELECT id, status, ready_at FROM pools WHERE status IN {LIVE_SQL} ORDER BY id")
        jobs = self._read(f"SELECT id, status FROM jobs WHERE status IN {OPEN_JOB_SQL} ORDER BY id")
        newest = self._read(
            "SELECT (SELECT max(id) FROM pools) AS pool, (SELECT max(ended_at) FROM pools) AS ended,"
            " (SELECT max(rowid) FROM jobs) AS job"
        )[0]
        parts = [f"{r['id']}:{r['status']}:{r['ready_at']}" for r in live] + [f"{r['id']}:{r['status']}" for r in jobs]
        parts.append(f"{newest['pool']}:{newest['ended']}:{newest['job']}")
        return hashlib.blake2b("|".join(parts).encode(), digest_size=8).hexdigest()

    # -- the sweeper -----------------------------------------------------------------------------
    def mark_lost_pools(self, lost_after_seconds: float) -> list[PoolRecord]:
        """Close live pools whose owner died (same host) or stopped heart-beating; cost ends at the last heartbeat.

        The check reads only live pools and writes nothing when every owner is fine; otherwise one
        write transaction ends them with set-based statements (their open worker intervals close and
        their pending or running jobs fail at each pool's last heartbeat, as a final status does).
        Returns the pools it marked, oldest first.
        """
        now = self.clock()
        cutoff = now - lost_after_seconds
        here = socket.gethostname()
        live = self._read(
            f"SELECT id, owner_host, owner_pid, owner_started_at, heartbeat_at FROM pools WHERE status IN {LIVE_SQL}"
        )
        dead = [
            int(r["id"])
            for r in live
            if r["owner_host"] == here and not process_is_alive(r["owner_pid"], r["owner_started_at"])
        ]
        if not dead and all(r["heartbeat_at"] >= cutoff for r in live):
            return []
        # pid and start time never change, so an owner seen dead stays dead; heartbeats are re-checked
        params = {"cutoff": cutoff, "dead": json.dumps(dead), "now": now, "exited": OWNER_EXITED}
        lost = f"status IN {LIVE_SQL} AND (heartbeat_at < :cutoff OR id IN (SELECT value FROM json_each(:dead)))"
        last_heartbeat = "(SELECT p.heartbeat_at FROM pools AS p WHERE p.id = {table}.pool_id)"
        with self._write() as db:
            db.execute(
                f"UPDATE workers SET stopped_at = {last_heartbeat.format(table='workers')},"
                " stop_reason = COALESCE(stop_reason, 'pool lost')"
                f" WHERE stopped_at IS NULL AND pool_id IN (SELECT id FROM pools WHERE {lost})",
                params,
            )
            db.execute(
                f"UPDATE jobs SET status = 'failed', ended_at = {last_heartbeat.format(table='jobs')},"
                f" started_at = CASE WHEN status = 'queued' THEN {last_heartbeat.format(table='jobs')}"
                " ELSE started_at END,"
                " failure_reason = COALESCE(failure_reason, 'pool lost')"
                f" WHERE status IN {OPEN_JOB_SQL} AND pool_id IN (SELECT id FROM pools WHERE {lost})",
                params,
            )
            rows = db.execute(
                "UPDATE pools SET status = 'lost', ended_at = heartbeat_at, reason ="
                " CASE WHEN id IN (SELECT value FROM json_each(:dead)) THEN :exited"
                " ELSE printf('no heartbeat from its owner for %.0f s', :now - heartbeat_at) END"
                f" WHERE {lost} RETURNING *",
                params,
            ).fetchall()
            db.execute(
                "INSERT INTO pool_events (pool_id, at, kind, message)"
                " SELECT id, ?, 'lost', reason FROM pools WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id",
                (now, json.dumps([r["id"] for r in rows])),
            )
        records = sorted((pool_record(r) for r in rows), key=lambda r: r.id)
        for record in records:
            log.info("pool %s marked lost: %s", record.name, record.reason)
        return records
