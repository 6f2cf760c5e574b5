"""dask's HTTP servers, kept from other users of the host: the scheduler's on a Unix socket of the
owner's, the workers' nowhere.

dask gives every scheduler and every worker an HTTP server of its own (the dashboard, ``/metrics``,
``json/identity.json``, the workers' table), unauthenticated, on a TCP port: on a shared host any
local user could read it, directly or through jupyter-server-proxy's ``/proxy/<port>/``. A local or
Slurm pool's scheduler runs in the launching process; :class:`PrivateHttpScheduler` serves that
application on the pool's socket (:mod:`.dashboard_socket`) and on no TCP port, and the owner's
Jupyter server serves it at ``<base_url>gpugeek/pools/<name>/dashboard/`` behind the Jupyter login
(:mod:`gpugeek_jupyter.server.dashboard_proxy`). Workers (:class:`PoolWorker`) build their HTTP
application but never listen: nothing of gpugeek reads it (telemetry and job output travel over
dask's own TLS comms), and each worker's port would be one more way in.

>>> cluster = private_http_cluster(LocalCluster)(..., scheduler_kwargs={"dashboard_socket": path})  # doctest: +SKIP
>>> # dask-jobqueue: scheduler_cls=PrivateHttpScheduler, and WORKER_ARGS on the worker's command line
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
from pathlib import Path
from typing import Any

from distributed import Client, Scheduler, Worker
from distributed.http.routing import RoutingApplication
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_unix_socket

from ..dashboards import browser_link, pool_dashboard_path
from .dashboard_socket import SOCKET_MODE

log = logging.getLogger(__name__)

CLOSE_CONNECTIONS_TIMEOUT = 5.0  # s; a browser's open page must not hold up the pool's stop
# the scheduler's route that relays to any host and port it is given (meant for the workers' own
# dashboards, which no longer listen): dropped, so the dashboard reaches nothing beyond itself
_RELAY_MODULE = "distributed.http.proxy"
WORKER_CLASS = f"{__name__}.PoolWorker"
# what ``dask worker`` (Slurm's job scripts) is started with: a worker whose HTTP server never listens
WORKER_ARGS = ("--worker-class", WORKER_CLASS, "--no-dashboard")


def _bind_private_socket(path: Path) -> socket.socket | None:
    """A listening Unix socket at ``path``, ``0600`` (its directory keeps others out in any case)."""
    try:
        return bind_unix_socket(str(path), mode=SOCKET_MODE)
    except (OSError, ValueError) as e:
        log.warning("the scheduler serves no dashboard: it cannot listen on %s (%s)", path, e)
        return None


class PrivateHttpScheduler(Scheduler):
    """A dask scheduler whose HTTP application (the dashboard, ``/metrics``, the JSON and info pages)
    is served on the Unix socket ``dashboard_socket`` only, never on a TCP port; with no socket
    (None) it is served nowhere. ``dashboard_address`` is ignored."""

    def __init__(self, *args: Any, dashboard_socket: str | os.PathLike[str] | None = None, **kwargs: Any) -> None:
        self._dashboard_socket = Path(dashboard_socket) if dashboard_socket is not None else None
        self.dashboard_socket: Path | None = None  # where it listens, once it does
        super().__init__(*args, **kwargs)

    def start_http_server(
        self, routes: list[Any], dashboard_address: Any, default_port: int = 0, ssl_options: Any = None
    ) -> None:
        routes = [route for route in routes if getattr(route[1], "__module__", "") != _RELAY_MODULE]
        self.http_application = RoutingApplication(routes)
        self.http_server = HTTPServer(self.http_application)
        # the dashboard's websocket origins are computed from this port; no "dashboard" service is
        # registered, so dask's own dashboard_link (host:port) stays empty rather than wrong
        self.http_server.address, self.http_server.port = "", 0
        if self._dashboard_socket is not None:
            listening = _bind_private_socket(self._dashboard_socket)
            if listening is not None:
                self.http_server.add_socket(listening)
                self.dashboard_socket = self._dashboard_socket

    async def _stop_services(self) -> None:
        await super()._stop_services()
        # dask stops the HTTP servers it registered as services; this one is not registered
        self.http_server.stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.http_server.close_all_connections(), CLOSE_CONNECTIONS_TIMEOUT)
        if self.dashboard_socket is not None:
            with contextlib.suppress(FileNotFoundError):
                self.dashboard_socket.unlink()
            self.dashboard_socket = None


class PoolWorker(Worker):
    """A dask worker whose HTTP server (its own dashboard and ``/metrics``) never listens: on a shared
    host a worker's port would answer any local user. Its comm, which runs the jobs, is unchanged."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["dashboard"] = False  # the worker's bokeh pages would need a port
        super().__init__(*args, **kwargs)

    def start_http_server(
        self, routes: list[Any], dashboard_address: Any, default_port: int = 0, ssl_options: Any = None
    ) -> None:
        self.http_application = RoutingApplication(routes)
        self.http_server = HTTPServer(self.http_application)
        self.http_server.address, self.http_server.port = "", 0


def served_dashboard_link(cluster: Any) -> str:
    """dask's ``dashboard_link`` of a cluster named for its pool whose scheduler is a
    :class:`PrivateHttpScheduler`: the Jupyter server's route to it ('' when it serves none)."""
    if getattr(cluster.scheduler, "dashboard_socket", None) is None:
        return ""
    return browser_link(pool_dashboard_path(cluster.name)) or ""


class PoolClient(Client):
    """A dask ``Client`` of a pool this process attached to by address, whose ``dashboard_link`` is
    the pool's (dask would look for the scheduler's dashboard port, which it does not have)."""

    def __init__(self, *args: Any, dashboard_link: str | None = None, **kwargs: Any) -> None:
        self._pool_dashboard_link = dashboard_link or ""
        super().__init__(*args, **kwargs)

    @property
    def dashboard_link(self) -> str:
        return self._pool_dashboard_link


@functools.cache
def private_http_cluster(cluster_class: type) -> type:
    """``cluster_class`` (a ``LocalCluster``, or dask-cuda's ``LocalCUDACluster``) whose scheduler is a
    :class:`PrivateHttpScheduler` (give it ``scheduler_kwargs={"dashboard_socket": path}``) and
    whose nannies start :class:`PoolWorker` processes."""

    class PrivateHttpCluster(cluster_class):  # type: ignore[misc]
        async def _start(self) -> None:
            spec: dict[str, Any] | None = self.scheduler_spec  # type: ignore[has-type]  # SpecCluster's
            if self.scheduler is None and spec is not None:
                self.scheduler_spec = {**spec, "cls": PrivateHttpScheduler}
            await super()._start()

        @property
        def dashboard_link(self) -> str:
            return served_dashboard_link(self)

        def new_worker_spec(self) -> dict[Any, dict[str, Any]]:
            # every worker a scale() adds, and through its nanny every restart of it
            return {
                name: {**spec, "options": {**spec.get("options", {}), "worker_class": PoolWorker}}
                for name, spec in super().new_worker_spec().items()
            }

    PrivateHttpCluster.__name__ = PrivateHttpCluster.__qualname__ = cluster_class.__name__
    return PrivateHttpCluster
