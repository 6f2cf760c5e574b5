"""IPython magics: thin adapters over the core. Bad input becomes a one-line ``UsageError``."""

from __future__ import annotations

import importlib
from typing import Any

# (module, class) of every Magics class this extension registers
_MAGIC_CLASSES: list[tuple[str, str]] = [
    ("gpugeek_jupyter.magics.pools", "PoolMagics"),
]


def register_magics(ipython: Any) -> None:
    for module_name, class_name in _MAGIC_CLASSES:
        magics_class = getattr(importlib.import_module(module_name), class_name)
        ipython.register_magics(magics_class)


def unregister_magics(ipython: Any) -> None:
    registry = ipython.magics_manager.registry
    for _module_name, class_name in _MAGIC_CLASSES:
        registry.pop(class_name, None)
