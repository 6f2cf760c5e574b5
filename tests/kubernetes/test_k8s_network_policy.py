"""A kubernetes pool's NetworkPolicy: its pods admit connections from the pool's own pods, the
clients' namespaces and the dask-kubernetes operator only; it selects exactly the pool's pods (both
worker groups and the scheduler, as the operator's own functions build them) and passes Kubernetes'
strict schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from k8s_validation import KUBERNETES_VERSIONS, check_metadata, core_validator, errors_of, operator_children

from gpugeek_jupyter.catalog import load_catalog
from gpugeek_jupyter.pools.k8s_manifest import (
    KubernetesOptions,
    build_manifests,
    build_network_policy,
    notebook_namespace,
)
from gpugeek_jupyter.spec import PoolSpec

CATALOG = load_catalog()
OPTIONS = KubernetesOptions(user="ada", allowed_namespaces=("jupyterhub",), operator_namespace="dask-operator")


def _spec(name: str = "risk", **overrides: Any) -> PoolSpec:
    options: dict[str, Any] = dict(
        gpu_type="A100-80GB", count=4, spot_fraction=0.5, backend="kubernetes", namespace="team-risk", name=name
    )
    options.update(overrides)
    return PoolSpec.create(**options)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}  # the only form the policy uses
    return all(labels.get(key) == value for key, value in selector["matchLabels"].items())


def _pod_labels(spec: PoolSpec) -> dict[str, dict[str, str]]:
    """Each pod template the operator makes for ``spec``'s pool, by its Deployment's name."""
    children = operator_children(build_manifests(spec, CATALOG, OPTIONS))
    return {
        child["metadata"]["name"]: child["spec"]["template"]["metadata"]["labels"]
        for child in children
        if child["kind"] == "Deployment"
    }


def test_it_selects_every_pod_of_the_pool_and_no_pod_of_another_pool() -> None:
    policy = build_network_policy(_spec(), OPTIONS)
    ours = _pod_labels(_spec())
    assert set(ours) == {"risk-scheduler", "risk-default-worker-0123456789", "risk-spot-worker-0123456789"}
    assert all(_selects(policy["spec"]["podSelector"], labels) for labels in ours.values())
    theirs = _pod_labels(_spec("risk-b"))  # a pool whose name starts alike, in the same namespace
    assert not any(_selects(policy["spec"]["podSelector"], labels) for labels in theirs.values())


def test_it_admits_the_pools_own_pods_the_clients_namespaces_and_the_operator_only() -> None:
    policy = build_network_policy(_spec(), OPTIONS)
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # outgoing traffic (images, pip, storage) is not limited
    [rule] = policy["spec"]["ingress"]
    assert "ports" not in rule  # every port of the pool: comms, nannies, dashboard, gloo/NCCL between ranks
    assert rule["from"] == [
        {"podSelector": {"matchLabels": {"dask.org/cluster-name": "risk"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "jupyterhub"}}},
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "dask-operator"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "dask-kubernetes-operator"}},
        },
    ]


def test_without_client_namespaces_only_the_pool_and_the_operator_are_admitted() -> None:
    policy = build_network_policy(_spec(), KubernetesOptions(user="ada", operator_namespace=""))
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {"dask.org/cluster-name": "risk"}}}]}
    ]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_policy_passes_kubernetes_strict_schema_and_naming_rules(version: str) -> None:
    policy = build_network_policy(_spec(), OPTIONS)
    assert (policy["kind"], policy["metadata"]["name"], policy["metadata"]["namespace"]) == (
        "NetworkPolicy",
        "risk-network",
        "team-risk",
    )
    assert errors_of(core_validator("NetworkPolicy", "networking.k8s.io/v1", version), policy) == []
    assert check_metadata(policy, "team-risk") == []


def test_a_launch_creates_the_policy_and_the_clients_namespace_defaults_to_the_notebooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter import config
    from gpugeek_jupyter.pools import k8s_manifest

    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("jupyterhub\n")
    assert notebook_namespace(str(namespace_file)) == "jupyterhub"
    assert notebook_namespace(str(tmp_path / "absent")) is None
    monkeypatch.setattr(k8s_manifest, "SERVICE_ACCOUNT_NAMESPACE", str(namespace_file))
    config.set_config(None)
    manifests = k8s_manifest.manifests_for(_spec())
    assert [m["kind"] for m in manifests] == ["DaskCluster", "DaskWorkerGroup", "NetworkPolicy"]
    peers = manifests[-1]["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "jupyterhub"}}} in peers
    config.set_config(config.GpugeekConfig(kubernetes_allowed_namespaces=["team-risk-notebooks"]))
    peers = k8s_manifest.manifests_for(_spec())[-1]["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-risk-notebooks"}}} in peers
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "jupyterhub"}}} not in peers
    config.set_config(None)
