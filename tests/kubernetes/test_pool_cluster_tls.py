"""The cluster manager of kubernetes pools (:class:`KubernetesPoolCluster`) against a real TLS
scheduler: a local pool's, which has its own credentials exactly as a kubernetes pool's scheduler
pod has them from its Secret. (Finding the address through the pool's Service needs a Kubernetes
API: tests/kubernetes/test_k8s_cluster.py, marked k8s.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpugeek_jupyter.errors import PoolStartError
from gpugeek_jupyter.pools.k8s_cluster import KubernetesPoolCluster


@pytest.fixture
def tls_pool() -> Iterator[Any]:
    import gpugeek_jupyter

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="tls-target")
    assert pool.scheduler_address.startswith("tls://")
    yield pool
    pool.stop()


@pytest.mark.filterwarnings(
    "ignore:Scheduler already contains a plugin with name worker-status"
)  # the local pool's own manager subscribed first
def test_it_reaches_the_scheduler_with_the_pools_certificates_and_a_client_follows(tls_pool: Any) -> None:
    from distributed import Client

    closed: list[str] = []
    cluster = KubernetesPoolCluster(
        "tls-target",
        tls_pool.scheduler_address,
        security=tls_pool.security,
        dashboard_link="http://127.0.0.1:1/status",
        on_close=lambda: closed.append("deleted"),
        timeout=20,
    )
    try:
        assert cluster.scheduler_address == tls_pool.scheduler_address
        assert cluster.dashboard_link == "http://127.0.0.1:1/status"
        deadline = time.monotonic() + 10
        while len(cluster.scheduler_info["workers"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(cluster.scheduler_info["workers"]) == 2  # the worker-status subscription, over TLS
        with Client(cluster, set_as_default=False) as client:  # the cluster's security, as for any dask cluster
            assert client.submit(sum, [1, 2]).result(timeout=30) == 3
    finally:
        cluster.close(timeout=30)
        cluster.close(timeout=30)  # twice is once
    assert closed == ["deleted"]
    assert tls_pool.client.submit(sum, [2, 2]).result(timeout=30) == 4  # closing the manager left the pool alone


def test_without_the_pools_certificates_it_is_refused_and_says_so_at_its_deadline(tls_pool: Any) -> None:
    from distributed.security import Security

    started = time.monotonic()
    with pytest.raises(PoolStartError) as raised:
        KubernetesPoolCluster("tls-target", tls_pool.scheduler_address, security=Security.temporary(), timeout=2)
    assert time.monotonic() - started < 20
    assert f"its scheduler at {tls_pool.scheduler_address} did not answer within 2 s" in str(raised.value)


@pytest.mark.filterwarnings("ignore:Scheduler already contains a plugin with name worker-status")
def test_it_works_from_inside_a_running_event_loop_as_a_notebooks_cell_runs(tls_pool: Any) -> None:
    import asyncio

    async def cell() -> tuple[str, str]:  # ipykernel runs a cell's code inside its running event loop
        cluster = KubernetesPoolCluster(
            "tls-target", tls_pool.scheduler_address, security=tls_pool.security, timeout=20
        )
        try:
            return cluster.status.name, cluster.scheduler_address
        finally:
            cluster.close(timeout=30)

    assert asyncio.run(cell()) == ("running", tls_pool.scheduler_address)
