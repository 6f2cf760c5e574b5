"""The manifests of a kubernetes pool: what they ask for, and that real schemas accept them."""

from __future__ import annotations

import copy
import itertools

import pytest
import yaml
from k8s_validation import crd_validator, errors_of, manifest_problems

from gpugeek_jupyter.catalog import load_catalog
from gpugeek_jupyter.errors import SpecError
from gpugeek_jupyter.pools.k8s_manifest import (
    SPOT_PRESETS,
    KubernetesOptions,
    build_manifests,
    group_of_worker,
    label_value,
    pool_selector,
)
from gpugeek_jupyter.spec import PoolSpec

CATALOG = load_catalog()
OPTIONS = KubernetesOptions(user="ada.lovelace@example.com", dask_version="2026.8.0")
COUNTS_AND_FRACTIONS = list(itertools.product([1, 3, 8, 64], [0.0, 0.3, 0.7, 1.0]))


def kube_spec(**overrides: object) -> PoolSpec:
    options = dict(
        gpu_type="A100-80GB",
        count=8,
        spot_fraction=0.7,
        framework="PyTorch 2.0",
        idle_timeout=30,
        backend="kubernetes",
        namespace="team-risk",
        name="risk",
    )
    options.update(overrides)
    return PoolSpec.create(**options)


def worker_groups(manifests: list[dict]) -> dict[str, dict]:
    """Group name ('default' or 'spot') -> the worker template of that group."""
    groups = {"default": manifests[0]["spec"]["worker"]}
    for m in manifests[1:]:
        groups[m["metadata"]["name"].removeprefix(m["spec"]["cluster"] + "-")] = m["spec"]["worker"]
    return groups


def worker_container(group: dict) -> dict:
    [container] = group["spec"]["containers"]
    return container


# -- what the manifests ask for ----------------------------------------------------------------------
def test_seed_example_splits_eight_workers_into_six_spot_and_two_on_demand() -> None:
    manifests = build_manifests(kube_spec(), CATALOG, OPTIONS)
    assert [m["kind"] for m in manifests] == ["DaskCluster", "DaskWorkerGroup"]
    groups = worker_groups(manifests)
    assert groups["spot"]["replicas"] == 6  # round(8 x 0.7) = round(5.6)
    assert groups["default"]["replicas"] == 2
    assert manifests[1]["spec"]["cluster"] == "risk"


@pytest.mark.parametrize(("count", "fraction"), COUNTS_AND_FRACTIONS)
def test_spot_and_on_demand_replicas_add_up_to_count(count: int, fraction: float) -> None:
    spec = kube_spec(count=count, spot_fraction=fraction)
    groups = worker_groups(build_manifests(spec, CATALOG, OPTIONS))
    assert groups["default"]["replicas"] == spec.reserved_workers
    assert groups.get("spot", {"replicas": 0})["replicas"] == spec.spot_workers
    assert sum(g["replicas"] for g in groups.values()) == count
    assert ("spot" in groups) == (spec.spot_workers > 0)


def test_each_worker_gets_one_gpu_of_the_catalog_product_and_tolerates_the_gpu_taint() -> None:
    for group in worker_groups(build_manifests(kube_spec(), CATALOG, OPTIONS)).values():
        pod = group["spec"]
        resources = worker_container(group)["resources"]
        assert resources["limits"]["nvidia.com/gpu"] == "1"
        assert pod["nodeSelector"]["nvidia.com/gpu.product"] == CATALOG.gpu("A100-80GB").k8s_product
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        assert set(resources["requests"]) >= {"cpu", "memory"}


def test_cpu_pools_ask_for_no_gpu_and_no_gpu_nodes() -> None:
    spec = kube_spec(gpu_type="cpu", spot_fraction=0)
    [cluster] = build_manifests(spec, CATALOG, OPTIONS)
    pod = cluster["spec"]["worker"]["spec"]
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu.product" not in pod.get("nodeSelector", {})
    assert "tolerations" not in pod


def test_spot_workers_select_spot_nodes_and_the_rest_stay_off_them() -> None:
    for preset_name, preset in SPOT_PRESETS.items():
        options = KubernetesOptions(user="ada", spot=preset)
        groups = worker_groups(build_manifests(kube_spec(), CATALOG, options))
        spot_pod, on_demand_pod = groups["spot"]["spec"], groups["default"]["spec"]
        for key, value in preset.node_selector.items():
            assert spot_pod["nodeSelector"][key] == value, preset_name
            terms = on_demand_pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert {"key": key, "operator": "NotIn", "values": [value]} in terms["nodeSelectorTerms"][0][
                "matchExpressions"
            ]
            assert key not in on_demand_pod["nodeSelector"]
        for toleration in preset.tolerations:
            assert toleration in spot_pod["tolerations"], preset_name
            assert toleration not in on_demand_pod["tolerations"], preset_name


def test_the_scheduler_runs_without_a_gpu_and_off_spot_nodes() -> None:
    [cluster, _] = build_manifests(kube_spec(), CATALOG, OPTIONS)
    scheduler = cluster["spec"]["scheduler"]["spec"]
    assert "nvidia.com/gpu" not in scheduler["containers"][0]["resources"].get("limits", {})
    assert "tolerations" not in scheduler
    assert scheduler["affinity"]["nodeAffinity"]


def test_framework_picks_the_catalog_image_and_image_overrides_it() -> None:
    for framework, image in CATALOG.frameworks.items():
        groups = worker_groups(build_manifests(kube_spec(framework=framework), CATALOG, OPTIONS))
        assert {worker_container(g)["image"] for g in groups.values()} == {image}
    groups = worker_groups(build_manifests(kube_spec(image="registry.example.com/risk/torch:7"), CATALOG, OPTIONS))
    assert {worker_container(g)["image"] for g in groups.values()} == {"registry.example.com/risk/torch:7"}


def test_dev_shm_is_a_memory_backed_volume_within_the_memory_limit() -> None:
    for group in worker_groups(build_manifests(kube_spec(), CATALOG, OPTIONS)).values():
        container = worker_container(group)
        [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        [volume] = [v for v in group["spec"]["volumes"] if v["name"] == mount["name"]]
        assert volume["emptyDir"]["medium"] == "Memory"
        shm = int(volume["emptyDir"]["sizeLimit"].removesuffix("Gi"))
        assert 0 < shm < int(container["resources"]["limits"]["memory"].removesuffix("Gi"))


def test_worker_memory_is_the_dask_limit_and_the_pod_adds_its_dev_shm() -> None:
    for group in worker_groups(build_manifests(kube_spec(worker_memory="6GiB"), CATALOG, OPTIONS)).values():
        container = worker_container(group)
        command = container["command"][-1]
        assert "--memory-limit 6GiB " in command, command
        [volume] = [v for v in group["spec"]["volumes"] if v["emptyDir"].get("medium") == "Memory"]
        assert volume["emptyDir"]["sizeLimit"] == "3Gi"
        assert container["resources"]["limits"]["memory"] == container["resources"]["requests"]["memory"] == "9Gi"
        assert container["resources"]["requests"]["cpu"] == "8"  # the GPU type's share, as without it
    odd = worker_container(
        worker_groups(build_manifests(kube_spec(worker_memory="1.5GiB"), CATALOG, OPTIONS))["default"]
    )
    assert "--memory-limit 2GiB " in odd["command"][-1]  # whole GiB, rounded up


def test_every_object_carries_the_cost_labels_team_pool_and_user() -> None:
    manifests = build_manifests(kube_spec(), CATALOG, OPTIONS)
    templates = [m["metadata"] for m in manifests] + [g["metadata"] for g in worker_groups(manifests).values()]
    templates.append(manifests[0]["spec"]["scheduler"]["metadata"])
    for meta in templates:
        assert meta["labels"]["gpugeek.io/team"] == "team-risk"
        assert meta["labels"]["gpugeek.io/pool"] == "risk"
        assert meta["labels"]["gpugeek.io/user"] == "ada.lovelace-example.com"
    groups = worker_groups(manifests)
    assert groups["spot"]["metadata"]["labels"]["gpugeek.io/pricing"] == "spot"
    assert groups["default"]["metadata"]["labels"]["gpugeek.io/pricing"] == "on-demand"
    assert groups["spot"]["metadata"]["annotations"]["gpugeek.io/usd-per-gpu-hour"] == "1.57"


def test_nothing_is_created_outside_the_pools_namespace() -> None:
    for namespace in ("team-risk", "team-pricing"):
        for manifest in build_manifests(kube_spec(namespace=namespace), CATALOG, OPTIONS):
            assert manifest["metadata"]["namespace"] == namespace


def test_one_teams_selector_does_not_match_another_teams_pools() -> None:
    def matches(selector: str, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in (term.split("=") for term in selector.split(",")))

    risk = build_manifests(kube_spec(namespace="team-risk"), CATALOG, OPTIONS)[0]["metadata"]["labels"]
    pricing = build_manifests(kube_spec(namespace="team-pricing"), CATALOG, OPTIONS)[0]["metadata"]["labels"]
    assert matches(pool_selector("team-risk"), risk)
    assert not matches(pool_selector("team-risk"), pricing)
    assert matches(pool_selector("team-risk", "risk"), risk)
    assert not matches(pool_selector("team-risk", "other"), risk)


def test_idle_timeout_minutes_become_the_operators_idle_timeout_seconds() -> None:
    assert build_manifests(kube_spec(idle_timeout=30), CATALOG, OPTIONS)[0]["spec"]["idleTimeout"] == 1800
    default = KubernetesOptions(user="ada", idle_timeout_minutes=0)
    assert build_manifests(kube_spec(idle_timeout=None), CATALOG, default)[0]["spec"]["idleTimeout"] == 0


def test_the_builder_is_pure() -> None:
    spec = kube_spec()
    assert build_manifests(spec, CATALOG, OPTIONS) == build_manifests(spec, CATALOG, OPTIONS)


def test_a_name_too_long_for_the_operator_is_refused_with_an_example() -> None:
    from gpugeek_jupyter.errors import Surface

    with pytest.raises(SpecError, match=r"at most 53 .*e\.g\. name='risk-a100'") as caught:
        build_manifests(kube_spec(name="r" * 54), CATALOG, OPTIONS)
    assert caught.value.field == "name"
    assert "(e.g. --name risk-a100)" in caught.value.phrase(Surface.MAGIC)


def test_worker_names_map_back_to_their_group() -> None:
    assert group_of_worker("risk", "risk-spot-worker-0123456789") == "spot"
    assert group_of_worker("risk", "risk-default-worker-abcdef0123") == "default"
    assert group_of_worker("risk", "other-spot-worker-0123456789") is None
    assert group_of_worker("risk", "3") is None


@pytest.mark.parametrize("text", ["ada", "Ada Lovelace", "a" * 80, "--x--", "", "日本"])
def test_label_values_are_always_valid(text: str) -> None:
    value = label_value(text)
    assert 0 < len(value) <= 63 and value[0].isalnum() and value[-1].isalnum()


# -- schemas -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("gpu_type", CATALOG.names())
def test_manifests_pass_the_operator_crd_and_kubernetes_schemas(gpu_type: str) -> None:
    frameworks = itertools.cycle(CATALOG.frameworks)
    for count, fraction in COUNTS_AND_FRACTIONS:
        spec = kube_spec(gpu_type=gpu_type, count=count, spot_fraction=fraction, framework=next(frameworks))
        assert manifest_problems(build_manifests(spec, CATALOG, OPTIONS), "team-risk") == [], (count, fraction)


@pytest.mark.parametrize("preset", [*SPOT_PRESETS, "no-dask-install"])
def test_every_spot_preset_and_the_plain_worker_command_pass_the_schemas(preset: str) -> None:
    if preset == "no-dask-install":
        options = KubernetesOptions(user="ada", install_dask=False)
    else:
        options = KubernetesOptions(user="ada", spot=SPOT_PRESETS[preset])
    assert manifest_problems(build_manifests(kube_spec(), CATALOG, options), "team-risk") == []


def test_the_seed_example_passes_kubernetes_validate_itself() -> None:
    import kubernetes_validate
    from k8s_validation import operator_children

    for child in operator_children(build_manifests(kube_spec(), CATALOG, OPTIONS)):
        assert kubernetes_validate.validate(child, "1.37", strict=True) == "1.37"


def test_the_schemas_catch_a_misplaced_field_and_a_wrong_type() -> None:
    # the validators must be able to fail: a typo the API server would silently prune, a string count
    manifests = build_manifests(kube_spec(), CATALOG, OPTIONS)
    typo = copy.deepcopy(manifests)
    typo[0]["spec"]["worker"]["spec"]["nodeSelecter"] = typo[0]["spec"]["worker"]["spec"].pop("nodeSelector")
    assert any("nodeSelecter" in p for p in manifest_problems(typo, "team-risk"))
    wrong = copy.deepcopy(manifests)
    wrong[1]["spec"]["worker"]["replicas"] = "6"
    assert errors_of(crd_validator("DaskWorkerGroup"), wrong[1])
    bad_port = copy.deepcopy(manifests)
    bad_port[0]["spec"]["worker"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8788"
    assert any("containerPort" in p for p in manifest_problems(bad_port, "team-risk"))
    bad_label = copy.deepcopy(manifests)
    bad_label[0]["metadata"]["labels"]["gpugeek.io/user"] = "ada lovelace"
    assert any("label" in p for p in manifest_problems(bad_label, "team-risk"))


def test_dry_run_yaml_is_the_manifests(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpugeek_jupyter.pools.k8s_manifest import manifests_for, render_manifests

    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    spec = kube_spec()
    documents = list(yaml.safe_load_all(render_manifests(spec)))
    assert documents == manifests_for(spec)
    assert [d["kind"] for d in documents] == ["DaskCluster", "DaskWorkerGroup", "NetworkPolicy"]
    assert documents[0]["metadata"]["labels"]["gpugeek.io/user"] == "ada"
