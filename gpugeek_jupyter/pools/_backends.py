"""The backends by name, for the manager: each is imported when a pool first asks for it.

A backend's module imports the manager's types (its lifecycle plugins take the manager), so the
manager must not import the backends: it names them here, as entry points name a package's plugins
(module and class), and :func:`backend_for` imports the one a spec asks for. This also keeps the
Kubernetes and Slurm clients out of a process that launches only local pools.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import SpecError

if TYPE_CHECKING:
    from ._backend import Backend

# name -> (module, class); the module is imported on first use
BACKENDS: dict[str, tuple[str, str]] = {
    "local": ("gpugeek_jupyter.pools.local", "LocalBackend"),
    "kubernetes": ("gpugeek_jupyter.pools.kubernetes", "KubernetesBackend"),
    "address": ("gpugeek_jupyter.pools.address", "AddressBackend"),
    "slurm": ("gpugeek_jupyter.pools.slurm", "SlurmBackend"),
}


def backend_for(name: str) -> Backend:
    """A new backend object for ``name`` (one of :data:`BACKENDS`)."""
    if name not in BACKENDS:
        raise SpecError(field="backend", value=name, rule=f"one of {', '.join(BACKENDS)}", example="local")
    module, cls = BACKENDS[name]
    backend: Backend = getattr(importlib.import_module(module), cls)()
    return backend
