"""The team ledger's row of a pool and its periods, shared by the ledger (:mod:`.team`) and the
ledger service's client (:mod:`.team_service`)."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..spec import PoolSpec
    from ..store import PoolRecord, Registry


@dataclass(frozen=True)
class Holdings:
    """A user's open rows (pool_key, gpus, workers), their spend today and this month, and the
    team's this month (UTC): what a quota check counts."""

    open_rows: list[Any]
    user_usd_today: float
    user_usd_month: float
    team_usd_month: float


def gpus_of(spec: PoolSpec) -> int:
    """The GPUs a pool holds (a cpu pool none), from the catalog entry its spec carries."""
    return 0 if spec.gpu.is_cpu else int(spec.count)


def pool_key(registry: Registry, pool_id: int, host: str | None = None) -> str:
    """The ledger's key of a registry pool: the same id in another registry or host is another pool."""
    return f"{host or socket.gethostname()}:{registry.path}:{int(pool_id)}"


def start_of_day(now: float) -> float:
    moment = datetime.fromtimestamp(now, UTC)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def start_of_month(now: float) -> float:
    moment = datetime.fromtimestamp(now, UTC)
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()


def opening_report(key: str, record: PoolRecord, spec: PoolSpec, usd_per_hour: float) -> dict[str, Any]:
    """What the ledger keeps of a pool that is ready (JSON-ready, for the ledger service too)."""
    return {
        "op": "open",
        "key": key,
        "host": socket.gethostname(),
        "pool_name": record.name,
        "backend": spec.backend,
        "gpu_type": spec.gpu_type,
        "gpus": gpus_of(spec),
        "workers": int(spec.count),
        "usd_per_hour": float(usd_per_hour),
        "started_at": float(record.created_at or time.time()),
    }
