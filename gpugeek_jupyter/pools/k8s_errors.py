"""Kubernetes failures, translated for people: pure functions over what the API server returns.

Each function takes the API's own objects (a ``kr8s.ServerError`` and its ``Status`` body, pod and
event JSON) and returns a :class:`~gpugeek_jupyter.errors.GpugeekError` or a one-line explanation,
so every path is tested on recorded payloads without a cluster.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from ..errors import (
    BackendUnavailableError,
    ConflictError,
    Field,
    GpugeekError,
    PerSurface,
    Phrase,
    PoolStartError,
    Setting,
    Value,
)

OPERATOR_INSTALL = (
    "helm install --repo https://helm.dask.org --create-namespace -n dask-operator "
    "--generate-name dask-kubernetes-operator"
)
_TEAM_NAMESPACE = Setting(namespace="team-risk")


def no_credentials_error(cause: BaseException, kubeconfig: str | None) -> BackendUnavailableError:
    """No kubeconfig (or an unreadable one) and no in-cluster service account."""
    where = (
        f"KUBECONFIG={kubeconfig} gives none" if kubeconfig else "KUBECONFIG is not set and ~/.kube/config gives none"
    )
    return BackendUnavailableError(
        Phrase(
            "{backend} found no Kubernetes credentials ({where}; {cause}); point KUBECONFIG at your "
            "cluster's config (e.g. export KUBECONFIG=~/.kube/config, then check with kubectl get nodes)",
            backend=Setting(backend="kubernetes"),
            where=where,
            cause=str(cause),
        )
    )


def unreachable_error(cause: BaseException, server: str | None) -> BackendUnavailableError:
    return BackendUnavailableError(
        f"the Kubernetes API server {server or '(from your kubeconfig)'} does not answer ({type(cause).__name__}: "
        f"{cause}); is the cluster up and your kubeconfig current? (check with kubectl cluster-info)"
    )


def _status_body(error: BaseException) -> dict[str, Any]:
    status = getattr(error, "status", None)
    if isinstance(status, dict):
        return status
    response = getattr(error, "response", None)
    if response is not None:
        try:
            body = response.json()
        except ValueError:
            return {}
        return body if isinstance(body, dict) else {}
    return {}


def _status_code(error: BaseException, body: dict[str, Any]) -> int | None:
    response = getattr(error, "response", None)
    if response is not None:
        return int(response.status_code)
    code = body.get("code")
    return int(code) if isinstance(code, int) else None


def translate_api_error(error: BaseException, namespace: str, action: str) -> GpugeekError:
    """The people-readable error for an API failure while ``action`` (e.g. "create DaskCluster 'risk'")."""
    body = _status_body(error)
    code = _status_code(error, body)
    reason = body.get("reason", "")
    message = str(body.get("message") or error)
    details = body.get("details") or {}
    if code == 404 and details.get("kind") == "namespaces":
        return BackendUnavailableError(
            Phrase(
                "namespace {namespace} does not exist in this cluster (ask an admin to create it, or pick your "
                "team's namespace, e.g. {example})",
                namespace=Value(namespace),
                example=_TEAM_NAMESPACE,
            )
        )
    if code == 404:
        return BackendUnavailableError(
            f"cannot {action}: the dask-kubernetes operator's resource types (DaskCluster, kubernetes.dask.org/v1) "
            f"are not installed in this cluster ({message}); install the operator with: {OPERATOR_INSTALL}"
        )
    if code == 403 or reason == "Forbidden":
        return BackendUnavailableError(
            Phrase(
                "namespace {namespace} is forbidden to you: {message} (ask an admin for a RoleBinding there, "
                "or pick a namespace you may use, e.g. {example})",
                namespace=Value(namespace),
                message=message,
                example=_TEAM_NAMESPACE,
            )
        )
    if code == 409 or reason == "AlreadyExists":
        return ConflictError(
            Phrase(
                "cannot {action}: {message} (pick another {name}, or remove the old one with "
                "kubectl -n {namespace} delete daskcluster <name>)",
                action=action,
                message=message,
                name=Field("name"),
                namespace=namespace,
            )
        )
    if code == 401:
        return BackendUnavailableError(
            f"the Kubernetes API refused your credentials ({message}); refresh your kubeconfig "
            f"(e.g. gcloud container clusters get-credentials ..., or aws eks update-kubeconfig ...)"
        )
    if code == 422 or reason == "Invalid":
        return PoolStartError(
            Phrase(
                "the cluster rejected the manifest to {action}: {message} ({see})",
                action=action,
                message=message,
                see=PerSurface(
                    core="see it with render_manifests(spec) from gpugeek_jupyter.pools.kubernetes",
                    magic="see it with --dry-run",
                ),
            )
        )
    return PoolStartError(f"cannot {action}: the Kubernetes API answered {code or '?'} {reason}: {message}")


# -- pods that do not start ----------------------------------------------------------------------
_NODES_AVAILABLE = re.compile(r"(\d+)/(\d+) nodes are available")
_SELECTOR = re.compile(r"(\d+) node\(s\) didn't match (?:Pod's )?node (?:affinity/)?selector")
_INSUFFICIENT = re.compile(r"(\d+) Insufficient ([\w./-]*\w)")
_TAINT = re.compile(r"(\d+) node\(s\) had untolerated taint \{([^}]*)\}")


def explain_unschedulable(message: str, node_selector: dict[str, str]) -> str:
    """The scheduler's FailedScheduling message, said in terms of what the pool asked for.

    >>> explain_unschedulable("0/12 nodes are available: 12 node(s) didn't match Pod's node affinity/selector.",
    ...                       {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    '0/12 nodes have nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB'
    """
    message = message.split(" preemption:")[0]  # what follows is about evicting other pods
    available = _NODES_AVAILABLE.search(message)
    total = int(available.group(2)) if available else None
    parts: list[str] = []
    selector = _SELECTOR.search(message)
    if selector and node_selector:
        wanted = ",".join(f"{k}={v}" for k, v in node_selector.items())
        misses = int(selector.group(1))
        have = total - misses if total is not None else 0
        parts.append(f"{have}/{total if total is not None else '?'} nodes have {wanted}")
    for count, resource in _INSUFFICIENT.findall(message):
        hint = " (all in use, or NVIDIA's device plugin is not installed)" if resource == "nvidia.com/gpu" else ""
        parts.append(f"{count} node(s) lack a free {resource}{hint}")
    for count, taint in _TAINT.findall(message):
        parts.append(f"{count} node(s) have the taint {{{taint}}} that the pods do not tolerate")
    if not parts:
        return message.strip().rstrip(".")
    return "; ".join(parts)


def _pending_reason(pod: dict[str, Any], events: list[dict[str, Any]]) -> str | None:
    status = pod.get("status", {})
    spec = pod.get("spec", {})
    for container in status.get("containerStatuses", []) or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName"):
            return f"image '{container.get('image')}' cannot be pulled ({waiting.get('message', waiting['reason'])})"
        if waiting.get("reason") in ("CrashLoopBackOff", "CreateContainerConfigError"):
            return (
                f"container '{container.get('name')}' is in {waiting['reason']}: {waiting.get('message', '')}".rstrip(
                    ": "
                )
            )
    for condition in status.get("conditions", []) or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" and condition.get("message"):
            return explain_unschedulable(condition["message"], spec.get("nodeSelector") or {})
    name = pod.get("metadata", {}).get("name")
    mine = [e for e in events if (e.get("involvedObject") or {}).get("name") == name]
    for event in reversed(mine):  # the newest first
        if event.get("reason") == "FailedScheduling":
            return explain_unschedulable(event.get("message", ""), spec.get("nodeSelector") or {})
    for event in reversed(mine):
        if event.get("type") == "Warning":
            return f"{event.get('reason')}: {event.get('message', '')}".rstrip(": ")
    return None


def explain_pending(pods: Iterable[dict[str, Any]], events: Iterable[dict[str, Any]]) -> str:
    """Why the pool's pods are not running, in one line, from their status and events (newest last).

    Pods that share a reason are counted together: "6 pods Pending: 0/12 nodes have ...".
    """
    event_list = list(events)
    reasons: Counter[str] = Counter()
    for pod in pods:
        status = pod.get("status", {})
        waiting = any(
            ((c.get("state") or {}).get("waiting") or {}).get("reason")
            not in (None, "ContainerCreating", "PodInitializing")
            for c in status.get("containerStatuses", []) or []
        )
        if status.get("phase") != "Pending" and not waiting:
            continue
        reasons[_pending_reason(pod, event_list) or "no reason reported yet (still scheduling or pulling images)"] += 1
    if not reasons:
        return "no pod is Pending"
    return "; ".join(f"{n} pod{'s' if n > 1 else ''} Pending: {why}" for why, n in reasons.most_common())


def disruption_of(pod: dict[str, Any]) -> str | None:
    """Why a pod was disrupted (spot preemption, node shutdown, eviction), or None if it was not."""
    status = pod.get("status", {})
    for condition in status.get("conditions", []) or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return f"{condition.get('reason', 'Disrupted')}: {condition.get('message', '')}".rstrip(": ")
    if status.get("reason") in ("Preempting", "Terminated", "NodeShutdown", "Shutdown", "Evicted", "NodeLost"):
        return f"{status['reason']}: {status.get('message', '')}".rstrip(": ")
    return None
