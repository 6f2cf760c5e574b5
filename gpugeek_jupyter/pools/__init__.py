"""Pools: dask clusters made from a :class:`~gpugeek_jupyter.spec.PoolSpec` and kept in the registry."""

from __future__ import annotations

from ..store import PoolRecord, PoolStatus
from ._manager import PoolManager, create_pool_manager, get_pool_manager
from ._pool import Pool

__all__ = ["Pool", "PoolManager", "create_pool_manager", "PoolRecord", "PoolStatus", "get_pool_manager", "launch_pool", "list_pools"]


def launch_pool(spec, on_progress=None) -> Pool:  # type: ignore[no-untyped-def]
    """Launch a pool in this process and make it current."""
    return get_pool_manager().launch(spec, on_progress)


def list_pools(live_only: bool = False) -> list[PoolRecord]:
    """Every pool in the registry, whoever made it (dead owners' pools are marked lost first)."""
    from ..config import get_config

    manager = get_pool_manager()
    manager.registry.mark_lost_pools(get_config().lost_after_seconds)
    return manager.registry.list_pools(live_only=live_only)
