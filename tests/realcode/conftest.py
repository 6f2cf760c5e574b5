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

from support.pools import attached_pool, owned_local_pool
from support.tls import client_tls_config

POOL_NAME = "realcode"  # test_realcode.py attaches to the pool by this name


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real 2-worker local pool owned by a module-wide pool manager, with dask's TLS settings for it
    while the module runs (as a user attaching by address has them)."""
    with owned_local_pool(tmp_path_factory, "realcode-shared") as owned, client_tls_config(owned.security):
        yield owned


@pytest.fixture
def pool(shared_cluster: Any) -> Iterator[Any]:
    """The shared cluster as this test's current pool, named ``realcode`` (attached by address, 2 workers)."""
    with attached_pool(shared_cluster, POOL_NAME) as attached:
        yield attached


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory for the test (torchrun and the job both run there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
