"""The Jupyter Server extension behind the JupyterLab side panel.

Routes (under the server's ``base_url``; described in ``openapi.json``, also served at
``GET /gpugeek/openapi.json``)::

    GET    /gpugeek/pools[?namespace=]      live pools and those ended in the last 24 h, whoever made them
    GET    /gpugeek/pools?state=ended[&before=&limit=]  history, newest first, with a ``next`` cursor
    POST   /gpugeek/pools                   launch a pool owned by this server -> 201 once registered
    GET    /gpugeek/pools/{name}            one pool (its newest record)
    DELETE /gpugeek/pools/{name}            stop it, whichever process owns it -> 200 once stopped
    GET    /gpugeek/pools/{name}/metrics    latest telemetry samples, or why there are none
    GET    /gpugeek/pools/{name}/dashboard/{path}  its dask dashboard (a page, and its websockets)
    GET    /gpugeek/jobs[?pool=]            recent jobs
    POST   /gpugeek/jobs                    run a script, detached, on a kept pool -> 201
    GET    /gpugeek/jobs/{id}               one job
    DELETE /gpugeek/jobs/{id}               cancel a detached job
    GET    /gpugeek/jobs/{id}/output[?since=]  grouped tail, or a page of its event stream
    GET    /gpugeek/catalog                 GPU types, prices, backends and launch defaults

The extension is a jupyter_server ``ExtensionApp`` (:class:`GpugeekServerExtension`): settings come
through traitlets from its parent, the server: ``c.GpugeekConfig.x`` in the server's config or in
``jupyter_gpugeek_config.{py,json}`` (the extension's own config files), over ``GPUGEEK_*``
variables. Pools the server launched are stopped by the extension's stop hook when it exits.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jupyter_server.extension.application import ExtensionApp

from ..config import GpugeekConfig, set_config
from ..errors import RegistryFolderOpenError, Surface
from ..runtime import create_pool_manager
from ..store import get_registry
from .handlers import route_table
from .service import SERVER_OWNER, GpugeekService
from .settings import SERVICE_SETTING, UNAVAILABLE_SETTING, WRITES_EXECUTOR_SETTING

__all__ = ["GpugeekServerExtension", "GpugeekService"]

WRITE_THREADS = 8  # launches and stops in flight at once; more wait their turn


class GpugeekServerExtension(ExtensionApp):
    """The ``/gpugeek`` routes and the server's pool manager."""

    name = "gpugeek"  # its config files: jupyter_gpugeek_config.{py,json}
    load_other_extensions = True

    service: GpugeekService | None = None
    writes: ThreadPoolExecutor | None = None
    _outbox_stop: threading.Event | None = None

    def initialize_settings(self) -> None:
        # imported once here, before any request: requests run on several threads, and two threads
        # that first import distributed through different modules (a launch and a metrics read)
        # can meet in its import cycle and fail with "partially initialized module"
        import distributed  # noqa: F401

        config = GpugeekConfig(parent=self)  # the server's config and the extension's files
        set_config(config)  # PoolSpec.create and the pool manager read this process's settings
        try:
            registry = get_registry(config.registry_path)
        except RegistryFolderOpenError as e:  # one line in the log, and every route answers it (503)
            self.log.error("gpugeek_jupyter: %s", e.phrase(Surface.SERVER))
            self.settings[UNAVAILABLE_SETTING] = e
            return
        manager = create_pool_manager(registry=registry, owner=SERVER_OWNER)
        self.service = GpugeekService(manager, config)
        self.writes = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="gpugeek-write")
        self.settings[SERVICE_SETTING] = self.service
        self.settings[WRITES_EXECUTOR_SETTING] = self.writes
        if config.team_service_url:  # reports the team's ledger service missed go once it answers
            from ..cost.team import team_ledger
            from ..cost.team_service import keep_flushing

            self._outbox_stop = threading.Event()
            keep_flushing(team_ledger(config, manager.registry), self._outbox_stop)
        self.log.info(
            "gpugeek_jupyter: pool routes at %sgpugeek/ (registry %s)",
            self.serverapp.base_url if self.serverapp else "/",
            config.registry_path,
        )

    def initialize_handlers(self) -> None:
        self.handlers.extend(route_table("/"))  # ExtensionApp puts the server's base_url in front

    async def stop_extension(self) -> None:
        """Stop the pools this server launched (Jupyter calls this on a clean exit)."""
        if self.service is not None:
            self.service.shutdown()
        if self._outbox_stop is not None:
            self._outbox_stop.set()
        if self.writes is not None:
            self.writes.shutdown(wait=False)


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "gpugeek_jupyter", "app": GpugeekServerExtension}]
