"""Kubernetes failures become one-line errors that say what to do.

No kubeconfig and an unreachable API server run the real code path here. Answers that need a real
API server (operator missing, forbidden, Pending pods) are recorded Status bodies, pods and events
in the shapes the API server returns, fed to the same translation functions the backend calls; the
``k8s``-marked tests in test_k8s_cluster.py exercise them against a live cluster.
"""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import kr8s
import pytest

from gpugeek_jupyter.errors import BackendUnavailableError, ConflictError, PoolStartError, Surface
from gpugeek_jupyter.pools.k8s_errors import disruption_of, explain_pending, explain_unschedulable, translate_api_error
from gpugeek_jupyter.pools.kubernetes import KubernetesBackend, connect
from gpugeek_jupyter.spec import PoolSpec

A100 = "NVIDIA-A100-SXM4-80GB"
URL = "https://k8s.example.com/apis/kubernetes.dask.org/v1/namespaces/team-risk/daskclusters"


def server_error(code: int, body: dict) -> kr8s.ServerError:
    """A kr8s.ServerError exactly as kr8s raises it for a 4xx answer (message, Status body, response)."""
    response = httpx.Response(code, json=body, request=httpx.Request("POST", URL))
    return kr8s.ServerError(body["message"], status=body, response=response)


def status(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details or {},
        "code": code,
    }


@pytest.fixture
def no_cluster_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    return tmp_path


def kube_spec(**overrides: object) -> PoolSpec:
    options = dict(
        gpu_type="A100-80GB", count=8, spot_fraction=0.7, backend="kubernetes", namespace="team-risk", name="risk"
    )
    options.update(overrides)
    return PoolSpec.create(**options)


# -- real paths, no cluster needed ---------------------------------------------------------------------
def test_no_kubeconfig_says_so_and_how_to_point_at_one(no_cluster_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = no_cluster_env / "nowhere" / "config"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    with pytest.raises(BackendUnavailableError) as caught:
        connect()
    message = str(caught.value)
    assert f"KUBECONFIG={missing}" in message and "export KUBECONFIG=" in message
    assert "\n" not in message
    assert caught.value.__cause__ is not None


def test_launch_without_kubeconfig_fails_before_registering_a_pool(
    no_cluster_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpugeek_jupyter

    monkeypatch.delenv("KUBECONFIG", raising=False)
    with pytest.raises(BackendUnavailableError, match="no Kubernetes credentials"):
        gpugeek_jupyter.launch(backend="kubernetes", namespace="team-risk", gpu_type="A100-80GB", count=8, name="risk")
    assert gpugeek_jupyter.list_pools() == []


def test_an_api_server_that_does_not_answer_is_named(no_cluster_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = no_cluster_env / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: dead\n"
        f"clusters: [{{name: dead, cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}}}]\n"
        "contexts: [{name: dead, context: {cluster: dead, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(config))
    with pytest.raises(
        BackendUnavailableError, match=rf"https://127\.0\.0\.1:{port} does not answer.*kubectl cluster-info"
    ):
        KubernetesBackend().preflight(kube_spec())


# -- API answers (recorded Status bodies) ------------------------------------------------------------
def test_operator_crds_missing_says_how_to_install_the_operator() -> None:
    error = server_error(404, status(404, "NotFound", "the server could not find the requested resource"))
    translated = translate_api_error(error, "team-risk", "create DaskCluster 'risk' in namespace 'team-risk'")
    assert isinstance(translated, BackendUnavailableError)
    assert (
        "operator" in str(translated)
        and "helm install" in str(translated)
        and "dask-kubernetes-operator" in str(translated)
    )


def test_a_missing_namespace_is_not_mistaken_for_a_missing_operator() -> None:
    body = status(404, "NotFound", 'namespaces "team-x" not found', {"name": "team-x", "kind": "namespaces"})
    translated = translate_api_error(server_error(404, body), "team-x", "create DaskCluster 'risk'")
    assert "namespace 'team-x' does not exist" in str(translated)
    assert "helm" not in str(translated)


def test_a_forbidden_namespace_names_the_user_and_the_namespace() -> None:
    body = status(
        403,
        "Forbidden",
        'daskclusters.kubernetes.dask.org is forbidden: User "alice@example.com" cannot create resource "daskclusters" '
        'in API group "kubernetes.dask.org" in the namespace "team-pricing"',
        {"group": "kubernetes.dask.org", "kind": "daskclusters"},
    )
    translated = translate_api_error(server_error(403, body), "team-pricing", "create DaskCluster 'risk'")
    assert isinstance(translated, BackendUnavailableError)
    assert "namespace 'team-pricing' is forbidden" in str(translated)
    assert 'User "alice@example.com"' in str(translated) and "RoleBinding" in str(translated)


def test_an_existing_daskcluster_of_the_same_name_is_a_conflict() -> None:
    body = status(
        409,
        "AlreadyExists",
        'daskclusters.kubernetes.dask.org "risk" already exists',
        {"name": "risk", "group": "kubernetes.dask.org", "kind": "daskclusters"},
    )
    translated = translate_api_error(server_error(409, body), "team-risk", "create DaskCluster 'risk'")
    assert isinstance(translated, ConflictError)
    assert "pick another name," in str(translated) and "kubectl -n team-risk delete daskcluster" in str(translated)
    assert "pick another --name," in translated.phrase(Surface.MAGIC)


def test_a_rejected_manifest_points_at_dry_run() -> None:
    body = status(
        422,
        "Invalid",
        'DaskCluster.kubernetes.dask.org "risk" is invalid: spec.worker.replicas: Invalid value: '
        '"string": spec.worker.replicas in body must be of type integer: "string"',
    )
    translated = translate_api_error(server_error(422, body), "team-risk", "create DaskCluster 'risk'")
    assert isinstance(translated, PoolStartError) and "render_manifests(spec)" in str(translated)
    assert "(see it with --dry-run)" in translated.phrase(Surface.MAGIC) and "--dry-run" not in str(translated)


# -- Pending pods (recorded pod status and events) ---------------------------------------------------
def pending_pod(name: str, selector: dict[str, str], message: str | None = None, waiting: dict | None = None) -> dict:
    conditions = []
    if message:
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": "2026-11-30T08:00:00Z",
            }
        )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-risk", "uid": f"uid-{name}"},
        "spec": {"nodeSelector": selector, "containers": [{"name": "worker", "image": "pytorch/pytorch:2.0.1"}]},
        "status": {"phase": "Pending", "conditions": conditions, "qosClass": "Burstable"},
    }
    if waiting:
        pod["status"]["containerStatuses"] = [
            {
                "name": "worker",
                "image": "pytorch/pytorch:nope",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": waiting},
            }
        ]
    return pod


SELECTOR_MISS = (
    "0/12 nodes are available: 12 node(s) didn't match Pod's node affinity/selector. "
    "preemption: 0/12 nodes are available: 12 Preemption is not helpful for scheduling."
)


def test_pods_pending_for_a_missing_gpu_product_say_how_many_nodes_have_it() -> None:
    spot = {"nvidia.com/gpu.product": A100, "cloud.google.com/gke-spot": "true"}
    pods = [pending_pod(f"risk-spot-worker-{i}", spot, SELECTOR_MISS) for i in range(6)]
    assert (
        explain_pending(pods, [])
        == f"6 pods Pending: 0/12 nodes have nvidia.com/gpu.product={A100},cloud.google.com/gke-spot=true"
    )


def test_no_free_gpu_hints_at_the_device_plugin_and_names_untolerated_taints() -> None:
    message = (
        "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
        "2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for "
        "scheduling, 2 No preemption victims found for incoming pod."
    )
    explained = explain_unschedulable(message, {"nvidia.com/gpu.product": A100})
    assert "2 node(s) lack a free nvidia.com/gpu (all in use, or NVIDIA's device plugin is not installed)" in explained
    assert "1 node(s) have the taint {node-role.kubernetes.io/control-plane: }" in explained


def test_nodes_with_the_product_but_no_free_gpu_are_counted() -> None:
    message = (
        "0/12 nodes are available: 4 node(s) didn't match Pod's node affinity/selector, 8 Insufficient nvidia.com/gpu."
    )
    explained = explain_unschedulable(message, {"nvidia.com/gpu.product": A100})
    assert explained.startswith(f"8/12 nodes have nvidia.com/gpu.product={A100}; 8 node(s) lack a free nvidia.com/gpu")


def test_an_image_that_cannot_be_pulled_is_named() -> None:
    waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "pytorch/pytorch:nope"'}
    pods = [pending_pod("risk-default-worker-1", {}, waiting=waiting)]
    assert explain_pending(pods, []) == (
        "1 pod Pending: image 'pytorch/pytorch:nope' cannot be pulled (Back-off pulling image \"pytorch/pytorch:nope\")"
    )


def test_the_reason_comes_from_events_when_the_pod_has_no_condition_yet() -> None:
    pod = pending_pod("risk-scheduler-7d9f", {"nvidia.com/gpu.product": A100})
    events = [
        {
            "kind": "Event",
            "type": "Warning",
            "reason": "FailedScheduling",
            "message": SELECTOR_MISS,
            "involvedObject": {"kind": "Pod", "name": "risk-scheduler-7d9f", "namespace": "team-risk"},
            "lastTimestamp": "2026-11-30T08:00:05Z",
        },
        {
            "kind": "Event",
            "type": "Warning",
            "reason": "FailedScheduling",
            "message": "0/1 nodes are available",
            "involvedObject": {"kind": "Pod", "name": "someone-else", "namespace": "team-risk"},
        },
    ]
    assert explain_pending([pod], events) == f"1 pod Pending: 0/12 nodes have nvidia.com/gpu.product={A100}"


def test_running_pods_are_not_reported_as_pending() -> None:
    running = pending_pod("risk-default-worker-2", {})
    running["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    assert explain_pending([running], []) == "no pod is Pending"


def test_a_preempted_spot_pod_is_recognised_and_a_healthy_one_is_not() -> None:
    preempted = pending_pod("risk-spot-worker-3", {})
    preempted["status"] = {
        "phase": "Failed",
        "reason": "Terminated",
        "message": "Pod was terminated in response to imminent node shutdown.",
        "conditions": [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": "Pod was terminated in response to imminent node shutdown.",
            }
        ],
    }
    assert disruption_of(preempted) == "TerminationByKubelet: Pod was terminated in response to imminent node shutdown."
    healthy = pending_pod("risk-spot-worker-4", {})
    healthy["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    assert disruption_of(healthy) is None
