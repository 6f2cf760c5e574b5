"""The agent process's life: serve on the user's socket, exit when idle or asked, stop its pools.

It runs in a session of its own (no terminal: the kernel, the browser or the Jupyter server that
started it can end without it). Serving is ``multiprocessing.managers``' own server on the Unix
socket; this module only starts it, watches for the idle period and ends it cleanly. A SIGTERM is
taken as a request to stop (pools stopped, detached jobs cancelled with that reason).

Plugins (:meth:`.service.AgentService.register_plugin`) are loaded at start from
:data:`AGENT_PLUGINS`, each a module whose ``agent_plugin(service)`` returns the plugin: the
layers above this one (scheduled runs) run in the agent so, without this package importing them.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from ..config import get_config
from ..pools.worker_origin import warm_up
from .connection import AgentManager, agent_key, agent_paths
from .service import AgentService

log = logging.getLogger(__name__)

IDLE_CHECK_S = 1.0
AGENT_PLUGINS = ("gpugeek_jupyter.schedules.agent",)  # module names: each has agent_plugin(service)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    paths = agent_paths()
    # dask first, on this thread: two threads importing distributed's modules for the first time at
    # once can meet one half-initialized ("cannot import name 'rejoin' from partially initialized
    # module"), and the agent's threads (a client's launch, a taken-back job, a schedule) all use it
    import distributed.deploy.spec  # noqa: F401

    # the forkserver kept pools' local workers are forked from, torch imported, started now: the
    # first kept pool a kernel asks for then starts as fast as a kernel's own second pool
    warm_up(get_config().preload_torch)

    service = AgentService()
    AgentManager.register("service", callable=lambda: service)
    manager = AgentManager(address=str(paths.socket), authkey=agent_key(paths))
    old_umask = os.umask(0o177)  # the socket is made 0600
    try:
        server: Any = manager.get_server()
    finally:
        os.umask(old_umask)
    os.chmod(paths.socket, 0o600)
    signal.signal(signal.SIGTERM, lambda signum, frame: service.stopping.set())
    log.info("gpugeek agent %d serving on %s", os.getpid(), paths.socket)
    # pools a previous agent kept that outlived it (kept Slurm pools), with their running jobs; before
    # serving, so that no client's call imports what this does at the same time
    _take_back(service)
    _load_plugins(service)  # after: a schedule's first run may launch a pool, importing dask as that does
    threading.Thread(target=_watch, args=(service, server), name="gpugeek-agent-idle", daemon=True).start()
    try:
        server.serve_forever()  # returns (SystemExit) once the stop event is set
    except SystemExit:
        pass
    finally:
        _close(service, paths.socket)


def _load_plugins(service: AgentService) -> None:
    for module_name in AGENT_PLUGINS:
        try:
            plugin = importlib.import_module(module_name).agent_plugin(service)
            service.register_plugin(plugin, module_name)
        except Exception:  # the agent still serves kept pools and detached jobs
            log.exception("gpugeek agent %d: plugin %s did not start", os.getpid(), module_name)


def _take_back(service: AgentService) -> None:
    try:
        names = service.take_back()
    except Exception:  # the agent still serves; the keepers give up in time and say why
        log.exception("gpugeek agent %d: taking pools back failed", os.getpid())
        return
    if names:
        log.info("gpugeek agent %d took back pools %s", os.getpid(), ", ".join(names))


def _watch(service: AgentService, server: Any) -> None:
    while not service.should_exit() or not hasattr(server, "stop_event"):  # made by serve_forever
        time.sleep(IDLE_CHECK_S)
    log.info("gpugeek agent %d: %s; exiting", os.getpid(), "asked to stop" if service.stopping.is_set() else "idle")
    server.stop_event.set()


def _close(service: AgentService, socket_path: Any) -> None:
    try:
        service.close()  # the socket goes with the listener's own finalizer, at exit
    finally:
        log.info("gpugeek agent %d stopped", os.getpid())
        sys.exit(0)
