"""The notebook's handle on a kubernetes pool that the dask operator runs: a ``distributed`` Cluster.

The operator creates and heals the pods from our ``DaskCluster``/``DaskWorkerGroup`` manifests; this
process only needs a cluster manager that reaches the pool's scheduler, as dask's own ``Cluster``
base class defines one (``scheduler_comm``, the worker-status subscription, ``close``), so that a
``Client``, the dashboard link and the autoscaler work as with any dask cluster.
dask-kubernetes' ``KubeCluster.from_name`` does that too, but speaks plain TCP only (its address
is always ``tcp://`` and its connections carry no TLS context), while each of our pools has its own
certificate authority and its scheduler refuses any connection without the pool's certificate.

:func:`scheduler_addresses` finds the scheduler's address and dashboard through the pool's Service
(port-forwarded when this process runs outside the cluster), with dask-kubernetes' own helpers;
:class:`KubernetesPoolCluster` connects to it with the pool's ``Security`` and, when the pool is
stopped, deletes its resources (the operator then deletes the pods).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any

from distributed.core import rpc
from distributed.deploy.cluster import Cluster
from distributed.utils import format_dashboard_link

from ..errors import PoolStartError
from ..polling import apoll_until

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 0.2


class KubernetesPoolCluster(Cluster):
    """A running pool's scheduler at ``address`` (``tls://`` with ``security``, else ``tcp://``).

    ``on_close`` runs once when the cluster is closed (deleting the pool's resources, for the
    process that owns the pool); ``timeout`` bounds the wait for the scheduler to answer.
    """

    def __init__(
        self,
        name: str,
        address: str,
        *,
        security: Any = None,
        dashboard_link: str | None = None,
        on_close: Callable[[], None] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.security = security  # what Client(cluster) connects with
        self._address = address
        self._dashboard = dashboard_link
        self._on_close = on_close
        self._timeout = timeout
        super().__init__(asynchronous=False, name=name, quiet=True)
        self._loop_runner.start()
        try:
            self.sync(self._start)
        except BaseException:
            self._loop_runner.stop()
            raise

    def __repr__(self) -> str:
        return f"<KubernetesPoolCluster {self.name!r} {self._address} {self.status.name}>"

    def _connection_args(self) -> dict[str, Any]:
        return dict(self.security.get_connection_args("client")) if self.security is not None else {}

    async def _start(self) -> None:
        refused: list[OSError] = []  # the last probe's answer

        async def answers() -> bool:
            try:
                async with rpc(self._address, connection_args=self._connection_args()) as probe:
                    await probe.identity()
            except OSError as e:  # not listening yet, or refused the handshake
                refused[:] = [e]
                return False
            return True

        def silent() -> PoolStartError:
            e = refused[0]
            error = PoolStartError(
                f"pool '{self.name}': its scheduler at {self._address} did not answer within "
                f"{self._timeout:.0f} s ({type(e).__name__}: {e})"
            )
            error.__cause__ = e
            return error

        await apoll_until(
            answers, timeout=self._timeout, interval=PROBE_INTERVAL_S, what=f"pool '{self.name}'", on_timeout=silent
        )
        self.scheduler_comm = rpc(self._address, connection_args=self._connection_args())
        await super()._start()

    @property
    def dashboard_link(self) -> str:
        return self._dashboard or str(super().dashboard_link)

    async def _close(self) -> None:
        already_closed = self.status.name == "closed"
        await super()._close()
        on_close, self._on_close = self._on_close, None
        if on_close is not None and not already_closed:
            await asyncio.get_running_loop().run_in_executor(None, on_close)

    def close(self, timeout: float | None = None) -> Any:
        try:
            return super().close(timeout=timeout)
        finally:
            self._loop_runner.stop()


def scheduler_addresses(name: str, namespace: str, tls: bool) -> tuple[str, str | None]:
    """The scheduler's comm address (``tls://`` when the pool requires TLS) and its dashboard link,
    from the pool's ``<name>-scheduler`` Service (port-forwarded from outside the cluster)."""
    from dask_kubernetes.operator.networking import get_scheduler_address

    async def find() -> tuple[str, str]:
        service = f"{name}-scheduler"
        comm = await get_scheduler_address(service, namespace)
        dashboard = await get_scheduler_address(service, namespace, port_name="http-dashboard")
        return str(comm), str(dashboard)

    # on a thread of its own: a notebook's kernel runs its cells inside a running event loop
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gpugeek-k8s-address") as executor:
        comm, dashboard = executor.submit(asyncio.run, find()).result()
    hostport = comm.split("://", 1)[-1]
    address = f"{'tls' if tls else 'tcp'}://{hostport}"
    dashboard_host, _, dashboard_port = dashboard.split("://", 1)[-1].rpartition(":")
    return address, format_dashboard_link(dashboard_host, dashboard_port) if dashboard_port else None
