"""``Pool``: a pool as seen from the process that launched or attached to it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..dashboards import browser_link
from ..pricing import hourly_rate
from ..spec import PoolSpec
from ..store import PoolRecord, PoolStatus, Registry
from .scheduler_workers import connected_workers

if TYPE_CHECKING:
    from distributed import Client

    from ._backend import RunningCluster
    from ._manager import PoolManager

log = logging.getLogger(__name__)


class Pool:
    """A running pool: its spec, its status, its dask ``Client``.

    >>> pool = gpugeek_jupyter.current_pool()          # doctest: +SKIP
    >>> pool.client.submit(sum, [1, 2]).result()       # doctest: +SKIP
    3
    """

    def __init__(self, record: PoolRecord, running: RunningCluster, manager: PoolManager, owned: bool) -> None:
        self._record = record
        self._running = running
        self._manager = manager
        self.owned = owned  # False when attached to a pool that another process launched
        self.spec = PoolSpec.from_dict(record.spec)

    def __repr__(self) -> str:
        status = self.status
        return (
            f"<Pool {self.name!r} {status.value}: {self.spec.count} x {self.spec.gpu_type}, "
            f"backend={self.spec.backend}, dashboard={self._dashboard_link_while(status)}>"
        )

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def id(self) -> int:
        return self._record.id

    @property
    def registry(self) -> Registry:
        """The registry this pool is recorded in (its jobs and cost rows go there too)."""
        return self._manager.registry

    @property
    def manager(self) -> PoolManager:
        """The pool manager of this process that launched or attached this pool."""
        return self._manager

    @property
    def record(self) -> PoolRecord:
        """The registry's current row for this pool."""
        self._record = self._manager.registry.pool_by_id(self._record.id)
        return self._record

    @property
    def status(self) -> PoolStatus:
        return self.record.status

    @property
    def client(self) -> Client:
        """The pool's dask ``Client``, for using dask directly."""
        return self._running.client

    @property
    def cluster(self) -> Any:
        return self._running.cluster

    @property
    def running(self) -> RunningCluster:
        return self._running

    @property
    def scheduler_address(self) -> str:
        return self._running.scheduler_address

    @property
    def security(self) -> Any:
        """The dask ``Security`` that reaches this pool (its TLS certificates' paths, never their
        contents), for a ``Client`` of your own:

        >>> Client(pool.scheduler_address, security=pool.security)  # doctest: +SKIP
        """
        return self._running.security

    @property
    def dashboard_link(self) -> str | None:
        """Where a browser opens the pool's dask dashboard, None once the pool has stopped (or when it
        has none). A local or Slurm pool's is the Jupyter server's route, behind the Jupyter login:
        ``/gpugeek/pools/dev/dashboard/status`` (under JupyterHub's ``/user/<name>/``); its
        scheduler listens on no TCP port (:mod:`.private_http`)."""
        return self._dashboard_link_while(self.status)

    def _dashboard_link_while(self, status: PoolStatus) -> str | None:
        return browser_link(self._running.dashboard_link) if status.is_live else None

    @property
    def prices(self) -> dict[str, Any]:
        return self._record.prices

    @property
    def usd_per_hour(self) -> float:
        return hourly_rate(self.spec, self._record.prices)

    def pricing_of(self, worker_name: str, index: int | None = None) -> str:
        """How the worker named ``worker_name`` is paid for: ``spot``, ``reserved`` or ``on_demand``.

        A backend whose workers belong to priced groups (kubernetes: spot / default) answers by
        group; otherwise the spec's mix decides by the worker's index (its name, when a number, else
        ``index``): the first ``spot_workers`` are spot. The one source of this fact, for the cost
        intervals and for the rank layout.
        """
        group_pricing = self._running.pricing_of_worker(worker_name) if self._running.pricing_of_worker else None
        if group_pricing:
            return group_pricing
        position = int(worker_name) if worker_name.isdigit() else index
        return self.spec.pricing_of_worker(position) if position is not None else self.spec.base_pricing

    def worker_addresses(self) -> list[str]:
        """Connected workers in rank order (by dask worker name, then address)."""
        workers = connected_workers(self.client)
        return [addr for addr, _ in sorted(workers.items(), key=lambda kv: _rank_key(kv[1].get("name"), kv[0]))]

    def metrics(self) -> Any:
        """Telemetry samples as a pandas DataFrame: one row per GPU (or CPU-only worker) per sample,
        with worker, host, GPU index, the ``nvidia-smi dmon`` fields and, without a GPU, the reason.

        >>> pool.metrics().groupby("gpu")["sm_util_pct"].mean()     # doctest: +SKIP
        """
        provider: Any = self._manager.plugins.get("gpugeek-telemetry")  # see gpugeek_jupyter.runtime
        if provider is None or not callable(getattr(provider, "metrics", None)):
            from ..errors import GpugeekError

            raise GpugeekError(
                f"pool {self.name!r} has no telemetry in this process (its manager has no telemetry plugin)"
            )
        return provider.metrics(self)

    def stop(self) -> None:
        """Stop the pool (its workers exit); for an attached pool, ask its owner to stop it."""
        self._manager.stop(self.name)


def _rank_key(name: Any, address: str) -> tuple[int, Any, str]:
    if isinstance(name, int) or (isinstance(name, str) and name.isdigit()):
        return (0, int(name), address)
    return (1, str(name), address)
