"""What the registry holds, as every reader sees it: statuses and frozen records built from rows."""

from __future__ import annotations

import enum
import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any


class PoolStatus(str, enum.Enum):
    """``starting -> ready -> stopping -> stopped``; ``starting -> failed``; any live status -> ``lost``
    when its owner stops heart-beating or dies. ``stopped``, ``failed`` and ``lost`` are final."""

    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
    LOST = "lost"

    @property
    def is_live(self) -> bool:
        """Whether the pool may still run workers (and cost money)."""
        return self in LIVE_STATUSES

    def __str__(self) -> str:
        return self.value


LIVE_STATUSES = frozenset({PoolStatus.STARTING, PoolStatus.READY, PoolStatus.STOPPING})
# the same set as an SQL list; a constant, so safe to splice into statements
LIVE_SQL = "(" + ", ".join(f"'{s.value}'" for s in sorted(LIVE_STATUSES)) + ")"


class JobStatus(str, enum.Enum):
    """``queued -> running -> succeeded | failed | cancelled``; ``queued -> cancelled`` (interrupted
    while waiting, or its pool stopped); a lost owner makes an open job failed. ``pending`` is kept
    for rows of older releases."""

    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        """Whether the job has ended (it then has an ``ended_at``)."""
        return self not in OPEN_JOB_STATUSES

    def __str__(self) -> str:
        return self.value


OPEN_JOB_STATUSES = frozenset({JobStatus.PENDING, JobStatus.QUEUED, JobStatus.RUNNING})
# the same set as an SQL list; a constant, so safe to splice into statements
OPEN_JOB_SQL = "(" + ", ".join(f"'{s.value}'" for s in sorted(OPEN_JOB_STATUSES)) + ")"


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
    owner_label: str | None = None  # the notebook it was launched from ("notebook train.ipynb"), if any

    @property
    def gpu_type(self) -> str:
        return str(self.spec.get("gpu_type", ""))

    @property
    def count(self) -> int:
        return int(self.spec.get("count", 0))


@dataclass(frozen=True)
class WorkerInterval:
    """One row of ``workers``: when a worker ran and how it was priced (``stopped_at`` None: running)."""

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
    """One heartbeat's mean utilization (0..1) over a pool's devices, and the bytes its hosts sent."""

    pool_id: int
    at: float
    mean_util: float
    gpus: int
    net_bytes: int


@dataclass(frozen=True)
class DataVolume:
    """Storage and network GB of a pool or one of its jobs, ``recorded`` by them or ``stated`` by the user."""

    pool_id: int
    job_id: str | None
    at: float
    storage_gb: float | None
    network_gb: float | None
    source: str


@dataclass(frozen=True)
class Submitter:
    """The process that submits jobs: how people know it (a notebook, a script), and, to tell whether
    it still runs, its pid, host and start time (a pid alone can be reused)."""

    label: str
    pid: int
    host: str
    started_at: float


@dataclass(frozen=True)
class JobRecord:
    """One row of ``jobs``, with its JSON columns decoded."""

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
    queued_at: float | None = None  # when it joined its pool's queue (None: rows of older releases)
    submitter: str | None = None  # who submitted it, as people know it: a notebook, a script, a pid
    submitter_pid: int | None = None
    submitter_host: str | None = None
    submitter_started_at: float | None = None

    @property
    def waited_s(self) -> float:
        """How long it waited in its pool's queue before it ran (or until it left the queue)."""
        return max(0.0, self.started_at - self.queued_at) if self.queued_at is not None else 0.0


@dataclass(frozen=True)
class QueuePlace:
    """A job's place in its pool's queue, as one transaction saw it."""

    status: JobStatus  # the job's own: queued, running (its turn came), or final (it left the queue)
    ahead: list[JobRecord]  # the open jobs ahead of it, oldest first
    previous: str | None  # the id of the pool's newest job before it that has ended (None: none)


def pool_record(row: sqlite3.Row) -> PoolRecord:
    """The record of a ``pools`` row (``SELECT *``)."""
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
        owner_label=row["owner_label"],
    )


def worker_interval(row: sqlite3.Row) -> WorkerInterval:
    """The record of a ``workers`` row (``SELECT *``)."""
    return WorkerInterval(**dict(row))


def job_record(row: sqlite3.Row) -> JobRecord:
    """The record of a ``jobs`` row (``SELECT *``)."""
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
        queued_at=row["queued_at"],
        submitter=row["submitter"],
        submitter_pid=row["submitter_pid"],
        submitter_host=row["submitter_host"],
        submitter_started_at=row["submitter_started_at"],
    )
