"""JSON-ready models of pools and jobs, built in one place from registry records.

The routes hand these dicts to the panel unchanged; their keys are the panel's ``IPoolModel`` and
``IJobModel`` (``labextension/src/models.ts``). Cost and telemetry come from the source functions
below, :func:`pool_cost` (the cost ledger) and :func:`pool_telemetry`, so each can change engine
without touching the models.

>>> cost = pool_cost(registry, record, now, lost_after_seconds=15)        # doctest: +SKIP
>>> make_pool_model(record, intervals, cost, pool_telemetry(registry, record))["status"]  # doctest: +SKIP
'ready'
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..catalog import CPU
from ..cost import ledger
from ..dashboards import is_server_route, proxy_available, proxy_path
from ..errors import NotFoundError
from ..jobs.pool_queue import is_detached
from ..spec import PoolSpec
from ..store import JobRecord, JobStatus, PoolRecord, Registry, WorkerInterval

TELEMETRY_UNAVAILABLE = "telemetry not available"
UTIL_HISTORY = 60  # utilization points in a pool model (one per owner heartbeat)


def iso_time(timestamp: float | None) -> str | None:
    """A Unix time as an ISO 8601 string in UTC (``None`` stays ``None``)."""
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, tz=UTC).isoformat()


# -- sources: cost --------------------------------------------------------------------------------
@dataclass(frozen=True)
class PoolCost:
    usd_per_hour: float  # what the pool's running workers cost per hour now (0 once it has ended)
    usd_so_far: float  # compute, storage and network since it started
    budget_fraction: float | None  # usd_so_far / budget; None without a budget


def pool_cost(registry: Registry, record: PoolRecord, now: float, lost_after_seconds: float) -> PoolCost:
    """What a pool has cost: the one place the server reads money, from the cost ledger (without the
    idle-spend scan over every utilization sample, which the model does not show)."""
    breakdown = ledger.pool_cost(
        registry, record.id, now=now, lost_after_seconds=lost_after_seconds, include_idle=False
    )
    return PoolCost(breakdown.usd_per_hour_now, breakdown.total_usd, breakdown.budget_fraction)


def job_usd(registry: Registry, job: JobRecord, now: float, lost_after_seconds: float) -> float | None:
    """What a job has cost (its pool's workers while it ran); None when its pool row is gone."""
    try:
        return ledger.job_cost(registry, job.id, now=now, lost_after_seconds=lost_after_seconds).total_usd
    except NotFoundError:
        return None


# -- sources: telemetry ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TelemetryView:
    samples: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = TELEMETRY_UNAVAILABLE  # why there are no samples, when there are none
    mean_sm_util: float | None = None  # percent, latest sample, mean over the pool's GPUs
    sm_util_history: list[float] = field(default_factory=list)  # percent, oldest first
    util_reason: str | None = None  # why there is no utilization, when there is none
    util_kind: str = "sm"  # what mean_sm_util measures: "sm" (GPU SM %) or "cpu" (CPU % of cpu workers)


def pool_telemetry(registry: Registry, record: PoolRecord, history: int = UTIL_HISTORY) -> TelemetryView:
    """The latest telemetry of a pool: the one place the server reads telemetry from.

    Utilization comes from the registry's per-heartbeat utilization rows, written by the pool's
    owner: mean SM utilization over its GPUs (NVML), or for cpu pools mean CPU utilization of its
    workers (``util_kind`` says which, so the panel labels it). Detailed samples need the telemetry
    engine, which the server cannot read yet: it says so instead of inventing numbers.
    """
    rows = registry.latest_utilization(record.id, history)
    percents = [round(100.0 * min(1.0, max(0.0, s.mean_util)), 2) for s in rows]
    return TelemetryView(
        mean_sm_util=percents[-1] if percents else None,
        sm_util_history=percents,
        util_kind="cpu" if record.gpu_type == CPU else "sm",
        util_reason=None if percents or not record.status.is_live else "no utilization samples yet",
    )


# -- models ---------------------------------------------------------------------------------------
def _round_usd(value: float) -> float:
    return round(value, 6)


def make_pool_model(
    record: PoolRecord,
    intervals: Iterable[WorkerInterval],
    cost: PoolCost,
    telemetry: TelemetryView,
) -> dict[str, Any]:
    """One pool as the panel shows it (``IPoolModel``); ``intervals`` may hold other pools' rows too."""
    spec = PoolSpec.from_dict(record.spec)
    workers_ready = 0
    if record.status.is_live:
        workers_ready = sum(1 for i in intervals if i.pool_id == record.id and i.stopped_at is None)
    reason = record.reason
    return {
        "name": record.name,
        "status": record.status.value,
        "backend": record.backend,
        "gpu_type": spec.gpu_type,
        "count": spec.count,
        "workers_ready": workers_ready,
        "spot_workers": spec.spot_workers,
        # the panel splits count into spot / reserved / on-demand; non-spot workers are one or the other
        "reserved_workers": spec.reserved_workers if spec.base_pricing == "reserved" else 0,
        "usd_per_hour": _round_usd(cost.usd_per_hour),
        "usd_so_far": _round_usd(cost.usd_so_far),
        "budget_usd": spec.budget,
        "budget_fraction": cost.budget_fraction,
        "mean_sm_util": telemetry.mean_sm_util,
        "sm_util_history": list(telemetry.sm_util_history),
        "util_kind": telemetry.util_kind,
        **dashboard_fields(record),
        "scheduler_address": record.scheduler_address or "",
        "owner": record.owner,
        "owner_label": record.owner_label,
        "namespace": record.namespace,
        "created_at": iso_time(record.created_at),
        "ended_at": iso_time(record.ended_at),
        "reason": reason,
    }


def dashboard_fields(record: PoolRecord) -> dict[str, str | None]:
    """``dashboard_link`` (where the dashboard is: this server's route to it, relative to its base
    URL, for local and Slurm pools; else its http address) and ``dashboard_path`` (what serves it
    behind the user's Jupyter login, relative to the base URL); both None once the pool has ended."""
    link = record.dashboard_link if record.status.is_live else None
    path = link if is_server_route(link) else proxy_path(link) if proxy_available() else None
    return {"dashboard_link": link, "dashboard_path": path}


def make_job_model(record: JobRecord, usd: float | None, now: float, position: int | None = None) -> dict[str, Any]:
    """One job as the panel shows it (``IJobModel``); ``position``: its place in its pool's queue
    while it is queued (1: next to run)."""
    end = record.ended_at if record.ended_at is not None else now
    if record.status is JobStatus.QUEUED:
        end = record.started_at  # it has not run yet
    waited = (now if record.status is JobStatus.QUEUED else record.started_at) - (record.queued_at or record.started_at)
    return {
        "id": record.id,
        "pool": record.pool_name,
        "status": record.status.value,
        "ranks": record.ranks,
        "started_at": iso_time(record.started_at),
        "ended_at": iso_time(record.ended_at),
        "duration_s": round(max(0.0, end - record.started_at), 3),
        "usd": None if usd is None else _round_usd(usd),
        "failure_reason": record.failure_reason,
        "code_sha256": record.code_sha256 or None,
        "hyperparams": record.hyperparams,
        "queued_at": iso_time(record.queued_at),
        "waited_s": round(max(0.0, waited), 3),
        "position": position if record.status is JobStatus.QUEUED else None,
        "submitter": record.submitter,
        "detached": is_detached(record),
        "slow_rank": record.summary.get("slow_rank"),
    }
