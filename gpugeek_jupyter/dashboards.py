"""Where a pool's dask dashboard is reached from a browser: through the Jupyter server's proxy.

A local pool's dashboard listens on loopback, unauthenticated; a browser on another machine (a
JupyterHub user) cannot reach it, and any local user could. With jupyter-server-proxy in the Jupyter
server, ``<base_url>proxy/<port>/status`` serves it behind the user's Jupyter login, as
dask-labextension does; this module turns a dashboard link into that path.

>>> proxy_path("http://127.0.0.1:8787/status")
'proxy/8787/status'
>>> proxy_path("http://10.0.0.5:8787/status") is None  # another host: the server cannot proxy it
True
"""

from __future__ import annotations

import importlib.util
import os
from urllib.parse import urlsplit

_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


def proxy_available() -> bool:
    """jupyter-server-proxy is installed in this environment (where the Jupyter server runs too)."""
    return importlib.util.find_spec("jupyter_server_proxy") is not None


def proxy_path(dashboard_link: str | None) -> str | None:
    """``proxy/<port>/<path>`` (relative to the Jupyter server's base URL) for a dashboard on this
    host; None for one elsewhere or no link."""
    if not dashboard_link:
        return None
    parts = urlsplit(dashboard_link)
    if parts.scheme not in ("http", "https") or parts.hostname not in _LOCAL_HOSTS or parts.port is None:
        return None
    return f"proxy/{parts.port}{parts.path or '/status'}"


def browser_link(dashboard_link: str | None) -> str | None:
    """The link a notebook shows: through the Jupyter server's proxy when it has one (under
    JupyterHub's ``JUPYTERHUB_SERVICE_PREFIX``, else the server's root), else the direct link."""
    path = proxy_path(dashboard_link) if proxy_available() else None
    if path is None:
        return dashboard_link
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")
    return prefix.rstrip("/") + "/" + path
