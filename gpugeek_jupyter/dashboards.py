"""Where a pool's dask dashboard is reached from a browser: always through the Jupyter server.

A local or Slurm pool's scheduler serves its dashboard on a Unix socket only its owner can open
(:mod:`gpugeek_jupyter.pools.private_http`), and the owner's Jupyter server serves it behind the
Jupyter login at ``<base_url>gpugeek/pools/<name>/dashboard/``: the registry keeps that route
(relative to the server's base URL) as the pool's dashboard link. Another pool's dashboard (an
attached scheduler, a Kubernetes Service) has an http address; one on this host is reached through
jupyter-server-proxy's ``<base_url>proxy/<port>/`` when the server has it, as dask-labextension does.

>>> pool_dashboard_path("dev")
'gpugeek/pools/dev/dashboard/status'
>>> proxy_path("gpugeek/pools/dev/dashboard/status")  # already a route of the Jupyter server
'gpugeek/pools/dev/dashboard/status'
>>> proxy_path("http://127.0.0.1:8787/status")
'proxy/8787/status'
>>> proxy_path("http://10.0.0.5:8787/status") is None  # another host: the server cannot proxy it
True
"""

from __future__ import annotations

import importlib.util
import os
from urllib.parse import quote, urlsplit

_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
DASHBOARD_ROUTE = "gpugeek/pools/{name}/dashboard/"  # the server extension's route, under its base URL
DASHBOARD_PAGE = "status"


def pool_dashboard_path(name: str) -> str:
    """The dashboard of pool ``name`` as the Jupyter server serves it, relative to its base URL."""
    return DASHBOARD_ROUTE.format(name=quote(name, safe="")) + DASHBOARD_PAGE


def is_server_route(dashboard_link: str | None) -> bool:
    """Whether ``dashboard_link`` is a route of the Jupyter server (relative to its base URL)
    rather than an http address."""
    return bool(dashboard_link) and not urlsplit(dashboard_link).scheme and not str(dashboard_link).startswith("/")


def proxy_available() -> bool:
    """jupyter-server-proxy is installed in this environment (where the Jupyter server runs too)."""
    return importlib.util.find_spec("jupyter_server_proxy") is not None


def proxy_path(dashboard_link: str | None) -> str | None:
    """The path (relative to the Jupyter server's base URL) that serves ``dashboard_link`` behind the
    Jupyter login: the link itself for a route of the server, ``proxy/<port>/<path>`` for an http
    dashboard on this host; None for one elsewhere or no link."""
    if not dashboard_link:
        return None
    if is_server_route(dashboard_link):
        return dashboard_link
    parts = urlsplit(dashboard_link)
    if parts.scheme not in ("http", "https") or parts.hostname not in _LOCAL_HOSTS or parts.port is None:
        return None
    return f"proxy/{parts.port}{parts.path or '/status'}"


def browser_link(dashboard_link: str | None) -> str | None:
    """The link a notebook shows: under the Jupyter server (JupyterHub's
    ``JUPYTERHUB_SERVICE_PREFIX``, else the server's root) for a route of the server, or an http
    dashboard on this host when the server has jupyter-server-proxy; else the direct link. A link
    that is already an absolute path is returned as it is."""
    if not dashboard_link or dashboard_link.startswith("/"):
        return dashboard_link
    path = (
        dashboard_link if is_server_route(dashboard_link) else proxy_path(dashboard_link) if proxy_available() else None
    )
    if path is None:
        return dashboard_link
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")
    return prefix.rstrip("/") + "/" + path
