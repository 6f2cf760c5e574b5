"""The registry: one SQLite file (WAL) that every kernel and the server share.

It holds pools (spec, backend, addresses, owner, status, heartbeat), worker intervals (when each
worker ran and whether it was priced as spot or reserved; cost is computed from these rows),
jobs, schedules and their runs, and, for cost's idle spend, storage and network, one utilization sample per heartbeat and
the data volumes a pool or job recorded or a user stated. Anything that must survive a crash lives
here, and only here.

Pool statuses and their transitions (see :class:`PoolStatus`):
``starting -> ready -> stopping -> stopped``; ``starting -> failed``; any live status -> ``lost``
when its owner stops heart-beating (killed kernel). ``stopped``, ``failed`` and ``lost`` are final.
:meth:`Registry.mark_lost_pools` is the sweeper that makes pools lost; reads never write.

Concurrency: each thread gets its own connection; a process's threads write one at a time (one
lock per file), and writes use ``BEGIN IMMEDIATE`` with a generous ``busy_timeout`` plus a retry
loop, so "database is locked" never reaches a user.

Schema: numbered steps applied on open (``PRAGMA user_version``), see :mod:`._migrations`.

Modules: ``_connection`` (connections, write transactions), ``_behind`` (the end of a brief job,
written a moment later by the next write), ``_migrations`` (schema steps),
``_records`` (statuses, records), ``_pools``, ``_workers``, ``_jobs``, ``_utilization``, ``_schedules`` (queries),
``_registry`` (:class:`Registry`, :func:`get_registry`), ``_private`` (files ``0600`` in ``0700``
directories, for the registry and whatever lives beside it).
"""

from __future__ import annotations

from ._lineage import LineageRecord
from ._migrations import MIGRATIONS, SCHEMA_VERSION, Migration
from ._pools import KEEP, OWNER_EXITED
from ._private import (
    check_private_directory,
    check_private_file,
    make_private_directory,
    make_private_file,
    refuse_open_registry_directory,
    write_private_file,
)
from ._processes import process_is_alive, process_started_at
from ._records import (
    LIVE_STATUSES,
    DataVolume,
    JobRecord,
    JobStatus,
    PoolRecord,
    PoolStatus,
    QueuePlace,
    Submitter,
    UtilizationSample,
    WorkerInterval,
)
from ._registry import Registry, get_registry
from ._registry import _registries as _registries  # tests reset it
from ._registry import _registries_lock as _registries_lock
from ._schedules import RunStatus, ScheduleRecord, ScheduleRun, ScheduleStatus

RECENT_WINDOW_SECONDS = 24 * 3600.0  # "recent" pools: ended in the last day (the panel, %gpugeek_pools)

__all__ = [
    "KEEP",
    "LineageRecord",
    "OWNER_EXITED",
    "LIVE_STATUSES",
    "MIGRATIONS",
    "RECENT_WINDOW_SECONDS",
    "SCHEMA_VERSION",
    "DataVolume",
    "JobRecord",
    "JobStatus",
    "Migration",
    "PoolRecord",
    "PoolStatus",
    "QueuePlace",
    "Registry",
    "RunStatus",
    "ScheduleRecord",
    "ScheduleRun",
    "ScheduleStatus",
    "Submitter",
    "UtilizationSample",
    "WorkerInterval",
    "check_private_directory",
    "check_private_file",
    "get_registry",
    "make_private_directory",
    "refuse_open_registry_directory",
    "make_private_file",
    "process_is_alive",
    "process_started_at",
    "write_private_file",
]
