"""Pools: dask clusters made from a :class:`~gpugeek_jupyter.spec.PoolSpec` and kept in the registry.

This package knows nothing of jobs, telemetry or cost: they plug into the lifecycle through
:class:`PoolLifecyclePlugin`; :mod:`gpugeek_jupyter.runtime` wires them and owns the process's
manager (``get_pool_manager``).
"""

from __future__ import annotations

from ..store import PoolRecord, PoolStatus
from ._manager import PoolManager
from ._plugin import PoolLifecyclePlugin
from ._pool import Pool

__all__ = ["Pool", "PoolLifecyclePlugin", "PoolManager", "PoolRecord", "PoolStatus"]
