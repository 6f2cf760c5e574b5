"""The registry's schema, as numbered steps: ``PRAGMA user_version`` is the last step a file has.

Opening a file applies the steps it lacks, one transaction each, in order, so a file from any older
release upgrades stepwise; a file whose version is newer than :data:`SCHEMA_VERSION` is refused
(this code cannot know what the newer one changed). A schema change is a new step appended at the
end, never an edit of an old one: step 1 is the schema the first release wrote, byte for byte.

1. the tables ``pools``, ``workers``, ``jobs``, ``pool_events``, ``utilization``, ``data_volumes``
   and their first indexes (a live pool's name is unique);
2. indexes for the panel and the lost-pool sweeper: live pools by heartbeat, pools by end time and
   by name, jobs by start time, events by pool;
3. ``utilization.net_total``, each pool's running sum of bytes sent (backfilled, then kept by an
   insert trigger), so the bytes of any window are two index lookups;
4. a queue of jobs per pool (arrival time and submitting process of each job);
5. ``schedules`` (what to run, when, where, and what to do when runs overlap or fail) and
   ``schedule_runs`` (one row per occurrence: run, skipped, or caught up after missed ones);
6. ``team_outbox``: reports to the team's ledger service waiting for it to answer.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ..errors import GpugeekError
from ._connection import immediate_transaction

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migration:
    """One schema step: the statements that take a file from ``version - 1`` to ``version``."""

    version: int
    summary: str
    statements: tuple[str, ...]


_STEP_1 = (
    """CREATE TABLE IF NOT EXISTS pools (
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
)""",
    """CREATE UNIQUE INDEX IF NOT EXISTS pools_live_name ON pools(name)
    WHERE status IN ('starting', 'ready', 'stopping')""",
    """CREATE TABLE IF NOT EXISTS workers (
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
)""",
    "CREATE INDEX IF NOT EXISTS workers_pool ON workers(pool_id)",
    """CREATE TABLE IF NOT EXISTS jobs (
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
)""",
    "CREATE INDEX IF NOT EXISTS jobs_pool ON jobs(pool_id)",
    """CREATE TABLE IF NOT EXISTS pool_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pool_id INTEGER NOT NULL REFERENCES pools(id),
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
)""",
    # one row per heartbeat of a live pool: mean GPU (cpu pools: CPU) utilization 0..1 over its
    # devices, and bytes its hosts sent on non-loopback interfaces since the previous row
    """CREATE TABLE IF NOT EXISTS utilization (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pool_id INTEGER NOT NULL REFERENCES pools(id),
    at REAL NOT NULL,
    mean_util REAL NOT NULL,
    gpus INTEGER NOT NULL,
    net_bytes INTEGER NOT NULL DEFAULT 0
)""",
    "CREATE INDEX IF NOT EXISTS utilization_pool ON utilization(pool_id, at)",
    # storage and network volumes of a pool or one of its jobs: 'recorded' by the pool or a job
    # (network rows add up), or 'stated' by the user (the latest stated network row is the total)
    """CREATE TABLE IF NOT EXISTS data_volumes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pool_id INTEGER NOT NULL REFERENCES pools(id),
    job_id TEXT,
    at REAL NOT NULL,
    storage_gb REAL,
    network_gb REAL,
    source TEXT NOT NULL CHECK (source IN ('recorded', 'stated'))
)""",
    "CREATE INDEX IF NOT EXISTS data_volumes_pool ON data_volumes(pool_id)",
)

_STEP_2 = (
    # the sweeper's "live and silent" and every "live pools" read
    "CREATE INDEX IF NOT EXISTS pools_status_heartbeat ON pools(status, heartbeat_at)",
    # the panel's "ended in the last 24 h"
    "CREATE INDEX IF NOT EXISTS pools_ended_at ON pools(ended_at)",
    # the newest pool of a name (GET /gpugeek/pools/{name}, %gpugeek_cost NAME)
    "CREATE INDEX IF NOT EXISTS pools_name ON pools(name, id)",
    # recent jobs, newest first (GET /gpugeek/jobs)
    "CREATE INDEX IF NOT EXISTS jobs_started_at ON jobs(started_at)",
    "CREATE INDEX IF NOT EXISTS pool_events_pool ON pool_events(pool_id, id)",
)

# Utilization rows are append-only. ``net_total`` is the pool's running sum of ``net_bytes`` in
# (at, id) order, so the bytes sent in a window are two index lookups, not a scan of every sample
# (a live pool's cost reads them on every poll: 43,200 rows a day). The trigger keeps it for every
# insert, in order or not, whoever writes the row.
_STEP_3 = (
    "ALTER TABLE utilization ADD COLUMN net_total INTEGER NOT NULL DEFAULT 0",
    """UPDATE utilization SET net_total = running.total FROM (
    SELECT id, SUM(net_bytes) OVER (PARTITION BY pool_id ORDER BY at, id) AS total FROM utilization
) AS running WHERE running.id = utilization.id""",
    """CREATE TRIGGER IF NOT EXISTS utilization_net_total AFTER INSERT ON utilization
BEGIN
    UPDATE utilization SET net_total = NEW.net_bytes + COALESCE((
        SELECT earlier.net_total FROM utilization AS earlier
        WHERE earlier.pool_id = NEW.pool_id AND earlier.at <= NEW.at AND earlier.id != NEW.id
        ORDER BY earlier.at DESC, earlier.id DESC LIMIT 1
    ), 0) WHERE id = NEW.id;
    UPDATE utilization SET net_total = net_total + NEW.net_bytes
    WHERE pool_id = NEW.pool_id AND at > NEW.at;
END""",
)

# Jobs wait their turn on their pool: a job row is written when it joins the pool's queue
# (``queued``), in arrival order (the rowid), with the process that submitted it, so any process can
# tell a live turn from one whose submitter died. ``started_at`` becomes the time it began running.
_STEP_4 = (
    "ALTER TABLE jobs ADD COLUMN queued_at REAL",
    "ALTER TABLE jobs ADD COLUMN submitter TEXT",
    "ALTER TABLE jobs ADD COLUMN submitter_pid INTEGER",
    "ALTER TABLE jobs ADD COLUMN submitter_host TEXT",
    "ALTER TABLE jobs ADD COLUMN submitter_started_at REAL",
    # the queue of a pool: its open jobs in arrival order
    "CREATE INDEX IF NOT EXISTS jobs_open ON jobs(pool_id) WHERE status IN ('pending', 'queued', 'running')",
)

# Scheduled runs: a schedule keeps the pickled request each run is made from; its runs are rows of
# their own (a skipped occurrence is one too), each pointing at the job it ran. A deleted schedule
# keeps its row and its runs (their jobs and costs stay explained); a live name is unique.
_STEP_5 = (
    """CREATE TABLE IF NOT EXISTS schedules (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    request BLOB NOT NULL,
    every_s REAL,
    cron TEXT,
    timezone TEXT NOT NULL,
    resume TEXT,
    checkpoints TEXT NOT NULL,
    pool_name TEXT,
    pool_spec_json TEXT,
    overlap TEXT NOT NULL CHECK (overlap IN ('skip', 'queue', 'replace')),
    max_failures INTEGER NOT NULL,
    failures INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL CHECK (status IN ('active', 'paused', 'deleted')),
    reason TEXT,
    created_at REAL NOT NULL,
    next_run_at REAL NOT NULL,
    created_by TEXT
)""",
    "CREATE UNIQUE INDEX IF NOT EXISTS schedules_live_name ON schedules(name) WHERE status != 'deleted'",
    """CREATE TABLE IF NOT EXISTS schedule_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id TEXT NOT NULL REFERENCES schedules(id),
    due_at REAL NOT NULL,
    missed INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    job_id TEXT,
    pool_name TEXT,
    resumed_from TEXT,
    reason TEXT,
    started_at REAL,
    ended_at REAL
)""",
    "CREATE INDEX IF NOT EXISTS schedule_runs_schedule ON schedule_runs(schedule_id, id)",
)

# Reports to the team's ledger service (a pool opened or closed) made while it did not answer: sent
# in order once it does, then deleted.
_STEP_6 = (
    """CREATE TABLE IF NOT EXISTS team_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    report TEXT NOT NULL,
    queued_at REAL NOT NULL
)""",
)

# The notebook a pool was launched from (the kernel's JPY_SESSION_NAME), to show as its owner: the
# owner column is the process's identity (a kernel id), which the liveness checks compare.
_STEP_7 = ("ALTER TABLE pools ADD COLUMN owner_label TEXT",)

# Lineage: what each job read (a dataset's fingerprint), resumed from (a checkpoint) and wrote (its
# checkpoints), one row per job, role and location; a location's writer is the newest job with it
# as an output.
_STEP_8 = (
    """CREATE TABLE IF NOT EXISTS lineage (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    role TEXT NOT NULL,
    uri TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    recorded_at REAL NOT NULL,
    UNIQUE (job_id, role, uri)
)""",
    "CREATE INDEX IF NOT EXISTS lineage_uri ON lineage(uri, role, id)",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "tables of pools, workers, jobs, events, utilization and data volumes", _STEP_1),
    Migration(2, "indexes for the panel's bounded reads and the lost-pool sweeper", _STEP_2),
    Migration(3, "a running total of each pool's bytes sent, kept by a trigger", _STEP_3),
    Migration(4, "a queue of jobs per pool: arrival time and the submitting process of each job", _STEP_4),
    Migration(5, "scheduled runs: schedules and one row per occurrence", _STEP_5),
    Migration(6, "the team outbox: reports waiting for the team's ledger service", _STEP_6),
    Migration(7, "the notebook a pool was launched from, shown as its owner", _STEP_7),
    Migration(8, "lineage: the data a job read, the checkpoint it resumed from and those it wrote", _STEP_8),
)
SCHEMA_VERSION = MIGRATIONS[-1].version
assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1)), "steps are numbered 1, 2, 3, ..."


def schema_version(db: sqlite3.Connection) -> int:
    """The last step the file has (0: a new, empty file)."""
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def refuse_newer(path: Path, version: int) -> None:
    """GpugeekError when the file was written by a newer release than this one."""
    if version > SCHEMA_VERSION:
        from .._version import __version__

        raise GpugeekError(
            f"the registry {str(path)!r} has schema version {version}, newer than version {SCHEMA_VERSION} that "
            f"gpugeek_jupyter {__version__} knows; upgrade this environment (pip install -U gpugeek-jupyter) "
            f"or point it at another file (e.g. GPUGEEK_REGISTRY=~/gpugeek-{__version__}.sqlite)"
        )


MIN_SQLITE = (3, 35, 0)  # RETURNING (the sweeper), UPDATE ... FROM and window functions (step 3)


def require_sqlite(version: tuple[int, int, int] = sqlite3.sqlite_version_info) -> None:
    """GpugeekError when Python's SQLite library is too old for the registry's statements."""
    if version < MIN_SQLITE:
        raise GpugeekError(
            f"the registry needs SQLite {'.'.join(map(str, MIN_SQLITE))} or newer, but this Python has "
            f"{'.'.join(map(str, version))!r}; use a newer Python build (e.g. python.org or conda 3.11)"
        )


def migrate(db: sqlite3.Connection, path: Path) -> int:
    """Apply the steps the file lacks, one transaction each; returns the version it had before.

    Several processes may open an old file at once: each step re-reads the version inside its
    write transaction, so a step is applied exactly once. A file already at the latest version is
    only read.
    """
    require_sqlite()
    found = schema_version(db)
    refuse_newer(path, found)
    for step in MIGRATIONS[found:]:
        with immediate_transaction(db):
            current = schema_version(db)
            refuse_newer(path, current)
            if current >= step.version:
                continue  # another process applied it first
            for statement in step.statements:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {step.version}")  # transactional: committed with the step
        log.info("registry %s: applied schema step %d (%s)", path, step.version, step.summary)
    return found
