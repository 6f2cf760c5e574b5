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

from support.pools import attached_pool, owned_local_pool
from support.tls import client_tls_config


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real 2-worker local pool owned by a module-wide pool manager, with dask's TLS settings for it
    while the module runs (as a user attaching by address has them)."""
    with owned_local_pool(tmp_path_factory, "jobs-shared") as owned, client_tls_config(owned.security):
        yield owned


@pytest.fixture
def pool(shared_cluster: Any) -> Iterator[Any]:
    """The shared cluster as this test's current pool (attached by address, 2 workers)."""
    with attached_pool(shared_cluster, "jobs") as attached:
        yield attached


@pytest.fixture
def in_tmp(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    return tmp_path
