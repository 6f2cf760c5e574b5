"""IPython magics: thin adapters over the core. Bad input becomes a one-line ``UsageError``."""

from __future__ import annotations

import importlib
from typing import Any

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


def _stop_pools_when_the_kernel_exits(change: Any) -> None:
    if change["new"]:
        from ..runtime import get_pool_manager

        get_pool_manager().shutdown()


def unregister_magics(ipython: Any) -> None:
    ipython.unobserve(_stop_pools_when_the_kernel_exits, names="exit_now")
    registry = ipython.magics_manager.registry
    for _module_name, class_name in _MAGIC_CLASSES:
        registry.pop(class_name, None)
