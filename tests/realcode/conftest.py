"""Fixtures for the real-code tests: one real local cluster for the module, attached per test by address.

As in ``tests/jobs``: starting a pool costs seconds here, so the tests of a module share one dask
``LocalCluster`` made like a ``local`` pool, and each test attaches to it as its own ``--backend
address`` pool named ``realcode``, in its own registry.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.tls import client_tls_config

POOL_NAME = "realcode"  # test_realcode.py attaches to the pool by this name


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real 2-worker local pool owned by a module-wide pool manager; yields its scheduler address."""
    from gpugeek_jupyter import config
    from gpugeek_jupyter.pools import PoolManager
    from gpugeek_jupyter.spec import PoolSpec
    from gpugeek_jupyter.store import Registry

    config.set_config(None)
    manager = PoolManager(registry=Registry(tmp_path_factory.mktemp("owner") / "owner.sqlite"), owner="tests")
    pool = manager.launch(PoolSpec.create(gpu_type="cpu", count=2, name="realcode-shared"))
    with client_tls_config(pool.security):  # attaching by address, as a user would: with dask's TLS config
        yield pool.scheduler_address
    manager.shutdown()


@pytest.fixture
def pool(shared_cluster: str) -> Iterator[Any]:
    """The shared cluster as this test's current pool, named ``realcode`` (attached by address, 2 workers)."""
    import gpugeek_jupyter

    attached = gpugeek_jupyter.launch(backend="address", address=shared_cluster, count=2, name=POOL_NAME)
    yield attached
    attached.stop()


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory for the test (torchrun and the job both run there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
