"""The registry: one SQLite file (WAL) that every kernel and the server share.

It holds pools (spec, backend, addresses, owner, status, heartbeat), worker intervals (when each
worker ran and whether it was priced as spot or reserved; cost is computed from these rows),
jobs, and, for cost's idle spend, storage and network, one utilization sample per heartbeat and
the data volumes a pool or job recorded or a user stated. Anything that must survive a crash lives
here, and only here.

Pool statuses and their transitions (see :class:`PoolStatus`):
``starting -> ready -> stopping -> stopped``; ``starting -> failed``; any live status -> ``lost``
when its owner stops heart-beating (killed kernel). ``stopped``, ``failed`` and ``lost`` are final.

Concurrency: each thread gets its own connection; writes use ``BEGIN IMMEDIATE`` with a generous
``busy_timeout`` plus a retry loop, so "database is locked" never reaches a user.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConflictError, NotFoundError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


class PoolStatus(str, enum.Enum):
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
    LOST = "lost"

    @property
    def is_live(self) -> bool:
        return self in LIVE_STATUSES

    def __str__(self) -> str:
        return self.value


LIVE_STATUSES = frozenset({PoolStatus.STARTING, PoolStatus.READY, PoolStatus.STOPPING})


class JobStatus(str, enum.Enum):
    """``pending -> running -> succeeded | failed | cancelled``; a lost owner makes a running job failed."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


_SCHEMA = """
CREATE TABLE IF NOT EXISTS pools (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    backend TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    prices_json TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    scheduler_address TEXT,
    dashboard_link TEXT,
    namespace TEXT,
    owner TEXT NOT NULL,
    owner_pid INTEGER NOT NULL,
    owner_host TEXT NOT NULL,
    owner_started_at REAL NOT NULL,
    created_at REAL NOT NULL,
    ready_at REAL,
    ended_at REAL,
    heartbeat_at REAL NOT NULL,
    stop_requested INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS pools_live_name ON pools(name)
    WHERE status IN ('starting', 'ready', 'stopping');
CREATE TABLE IF NOT EXISTS workers (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pool_id INTEGER NOT NULL REFERENCES pools(id),
    worker_name TEXT NOT NULL,
    address TEXT,
    host TEXT,
    pid INTEGER,
    pricing TEXT NOT NULL CHECK (pricing IN ('spot', 'reserved', 'on_demand')),
    started_at REAL NOT NULL,
    stopped_at REAL,
    stop_reason TEXT
);
CREATE INDEX IF NOT EXISTS workers_pool ON workers(pool_id);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    pool_id INTEGER NOT NULL REFERENCES pools(id),
    pool_name TEXT NOT NULL,
    kind TEXT NOT NULL,
    code_sha256 TEXT NOT NULL,
    hyperparams_json TEXT NOT NULL DEFAULT '{}',
    ranks INTEGER NOT NULL,
    status TEXT NOT NULL,
    restarts INTEGER NOT NULL DEFAULT 0,
    started_at REAL NOT NULL,
    ended_at REAL,
    rank_exits_json TEXT,
    failure_reason TEXT,
    summary_json TEXT
);
CREATE INDEX IF NOT EXISTS jobs_pool ON jobs(pool_id);
CREATE TABLE IF NOT EXISTS pool_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pool_id INTEGER NOT NULL REFERENCES pools(id),
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
-- one row per heartbeat of a live pool: mean GPU (cpu pools: CPU) utilization 0..1 over its devices,
-- and bytes its hosts sent on non-loopback interfaces since the previous row (idle spend, network cost)
CREATE TABLE IF NOT EXISTS utilization (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pool_id INTEGER NOT NULL REFERENCES pools(id),
    at REAL NOT NULL,
    mean_util REAL NOT NULL,
    gpus INTEGER NOT NULL,
    net_bytes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS utilization_pool ON utilization(pool_id, at);
-- storage and network volumes of a pool or one of its jobs: 'recorded' by the pool or a job
-- (network rows add up), or 'stated' by the user (the latest stated network row is the total)
CREATE TABLE IF NOT EXISTS data_volumes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pool_id INTEGER NOT NULL REFERENCES pools(id),
    job_id TEXT,
    at REAL NOT NULL,
    storage_gb REAL,
    network_gb REAL,
    source TEXT NOT NULL CHECK (source IN ('recorded', 'stated'))
);
CREATE INDEX IF NOT EXISTS data_volumes_pool ON data_volumes(pool_id);
"""


@dataclass(frozen=True)
class PoolRecord:
    """One row of ``pools``, as every reader sees it."""

    id: int
    name: str
    backend: str
    spec: dict[str, Any]
    prices: dict[str, Any]
    status: PoolStatus
    reason: str | None
    scheduler_address: str | None
    dashboard_link: str | None
    namespace: str | None
    owner: str
    owner_pid: int
    owner_host: str
    created_at: float
    ready_at: float | None
    ended_at: float | None
    heartbeat_at: float
    stop_requested: bool

    @property
    def gpu_type(self) -> str:
        return str(self.spec.get("gpu_type", ""))

    @property
    def count(self) -> int:
        return int(self.spec.get("count", 0))


@dataclass(frozen=True)
class WorkerInterval:
    id: int
    pool_id: int
    worker_name: str
    address: str | None
    host: str | None
    pid: int | None
    pricing: str
    started_at: float
    stopped_at: float | None
    stop_reason: str | None


@dataclass(frozen=True)
class UtilizationSample:
    pool_id: int
    at: float
    mean_util: float
    gpus: int
    net_bytes: int


@dataclass(frozen=True)
class DataVolume:
    pool_id: int
    job_id: str | None
    at: float
    storage_gb: float | None
    network_gb: float | None
    source: str


@dataclass(frozen=True)
class JobRecord:
    id: str
    pool_id: int
    pool_name: str
    kind: str
    code_sha256: str
    hyperparams: dict[str, Any]
    ranks: int
    status: JobStatus
    restarts: int
    started_at: float
    ended_at: float | None
    rank_exits: list[Any] | None
    failure_reason: str | None
    summary: dict[str, Any] = field(default_factory=dict)


def process_started_at(pid: int) -> float:
    """The start time of ``pid`` (0.0 if it is gone); with the pid it identifies a process uniquely."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0


def process_is_alive(pid: int, started_at: float) -> bool:
    import psutil

    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - started_at) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


class Registry:
    """Durable state shared by every process on the machine (or on a shared filesystem)."""

    def __init__(self, path: str | os.PathLike[str], clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.clock = clock
        self._local = threading.local()
        db = self._connection()
        db.executescript(_SCHEMA)  # idempotent; executescript manages its own transaction
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def __repr__(self) -> str:
        return f"Registry({str(self.path)!r})"

    # -- connections -----------------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None or getattr(self._local, "pid", None) != os.getpid():
            db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=60000")
            db.execute("PRAGMA foreign_keys=ON")
            self._local.db = db
            self._local.pid = os.getpid()
        return db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        db = self._connection()
        deadline = time.monotonic() + 120.0
        while True:
            try:
                db.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        else:
            db.execute("COMMIT")

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return self._connection().execute(sql, args).fetchall()

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # -- pools -----------------------------------------------------------------------------------
    def add_pool(
        self,
        name: str,
        backend: str,
        spec: dict[str, Any],
        prices: dict[str, Any],
        owner: str,
        namespace: str | None = None,
    ) -> PoolRecord:
        """Insert a pool in ``starting``; ConflictError if a live pool has that name."""
        now = self.clock()
        pid = os.getpid()
        try:
            with self._write() as db:
                cursor = db.execute(
                    "INSERT INTO pools (name, backend, spec_json, prices_json, status, namespace, owner, owner_pid,"
                    " owner_host, owner_started_at, created_at, heartbeat_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
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
                    ),
                )
                pool_id = int(cursor.lastrowid or 0)
        except sqlite3.IntegrityError:
            raise ConflictError(
                f"a pool named '{name}' is already running (stop it with %gpugeek_stop {name}, or pick another --name)"
            ) from None
        return self.pool_by_id(pool_id)

    def set_pool_status(
        self,
        pool_id: int,
        status: PoolStatus,
        reason: str | None = None,
        ended_at: float | None = None,
        **columns: Any,
    ) -> None:
        """Move a pool to ``status``; final statuses also close its open worker intervals."""
        now = self.clock()
        assignments = {"status": PoolStatus(status).value, **columns}
        if reason is not None:
            assignments["reason"] = reason
        if status is PoolStatus.READY:
            assignments.setdefault("ready_at", now)
        final = not PoolStatus(status).is_live
        if final:
            assignments["ended_at"] = ended_at if ended_at is not None else now
        sql = ", ".join(f"{k} = ?" for k in assignments)
        with self._write() as db:
            db.execute(f"UPDATE pools SET {sql} WHERE id = ?", (*assignments.values(), pool_id))
            if final:
                db.execute(
                    "UPDATE workers SET stopped_at = ?, stop_reason = COALESCE(stop_reason, ?)"
                    " WHERE pool_id = ? AND stopped_at IS NULL",
                    (assignments["ended_at"], f"pool {status.value}", pool_id),
                )
                db.execute(
                    "UPDATE jobs SET status = ?, ended_at = ?, failure_reason = COALESCE(failure_reason, ?)"
                    " WHERE pool_id = ? AND status IN ('pending', 'running')",
                    (JobStatus.FAILED.value, assignments["ended_at"], f"pool {status.value}", pool_id),
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
        record = self.live_pool(name)
        with self._write() as db:
            db.execute("UPDATE pools SET stop_requested = 1 WHERE id = ?", (record.id,))
        return self.pool_by_id(record.id)

    def add_event(self, pool_id: int, kind: str, message: str) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO pool_events (pool_id, at, kind, message) VALUES (?,?,?,?)",
                (pool_id, self.clock(), kind, message),
            )

    def events(self, pool_id: int) -> list[dict[str, Any]]:
        return [dict(r) for r in self._read("SELECT * FROM pool_events WHERE pool_id = ? ORDER BY id", (pool_id,))]

    def pool_by_id(self, pool_id: int) -> PoolRecord:
        rows = self._read("SELECT * FROM pools WHERE id = ?", (pool_id,))
        if not rows:
            raise NotFoundError(f"no pool with id {pool_id}")
        return _pool_record(rows[0])

    def live_pool(self, name: str) -> PoolRecord:
        """The live pool called ``name``; NotFoundError listing live names otherwise."""
        rows = self._read(
            "SELECT * FROM pools WHERE name = ? AND status IN ('starting','ready','stopping')", (name,)
        )
        if rows:
            return _pool_record(rows[0])
        live = [p.name for p in self.list_pools(live_only=True)]
        hint = f"running pools: {', '.join(live)}" if live else "no pool is running; start one with %gpugeek_launch"
        raise NotFoundError(f"no running pool named '{name}' ({hint})")

    def latest_pool(self, name: str) -> PoolRecord:
        """The newest pool called ``name``, live or ended."""
        rows = self._read("SELECT * FROM pools WHERE name = ? ORDER BY id DESC LIMIT 1", (name,))
        if not rows:
            raise NotFoundError(f"no pool named '{name}' in the registry (see %gpugeek_pools)")
        return _pool_record(rows[0])

    def list_pools(self, live_only: bool = False, namespace: str | None = None) -> list[PoolRecord]:
        sql = "SELECT * FROM pools"
        clauses, args = [], []
        if live_only:
            clauses.append("status IN ('starting','ready','stopping')")
        if namespace is not None:
            clauses.append("namespace = ?")
            args.append(namespace)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        return [_pool_record(r) for r in self._read(sql + " ORDER BY id", tuple(args))]

    def mark_lost_pools(self, lost_after_seconds: float) -> list[PoolRecord]:
        """Close live pools whose owner died (same host) or stopped heart-beating; cost ends at the last heartbeat."""
        now = self.clock()
        here = socket.gethostname()
        lost = []
        for record in self.list_pools(live_only=True):
            row = self._read("SELECT owner_started_at FROM pools WHERE id = ?", (record.id,))[0]
            owner_dead = record.owner_host == here and not process_is_alive(record.owner_pid, row["owner_started_at"])
            silent = now - record.heartbeat_at > lost_after_seconds
            if owner_dead or silent:
                why = "its owner process exited without stopping it" if owner_dead else (
                    f"no heartbeat from its owner for {now - record.heartbeat_at:.0f} s"
                )
                self.set_pool_status(record.id, PoolStatus.LOST, reason=why, ended_at=record.heartbeat_at)
                lost.append(self.pool_by_id(record.id))
                log.info("pool %s marked lost: %s", record.name, why)
        return lost

    # -- workers ---------------------------------------------------------------------------------
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
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO workers (pool_id, worker_name, address, host, pid, pricing, started_at) VALUES (?,?,?,?,?,?,?)",
                (pool_id, worker_name, address, host, pid, pricing, started_at if started_at is not None else self.clock()),
            )
            return int(cursor.lastrowid or 0)

    def close_worker_interval(self, interval_id: int, reason: str, stopped_at: float | None = None) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE workers SET stopped_at = ?, stop_reason = ? WHERE id = ? AND stopped_at IS NULL",
                (stopped_at if stopped_at is not None else self.clock(), reason, interval_id),
            )

    def worker_intervals(self, pool_id: int | None = None) -> list[WorkerInterval]:
        if pool_id is None:
            rows = self._read("SELECT * FROM workers ORDER BY id")
        else:
            rows = self._read("SELECT * FROM workers WHERE pool_id = ? ORDER BY id", (pool_id,))
        return [WorkerInterval(**dict(r)) for r in rows]

    def worker_seconds(self, pool_id: int, start: float, end: float, open_end: float) -> dict[str, float]:
        """Worker-seconds per pricing inside ``[start, end]``, open intervals counted up to ``open_end``."""
        rows = self._read(
            "SELECT pricing, SUM(MAX(0.0, MIN(COALESCE(stopped_at, ?), ?) - MAX(started_at, ?))) AS seconds"
            " FROM workers WHERE pool_id = ? GROUP BY pricing",
            (open_end, end, start, pool_id),
        )
        return {row["pricing"]: float(row["seconds"] or 0.0) for row in rows}

    # -- utilization and data volumes (cost: idle spend, storage, network) ------------------------
    def add_utilization(
        self, pool_id: int, mean_util: float, gpus: int, net_bytes: int = 0, at: float | None = None
    ) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO utilization (pool_id, at, mean_util, gpus, net_bytes) VALUES (?,?,?,?,?)",
                (pool_id, at if at is not None else self.clock(), float(mean_util), int(gpus), int(net_bytes)),
            )

    def utilization(self, pool_id: int, since: float | None = None, until: float | None = None) -> list[UtilizationSample]:
        rows = self._read(
            "SELECT pool_id, at, mean_util, gpus, net_bytes FROM utilization"
            " WHERE pool_id = ? AND at >= ? AND at <= ? ORDER BY at, id",
            (pool_id, since if since is not None else float("-inf"), until if until is not None else float("inf")),
        )
        return [UtilizationSample(**dict(r)) for r in rows]

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
        """Bytes the pool's hosts were measured to send in samples taken in ``(since, until]``."""
        rows = self._read(
            "SELECT COALESCE(SUM(net_bytes), 0) AS total FROM utilization WHERE pool_id = ? AND at > ? AND at <= ?",
            (pool_id, since, until),
        )
        return int(rows[0]["total"])

    def add_data_volume(
        self,
        pool_id: int,
        storage_gb: float | None = None,
        network_gb: float | None = None,
        source: str = "recorded",
        job_id: str | None = None,
    ) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO data_volumes (pool_id, job_id, at, storage_gb, network_gb, source) VALUES (?,?,?,?,?,?)",
                (pool_id, job_id, self.clock(), storage_gb, network_gb, source),
            )

    def data_volumes(self, pool_id: int) -> list[DataVolume]:
        rows = self._read(
            "SELECT pool_id, job_id, at, storage_gb, network_gb, source FROM data_volumes WHERE pool_id = ? ORDER BY at, id",
            (pool_id,),
        )
        return [DataVolume(**dict(r)) for r in rows]

    # -- jobs ------------------------------------------------------------------------------------
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
        with self._write() as db:
            db.execute(
                "INSERT INTO jobs (id, pool_id, pool_name, kind, code_sha256, hyperparams_json, ranks, status, started_at)"
                " VALUES (?,?,?,?,?,?,?,?,?)",
                (job_id, pool_id, pool_name, kind, code_sha256, json.dumps(hyperparams or {}, default=str), ranks,
                 JobStatus.RUNNING.value, self.clock()),
            )
        return self.job(job_id)

    def update_job(self, job_id: str, **columns: Any) -> None:
        """Set job columns; ``rank_exits``/``summary``/``status`` are converted for storage."""
        values: dict[str, Any] = {}
        for key, value in columns.items():
            if key in ("rank_exits", "summary"):
                values[f"{key}_json"] = json.dumps(value, default=str)
            elif key == "status":
                values["status"] = JobStatus(value).value
                if JobStatus(value) not in (JobStatus.PENDING, JobStatus.RUNNING):
                    values.setdefault("ended_at", self.clock())
            else:
                values[key] = value
        sql = ", ".join(f"{k} = ?" for k in values)
        with self._write() as db:
            db.execute(f"UPDATE jobs SET {sql} WHERE id = ?", (*values.values(), job_id))

    def job(self, job_id: str) -> JobRecord:
        rows = self._read("SELECT * FROM jobs WHERE id = ?", (job_id,))
        if not rows:
            raise NotFoundError(f"no job with id '{job_id}' (see %gpugeek_jobs)")
        return _job_record(rows[0])

    def list_jobs(self, pool_id: int | None = None, limit: int = 200) -> list[JobRecord]:
        if pool_id is None:
            rows = self._read("SELECT * FROM jobs ORDER BY started_at DESC LIMIT ?", (limit,))
        else:
            rows = self._read("SELECT * FROM jobs WHERE pool_id = ? ORDER BY started_at DESC LIMIT ?", (pool_id, limit))
        return [_job_record(r) for r in rows]


def _pool_record(row: sqlite3.Row) -> PoolRecord:
    return PoolRecord(
        id=row["id"],
        name=row["name"],
        backend=row["backend"],
        spec=json.loads(row["spec_json"]),
        prices=json.loads(row["prices_json"]),
        status=PoolStatus(row["status"]),
        reason=row["reason"],
        scheduler_address=row["scheduler_address"],
        dashboard_link=row["dashboard_link"],
        namespace=row["namespace"],
        owner=row["owner"],
        owner_pid=row["owner_pid"],
        owner_host=row["owner_host"],
        created_at=row["created_at"],
        ready_at=row["ready_at"],
        ended_at=row["ended_at"],
        heartbeat_at=row["heartbeat_at"],
        stop_requested=bool(row["stop_requested"]),
    )


def _job_record(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        id=row["id"],
        pool_id=row["pool_id"],
        pool_name=row["pool_name"],
        kind=row["kind"],
        code_sha256=row["code_sha256"],
        hyperparams=json.loads(row["hyperparams_json"] or "{}"),
        ranks=row["ranks"],
        status=JobStatus(row["status"]),
        restarts=row["restarts"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        rank_exits=json.loads(row["rank_exits_json"]) if row["rank_exits_json"] else None,
        failure_reason=row["failure_reason"],
        summary=json.loads(row["summary_json"]) if row["summary_json"] else {},
    )


_registries: dict[str, Registry] = {}
_registries_lock = threading.Lock()


def get_registry(path: str | None = None) -> Registry:
    """The registry at ``path`` (default: the configured one), one object per path per process."""
    if path is None:
        from .config import get_config

        path = get_config().registry_path
    with _registries_lock:
        if path not in _registries:
            _registries[path] = Registry(path)
        return _registries[path]
