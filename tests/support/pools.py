"""Real pools for tests that share one per module: starting a pool costs seconds on this machine.

:func:`owned_local_pool` launches a real local cpu pool owned by a pool manager of its own (its own
registry), as another process's pool is; :func:`attached_pool` attaches to it by address as a user
would (``--backend address``, with dask's TLS settings for its credentials), in the test's registry.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from support.tls import client_tls_config


@contextmanager
def owned_local_pool(tmp_path_factory: pytest.TempPathFactory, name: str, count: int = 2) -> Iterator[Any]:
    """A real ``count``-worker local cpu pool named ``name``; stopped with its manager afterwards."""
    from gpugeek_jupyter import config
    from gpugeek_jupyter.pools import PoolManager
    from gpugeek_jupyter.spec import PoolSpec
    from gpugeek_jupyter.store import Registry

    config.set_config(None)
    manager = PoolManager(registry=Registry(tmp_path_factory.mktemp(f"owner-{name}") / "owner.sqlite"), owner="tests")
    try:
        yield manager.launch(PoolSpec.create(gpu_type="cpu", count=count, name=name))
    finally:
        manager.shutdown()


@contextmanager
def attached_pool(owned: Any, name: str) -> Iterator[Any]:
    """``owned`` attached by its address as this test's current pool ``name``; detached afterwards."""
    import gpugeek_jupyter

    with client_tls_config(owned.security):  # as a user attaching by address: dask's TLS settings
        attached = gpugeek_jupyter.launch(
            backend="address", address=owned.scheduler_address, count=owned.spec.count, name=name
        )
    try:
        yield attached
    finally:
        attached.stop()
