"""Fixtures for job tests: one real local cluster for the module, attached per test by address.

Starting a pool costs seconds on this machine, so tests share one dask ``LocalCluster`` made like a
``local`` pool (same worker environment and preload); each test attaches to it as its own
``--backend address`` pool, in its own registry. That is also the path of a pool another process
owns. Tests that kill workers leave the cluster healed by its nannies.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.tls import client_tls_config


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real 2-worker local pool owned by a module-wide pool manager; yields its scheduler address."""
    from gpugeek_jupyter import config
    from gpugeek_jupyter.pools import PoolManager
    from gpugeek_jupyter.spec import PoolSpec
    from gpugeek_jupyter.store import Registry

    config.set_config(None)
    manager = PoolManager(registry=Registry(tmp_path_factory.mktemp("owner") / "owner.sqlite"), owner="tests")
    pool = manager.launch(PoolSpec.create(gpu_type="cpu", count=2, name="jobs-shared"))
    with client_tls_config(pool.security):  # attaching by address, as a user would: with dask's TLS config
        yield pool.scheduler_address
    manager.shutdown()


@pytest.fixture
def pool(shared_cluster: str) -> Iterator[Any]:
    """The shared cluster as this test's current pool (attached by address, 2 workers)."""
    import gpugeek_jupyter

    attached = gpugeek_jupyter.launch(backend="address", address=shared_cluster, count=2, name="jobs")
    yield attached
    attached.stop()


@pytest.fixture
def in_tmp(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    return tmp_path
