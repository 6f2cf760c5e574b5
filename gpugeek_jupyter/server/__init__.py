"""The Jupyter Server extension behind the JupyterLab side panel.

Routes (under the server's ``base_url``; described in ``openapi.json``, also served at
``GET /gpugeek/openapi.json``)::

    GET    /gpugeek/pools[?namespace=]      live pools and those ended in the last 24 h, whoever made them
    GET    /gpugeek/pools?state=ended[&before=&limit=]  history, newest first, with a ``next`` cursor
    POST   /gpugeek/pools                   launch a pool owned by this server -> 201 once registered
    GET    /gpugeek/pools/{name}            one pool (its newest record)
    DELETE /gpugeek/pools/{name}            stop it, whichever process owns it -> 200 once stopped
    GET    /gpugeek/pools/{name}/metrics    latest telemetry samples, or why there are none
    GET    /gpugeek/jobs[?pool=]            recent jobs
    GET    /gpugeek/jobs/{id}               one job
    GET    /gpugeek/catalog                 GPU types, prices, backends and launch defaults

Settings come from ``c.GpugeekConfig.x`` in the server's config (over ``jupyter_gpugeek_config``
files and ``GPUGEEK_*`` variables). Pools the server launched are stopped when it exits.
"""

from __future__ import annotations

import atexit
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from traitlets.config import Config

from ..config import GpugeekConfig, _load_jupyter_config_files, set_config
from ..runtime import create_pool_manager
from ..store import get_registry
from .handlers import SERVICE_SETTING, WRITES_EXECUTOR_SETTING, route_table
from .service import SERVER_OWNER, GpugeekService

__all__ = ["GpugeekService", "load_server_extension"]

WRITE_THREADS = 8  # launches and stops in flight at once; more wait their turn


def server_config(server_app: Any) -> GpugeekConfig:
    """``GpugeekConfig`` from the gpugeek config files, overridden by the server's own config."""
    merged = Config()
    merged.merge(_load_jupyter_config_files())
    merged.merge(server_app.config)
    return GpugeekConfig(config=merged)


def load_server_extension(server_app: Any) -> None:
    """Register the routes and the server's pool manager (called by Jupyter Server at start)."""
    config = server_config(server_app)
    set_config(config)  # PoolSpec.create and the pool manager read this process's settings
    manager = create_pool_manager(registry=get_registry(config.registry_path), owner=SERVER_OWNER)
    service = GpugeekService(manager, config)
    # Extensions loaded as modules get no shutdown hook from Jupyter Server; its clean exits
    # (Ctrl-C, SIGTERM, /api/shutdown) end the interpreter, so atexit stops the server's pools.
    atexit.register(service.shutdown)
    web_app = server_app.web_app
    web_app.settings[SERVICE_SETTING] = service
    web_app.settings[WRITES_EXECUTOR_SETTING] = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="gpugeek-write")
    web_app.add_handlers(".*$", route_table(web_app.settings["base_url"]))
    server_app.log.info(
        "gpugeek_jupyter: pool routes at %sgpugeek/ (registry %s)", web_app.settings["base_url"], config.registry_path
    )
