"""End to end on a real cluster: runs when KUBECONFIG points at one with the dask-kubernetes operator.

Needs: the operator (helm install --repo https://helm.dask.org --create-namespace -n dask-operator
--generate-name dask-kubernetes-operator), a namespace you may create DaskClusters in
(GPUGEEK_TEST_NAMESPACE, default "default"), nodes that can pull ghcr.io/dask/dask, and no GPU.
Pools here are CPU pools with the dask image, so a laptop cluster (kind, minikube, k3d) will do.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.k8s

NAMESPACE = os.environ.get("GPUGEEK_TEST_NAMESPACE", "default")


@pytest.fixture(scope="module")
def api() -> object:
    from gpugeek_jupyter.errors import GpugeekError
    from gpugeek_jupyter.pools.k8s_errors import OPERATOR_INSTALL
    from gpugeek_jupyter.pools.kubernetes import connect

    try:
        client = connect()
    except GpugeekError as e:
        pytest.skip(f"KUBECONFIG is set but gives no usable cluster: {e}")
    import kr8s

    try:
        list(client.get("customresourcedefinitions", "daskclusters.kubernetes.dask.org"))
    except (kr8s.NotFoundError, kr8s.ServerError) as e:
        pytest.skip(f"the dask-kubernetes operator is not installed ({e}); install it with: {OPERATOR_INSTALL}")
    return client


@pytest.fixture
def k8s_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUGEEK_WORKER_START_TIMEOUT", os.environ.get("GPUGEEK_TEST_START_TIMEOUT", "600"))


def dask_image() -> str:
    import sys

    import distributed

    return f"ghcr.io/dask/dask:{distributed.__version__}-py{sys.version_info.major}.{sys.version_info.minor}"


def unique_name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def cluster_exists(api: object, name: str) -> bool:
    return bool(list(api.get("daskclusters.kubernetes.dask.org", name, namespace=NAMESPACE, raw=True)))  # type: ignore[attr-defined]


def wait_gone(api: object, name: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while cluster_exists(api, name):
        assert time.monotonic() < deadline, f"DaskCluster {name} still exists {timeout:.0f} s after the pool stopped"
        time.sleep(1)


@pytest.fixture
def cpu_k8s_pool(api: object, k8s_settings: None) -> Iterator[object]:
    import gpugeek_jupyter

    pool = gpugeek_jupyter.launch(
        backend="kubernetes",
        namespace=NAMESPACE,
        gpu_type="cpu",
        count=2,
        name=unique_name("gg-e2e"),
        image=dask_image(),
    )
    yield pool
    if pool.status.is_live:
        pool.stop()
    wait_gone(api, pool.name)


def test_a_pool_runs_tasks_on_the_cluster_and_stopping_it_deletes_everything(api: object, cpu_k8s_pool: object) -> None:
    pool = cpu_k8s_pool
    assert pool.client.submit(sum, [1, 2]).result(timeout=120) == 3  # type: ignore[attr-defined]
    assert len(pool.worker_addresses()) == 2  # type: ignore[attr-defined]
    pods = list(api.get("pods", namespace=NAMESPACE, label_selector=f"gpugeek.io/pool={pool.name}", raw=True))  # type: ignore[attr-defined]
    assert len(pods) == 3 and all(p["metadata"]["labels"]["gpugeek.io/team"] == NAMESPACE for p in pods)
    pool.stop()  # type: ignore[attr-defined]
    wait_gone(api, pool.name)  # type: ignore[attr-defined]


def test_a_pool_speaks_tls_with_its_own_secret_and_refuses_a_client_without_it(
    api: object, cpu_k8s_pool: object
) -> None:
    """The real path of the pool's TLS on Kubernetes: the Secret mounted into the pods, tls:// only."""
    from distributed import Client

    pool = cpu_k8s_pool
    assert pool.scheduler_address.startswith("tls://")  # type: ignore[attr-defined]
    secrets = list(api.get("secrets", f"{pool.name}-tls", namespace=NAMESPACE, raw=True))  # type: ignore[attr-defined]
    assert secrets and secrets[0]["metadata"]["ownerReferences"][0]["kind"] == "DaskCluster"
    with pytest.raises(OSError):
        Client(pool.scheduler_address.replace("tls://", "tcp://"), timeout=10)  # type: ignore[attr-defined]
    pool.stop()  # type: ignore[attr-defined]
    wait_gone(api, pool.name)  # type: ignore[attr-defined]
    assert not list(api.get("secrets", f"{pool.name}-tls", namespace=NAMESPACE, raw=True))  # type: ignore[attr-defined]


def test_a_teams_listing_shows_its_pools_only(api: object, cpu_k8s_pool: object) -> None:
    from gpugeek_jupyter.pools.kubernetes import list_cluster_pools

    listed = list_cluster_pools(NAMESPACE)
    assert cpu_k8s_pool.name in {p["name"] for p in listed}  # type: ignore[attr-defined]
    assert all(p["labels"]["gpugeek.io/team"] == NAMESPACE for p in listed)
    other = "gpugeek-e2e-" + secrets.token_hex(3)
    assert list_cluster_pools(other) == []


def test_a_namespace_that_does_not_exist_is_named(api: object, k8s_settings: None) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.errors import BackendUnavailableError

    with pytest.raises(BackendUnavailableError, match=r"namespace 'gg-missing-[0-9a-f]+' does not exist"):
        gpugeek_jupyter.launch(
            backend="kubernetes", namespace=unique_name("gg-missing"), gpu_type="cpu", count=1, name=unique_name("gg")
        )


def test_gpus_no_node_has_fail_at_the_deadline_with_the_schedulers_reason(
    api: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.catalog import load_catalog
    from gpugeek_jupyter.errors import PoolStartError

    product = load_catalog().gpu("H200-141GB").k8s_product
    nodes = list(api.get("nodes", label_selector=f"nvidia.com/gpu.product={product}", raw=True))  # type: ignore[attr-defined]
    if nodes:
        pytest.skip(f"this cluster has {product} nodes")
    monkeypatch.setenv("GPUGEEK_WORKER_START_TIMEOUT", "90")
    name = unique_name("gg-h200")
    with pytest.raises(PoolStartError, match=rf"Pending: 0/\d+ nodes have nvidia\.com/gpu\.product={product}"):
        gpugeek_jupyter.launch(
            backend="kubernetes", namespace=NAMESPACE, gpu_type="H200-141GB", count=1, name=name, image=dask_image()
        )
    wait_gone(api, name)  # nothing is left behind


@pytest.mark.slow
def test_the_default_group_autoscales_up_by_two_and_back(api: object, k8s_settings: None) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.pools.autoscale import AutoscalePolicy
    from gpugeek_jupyter.pools.kubernetes import autoscale_pool

    pool = gpugeek_jupyter.launch(
        backend="kubernetes",
        namespace=NAMESPACE,
        gpu_type="cpu",
        count=1,
        name=unique_name("gg-scale"),
        image=dask_image(),
    )
    try:
        [adaptive] = autoscale_pool(pool, AutoscalePolicy(minimum=1, maximum=3, idle_cooldown=20, interval=2))

        def slow(i: int) -> int:
            import time

            time.sleep(2)
            return i

        futures = pool.client.map(slow, range(40))
        deadline = time.monotonic() + 600
        while len(pool.worker_addresses()) < 3:
            assert time.monotonic() < deadline, f"no scale-up: {list(adaptive.log)}"
            time.sleep(2)
        assert sorted(pool.client.gather(futures)) == list(range(40))
        del futures
        while len(pool.worker_addresses()) > 1:
            assert time.monotonic() < deadline, f"no scale-down: {list(adaptive.log)}"
            time.sleep(2)
        assert [e["n"] for _, e in adaptive.log if e["status"] == "up"][:1] == [3]  # 1 + 2, capped at 3
        adaptive.stop()
    finally:
        pool.stop()
        wait_gone(api, pool.name)


def test_a_kept_pool_is_connected_again_by_the_next_agent_when_its_agent_is_killed(
    api: object, k8s_settings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal

    import gpugeek_jupyter
    from gpugeek_jupyter.detached.connection import connect
    from gpugeek_jupyter.store import get_registry
    from support.agent import agent_stopped_afterwards

    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    name = unique_name("gg-kept")
    with agent_stopped_afterwards():
        pool = gpugeek_jupyter.launch(
            backend="kubernetes", namespace=NAMESPACE, gpu_type="cpu", count=2, name=name, image=dask_image(), keep=True
        )
        first = int(connect().ping()["pid"])
        os.kill(first, signal.SIGKILL)
        time.sleep(1.0)
        assert cluster_exists(api, name)  # the operator keeps it: nobody deleted it
        second = int(connect().ping()["pid"])  # the next agent, which connects to it again as it starts
        record = get_registry().live_pool(name)
        from gpugeek_jupyter.runtime import get_pool_manager

        used = get_pool_manager().use(name)
        answer = used.client.submit(sum, [1, 2]).result(timeout=120)
        get_pool_manager().stop(name)
        wait_gone(api, name)

    assert second != first and record.id != pool.id and record.owner == f"gpugeek agent (pid {second})"
    assert answer == 3
