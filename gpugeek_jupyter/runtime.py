"""The composition root: one pool manager per process, wired with the standard plugins.

The core's packages form layers (``store`` < ``pools`` < ``telemetry`` < ``jobs``, ``cost``), and
a lower layer never imports a higher one: the pool lifecycle publishes its events through
:class:`~gpugeek_jupyter.pools.PoolLifecyclePlugin` hooks, and this module, above all of them,
registers the plugins that cost, telemetry and jobs provide (a backend's own plugins, Kubernetes'
disruption recorder and Slurm's job watcher, are registered by the manager for that backend's pools
when it first uses the backend). Kernels, scripts and the server all get their manager here, so
they run the same plugins. (The layers are written down in ``pyproject.toml`` and checked by
import-linter.)

>>> manager = get_pool_manager()          # doctest: +SKIP
>>> sorted(manager.plugins)               # doctest: +SKIP
['gpugeek-cost', 'gpugeek-end-jobs-before-stop', 'gpugeek-telemetry', 'gpugeek-version-check', ...]
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .config import get_config
from .pools import Pool, PoolLifecyclePlugin, PoolManager, PoolRecord
from .store import Registry

if TYPE_CHECKING:
    from .pools._backend import ProgressCallback
    from .spec import PoolSpec

TELEMETRY_PLUGIN = "gpugeek-telemetry"


class TelemetryStarter(PoolLifecyclePlugin):
    """Starts the telemetry samplers on a new pool's workers (now and after restarts)."""

    name = TELEMETRY_PLUGIN

    def ready(self, manager: PoolManager, pool: Pool) -> None:
        from .telemetry import install

        install(pool)  # never raises: a pool works without telemetry

    def metrics(self, pool: Pool) -> Any:
        from .telemetry import metrics

        return metrics(pool)


class VersionCheck(PoolLifecyclePlugin):
    """Names, in one notice, the workers of a new pool that run other software than this process."""

    name = "gpugeek-version-check"

    def ready(self, manager: PoolManager, pool: Pool) -> None:
        from .pools.versions import check_pool_versions

        check_pool_versions(pool)


def create_pool_manager(registry: Registry | None = None, owner: str | None = None) -> PoolManager:
    """A pool manager with the standard plugins, the same in a kernel, a script and the server."""
    from .cost.guards import install_cost_hooks
    from .cost.ledger import job_cost
    from .cost.team import install_team_ledger
    from .jobs import EndJobsBeforeStop
    from .jobs.tracking import price_jobs_with

    manager = PoolManager(registry=registry, owner=owner)
    manager.register_plugin(TelemetryStarter())  # samplers on every worker of a new pool
    manager.register_plugin(VersionCheck())  # workers with another torch, dask or gpugeek_jupyter named
    install_cost_hooks(manager)  # utilization samples, budget and idle-shutdown watchers
    install_team_ledger(manager)  # quotas checked at launch; pools written to the team ledger if there is one
    manager.register_plugin(EndJobsBeforeStop())  # a running job ends, with the reason, before its workers go
    price_jobs_with(lambda registry, job_id: job_cost(registry, job_id).total_usd)  # a tracked job's cost tag
    return manager


_manager: PoolManager | None = None
_manager_lock = threading.Lock()


def get_pool_manager() -> PoolManager:
    """This process's pool manager (made on first use)."""
    global _manager
    with _manager_lock:
        if _manager is None:
            _manager = create_pool_manager()
        return _manager


def reset_pool_manager() -> None:
    """Shut this process's pool manager down and forget it (its owned pools stop); tests use it."""
    global _manager
    with _manager_lock:
        manager, _manager = _manager, None
    if manager is not None:
        manager.shutdown()


def launch_pool(spec: PoolSpec, on_progress: ProgressCallback | None = None) -> Pool:
    """Launch a pool in this process and make it current."""
    return get_pool_manager().launch(spec, on_progress)


def list_pools(live_only: bool = False) -> list[PoolRecord]:
    """Every pool in the registry, whoever made it (dead owners' pools are marked lost first)."""
    manager = get_pool_manager()
    manager.registry.mark_lost_pools(get_config().lost_after_seconds)
    return manager.registry.list_pools(live_only=live_only)
