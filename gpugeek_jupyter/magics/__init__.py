"""IPython magics: thin adapters over the core. Bad input becomes a one-line ``UsageError``."""

from __future__ import annotations

import importlib
from typing import Any

from ..interrupts import release_import_lock_left_by_interrupt

# (module, class) of every Magics class this extension registers
_MAGIC_CLASSES: list[tuple[str, str]] = [
    ("gpugeek_jupyter.magics.doctor", "DoctorMagics"),  # first: usable even if a later class fails to load
    ("gpugeek_jupyter.magics.pools", "PoolMagics"),
    ("gpugeek_jupyter.magics.monitor", "MonitorMagics"),
    ("gpugeek_jupyter.magics.cost", "CostMagics"),
    ("gpugeek_jupyter.magics.run", "JobMagics"),
    ("gpugeek_jupyter.magics.where", "WhereMagics"),
    ("gpugeek_jupyter.magics.schedules", "ScheduleMagics"),
]


def register_magics(ipython: Any) -> None:
    """Register every magic; one that cannot start here (e.g. a registry path that cannot be
    opened) is left out with one line saying why, and the others work (%gpugeek_doctor says more)."""
    import sys

    for module_name, class_name in _MAGIC_CLASSES:
        try:
            magics_class = getattr(importlib.import_module(module_name), class_name)
            ipython.register_magics(magics_class)
        except Exception as e:
            print(
                f"gpugeek: {class_name} could not start: {type(e).__name__}: {e}; run %gpugeek_doctor",
                file=sys.stderr,
            )
    # ipykernel sets exit_now when it gets a shutdown request; jupyter_client sends SIGTERM soon
    # after, before Python's atexit handlers would run. Stopping the pools here records them as
    # stopped (not lost) and ends their workers while the kernel can still say so.
    ipython.observe(_stop_pools_when_the_kernel_exits, names="exit_now")
    if _after_every_cell not in ipython.events.callbacks["post_run_cell"]:
        ipython.events.register("post_run_cell", _after_every_cell)


def _after_every_cell(result: Any) -> None:
    """An interrupt that landed inside an import (any cell's, the user's own included) can leave the
    import lock held, even when the cell went on as if not interrupted; this package's threads (the
    forkserver's warm-up, job watchers, dask's event loop) would wait for ever at their next import.
    Give it back after every cell (about a microsecond when nothing is held)."""
    release_import_lock_left_by_interrupt()


def _stop_pools_when_the_kernel_exits(change: Any) -> None:
    if change["new"]:
        from ..runtime import get_pool_manager

        get_pool_manager().shutdown()


def unregister_magics(ipython: Any) -> None:
    ipython.unobserve(_stop_pools_when_the_kernel_exits, names="exit_now")
    if _after_every_cell in ipython.events.callbacks["post_run_cell"]:
        ipython.events.unregister("post_run_cell", _after_every_cell)
    registry = ipython.magics_manager.registry
    for _module_name, class_name in _MAGIC_CLASSES:
        registry.pop(class_name, None)
