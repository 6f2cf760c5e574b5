"""The kubernetes backend's parts that need no cluster: settings, pricing by worker group, imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpugeek_jupyter.config import GpugeekConfig
from gpugeek_jupyter.errors import SpecError
from gpugeek_jupyter.pools.k8s_manifest import SPOT_PRESETS, options_from_config, spot_placement
from gpugeek_jupyter.pools.kubernetes import KubernetesWorkerGroup, pricing_of_worker
from gpugeek_jupyter.spec import PoolSpec

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def kube_spec(**overrides: object) -> PoolSpec:
    options = dict(
        gpu_type="A100-80GB", count=8, spot_fraction=0.7, backend="kubernetes", namespace="team-risk", name="risk"
    )
    options.update(overrides)
    return PoolSpec.create(**options)


def test_importing_the_package_and_backend_loads_no_kubernetes_client() -> None:
    code = (
        "import sys, gpugeek_jupyter, gpugeek_jupyter.pools, gpugeek_jupyter.pools.kubernetes, "
        "gpugeek_jupyter.pools.k8s_manifest, gpugeek_jupyter.pools.k8s_errors; "
        "print(sorted(m for m in ('kr8s', 'dask_kubernetes', 'kubernetes', 'yaml', 'httpx') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert result.stdout.strip() == "[]", result.stderr


@pytest.mark.parametrize("preset", sorted(SPOT_PRESETS))
def test_spot_presets_come_from_the_settings(preset: str) -> None:
    assert spot_placement(GpugeekConfig(kubernetes_spot_preset=preset)) == SPOT_PRESETS[preset]


def test_a_custom_spot_selector_and_tolerations_replace_the_presets() -> None:
    config = GpugeekConfig(
        kubernetes_spot_preset="custom",
        kubernetes_spot_node_selector={"node-pool": "spot-a100"},
        kubernetes_spot_tolerations=[{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
    )
    placement = spot_placement(config)
    assert placement.node_selector == {"node-pool": "spot-a100"}
    assert placement.tolerations == ({"key": "spot", "operator": "Exists", "effect": "NoSchedule"},)


def test_the_spot_preset_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUGEEK_SPOT_PRESET", "aks")
    assert spot_placement(GpugeekConfig()) == SPOT_PRESETS["aks"]


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"kubernetes_spot_preset": "gcp"}, r"'gcp' is unknown .*e\.g\. GPUGEEK_SPOT_PRESET=eks"),
        ({"kubernetes_spot_preset": "custom"}, r"kubernetes_spot_node_selector is empty .*e\.g\."),
    ],
)
def test_bad_spot_settings_are_refused_with_an_example(settings: dict, expected: str) -> None:
    with pytest.raises(SpecError, match=expected):
        spot_placement(GpugeekConfig(**settings))


def test_options_carry_this_kernels_dask_version_and_user(monkeypatch: pytest.MonkeyPatch) -> None:
    import distributed

    monkeypatch.setenv("JUPYTERHUB_USER", "grace")
    options = options_from_config(GpugeekConfig())
    assert options.dask_version == distributed.__version__
    assert options.user == "grace"
    assert options.python_version == f"{sys.version_info.major}.{sys.version_info.minor}"


def test_workers_are_priced_by_their_group() -> None:
    spec = kube_spec(base_pricing="reserved")
    assert pricing_of_worker(spec, "risk-spot-worker-0123456789") == "spot"
    assert pricing_of_worker(spec, "risk-default-worker-0123456789") == "reserved"
    assert pricing_of_worker(spec, "7") is None


def test_the_registry_records_spot_workers_as_spot_whatever_order_they_connect_in() -> None:
    from gpugeek_jupyter.pools._backend import RunningCluster
    from gpugeek_jupyter.pools._manager import PoolManager, _WorkerTracker
    from gpugeek_jupyter.pools._pool import Pool
    from gpugeek_jupyter.store import get_registry

    spec = kube_spec(count=3, spot_fraction=0.34)  # 1 spot, 2 on-demand
    registry = get_registry()
    record = registry.add_pool(spec.name, spec.backend, spec.to_dict(), {}, owner="test", namespace=spec.namespace)
    running = RunningCluster(
        client=None,  # type: ignore[arg-type]  # the tracker reads only the workers it is given
        scheduler_address="tcp://risk-scheduler.team-risk:8786",
        dashboard_link=None,
        pricing_of_worker=lambda name: pricing_of_worker(spec, name),
    )
    pool = Pool(record, running, PoolManager(registry), owned=True)
    tracker = _WorkerTracker(registry, pool)
    tracker.sync(
        {  # the on-demand workers connect first: position would have made one of them spot
            "tcp://10.0.0.1:1": {"name": "risk-default-worker-aaaaaaaaaa", "host": "10.0.0.1"},
            "tcp://10.0.0.2:1": {"name": "risk-default-worker-bbbbbbbbbb", "host": "10.0.0.2"},
            "tcp://10.0.0.3:1": {"name": "risk-spot-worker-cccccccccc", "host": "10.0.0.3"},
        }
    )
    pricing = {w.worker_name: w.pricing for w in registry.worker_intervals(record.id)}
    assert pricing == {
        "risk-default-worker-aaaaaaaaaa": "on_demand",
        "risk-default-worker-bbbbbbbbbb": "on_demand",
        "risk-spot-worker-cccccccccc": "spot",
    }


def test_a_kubernetes_worker_group_owns_only_its_own_workers() -> None:
    spot = KubernetesWorkerGroup("risk", "team-risk", "spot")
    assert spot.resource_name == "risk-spot"
    assert spot.owns("risk-spot-worker-0123456789")
    assert not spot.owns("risk-default-worker-0123456789")
    assert not spot.owns("riskier-spot-worker-0123456789")
