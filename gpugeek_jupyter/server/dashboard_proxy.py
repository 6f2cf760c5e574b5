"""``GET /gpugeek/pools/<name>/dashboard/<path>``: a pool's dask dashboard behind the Jupyter login.

A local or Slurm pool's scheduler serves its dashboard on a Unix socket in the owner's private
folder beside the registry, and on no TCP port (:mod:`gpugeek_jupyter.pools.private_http`). This
route relays a logged-in user's requests, and the bokeh websockets the dashboard's pages open, to
that socket: the pool's name gives its live record, its id the socket, checked to be this user's
(:func:`~gpugeek_jupyter.pools.dashboard_socket.owned_dashboard_socket`). Another user of the host
can neither enter the folder nor log in to this server.

The relaying is jupyter-server-proxy's ``ProxyHandler`` (already what serves ``proxy/<port>/``),
which speaks HTTP and websockets over a Unix socket, drops hop-by-hop headers, keeps the bokeh
websocket's subprotocols and rewrites redirects under this route. dask's pages link relatively, so
they work under any prefix. Only ``GET`` and ``HEAD`` are relayed (the dashboard needs no other
method, and XSRF then has nothing to guard).
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

from jupyter_server.utils import url_path_join
from jupyter_server_proxy.handlers import ProxyHandler
from tornado import web

from ..errors import GpugeekError, Surface
from ..pools.dashboard_socket import owned_dashboard_socket
from ..store import Registry
from .settings import AUTH_RESOURCE, service_of

LOCALHOST = "localhost"  # what jupyter-server-proxy requires of a Unix socket's host; the port is unused


def dashboard_socket_of(registry: Registry, name: str) -> str:
    """The socket that serves live pool ``name``'s dashboard (NotFoundError, GpugeekError otherwise)."""
    return str(owned_dashboard_socket(registry, registry.live_pool(name)))


class DashboardProxyHandler(ProxyHandler):
    """Relays ``<base_url>gpugeek/pools/<name>/dashboard/<path>`` to the pool's dashboard socket."""

    SUPPORTED_METHODS = ("GET", "HEAD")  # type: ignore[assignment]
    auth_resource = AUTH_RESOURCE

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        await super().prepare(*args, **kwargs)  # authentication: a page goes to the login, a websocket gets 403
        if not self.authorizer.is_authorized(self, self.current_user, "read", AUTH_RESOURCE):
            raise web.HTTPError(403, "not authorized to read the pools' dashboards")
        name = self.path_kwargs["name"]
        try:
            registry = service_of(self.settings).registry
            self.unix_socket = await asyncio.get_running_loop().run_in_executor(
                None, dashboard_socket_of, registry, name
            )
        except GpugeekError as e:
            raise web.HTTPError(e.http_status, "%s", e.phrase(Surface.SERVER)) from e
        # where redirects of the dashboard (/ -> /status) are rewritten to, under the base URL
        self.proxy_base = url_path_join("gpugeek", "pools", quote(name, safe=""), "dashboard")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Why, in one line of text (Jupyter's own 404 page would say only "Not Found")."""
        error = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(error, web.HTTPError) and error.log_message:
            self.set_header("Content-Type", "text/plain; charset=UTF-8")
            self.finish(f"{status_code}: {error.log_message % error.args}\n")
            return
        super().write_error(status_code, **kwargs)

    async def http_get(self, name: str, path: str) -> None:
        return await self.proxy(LOCALHOST, 0, path)

    async def head(self, name: str, path: str) -> None:  # type: ignore[override]
        return await self.proxy(LOCALHOST, 0, path)

    async def open(self, name: str, path: str) -> None:  # type: ignore[override]
        return await self.proxy_open(LOCALHOST, 0, path)
