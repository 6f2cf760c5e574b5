"""A Kubernetes API server on loopback that answers what the doctor asks, as a real one would.

It serves the discovery documents (``/version``, ``/api``, ``/apis`` and each group version), lists
of namespaces and of DaskClusters, with the status bodies a real API server returns for 403s, so
kr8s, the client the doctor uses, runs unchanged. ``kubeconfig(path)`` writes a config that points
at it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

DASK_GROUP = "kubernetes.dask.org/v1"
CORE_RESOURCES = [
    {
        "name": "namespaces",
        "singularName": "namespace",
        "namespaced": False,
        "kind": "Namespace",
        "verbs": ["get", "list"],
    },
    {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": ["get", "list"]},
]
DASK_RESOURCES = [
    {
        "name": "daskclusters",
        "singularName": "daskcluster",
        "namespaced": True,
        "kind": "DaskCluster",
        "verbs": ["list"],
    },
    {
        "name": "daskworkergroups",
        "singularName": "daskworkergroup",
        "namespaced": True,
        "kind": "DaskWorkerGroup",
        "verbs": ["list"],
    },
]


@dataclass
class Cluster:
    """What the stub cluster has: the operator's resource types or not, namespaces, what is forbidden."""

    operator: bool = True
    namespaces: list[str] = field(default_factory=lambda: ["default"])
    namespaces_forbidden: bool = False  # listing namespaces is forbidden (common for team users)
    forbidden_namespaces: list[str] = field(default_factory=list)  # DaskClusters there are forbidden
    requests: list[str] = field(default_factory=list)


def _forbidden(message: str) -> tuple[int, dict[str, Any]]:
    return 403, {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": "Forbidden",
        "code": 403,
    }


def _not_found(path: str) -> tuple[int, dict[str, Any]]:
    return 404, {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": f"the server could not find the requested resource ({path})",
        "reason": "NotFound",
        "code": 404,
    }


def answer(cluster: Cluster, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
    if path == "/version":
        return 200, {"major": "1", "minor": "31", "gitVersion": "v1.31.2"}
    if path == "/api":
        return 200, {"kind": "APIVersions", "versions": ["v1"]}
    if path == "/api/v1":
        return 200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": CORE_RESOURCES}
    if path == "/apis":
        groups = []
        if cluster.operator:
            version = {"groupVersion": DASK_GROUP, "version": "v1"}
            groups.append({"name": "kubernetes.dask.org", "versions": [version], "preferredVersion": version})
        return 200, {"kind": "APIGroupList", "groups": groups}
    if path == f"/apis/{DASK_GROUP}" and cluster.operator:
        return 200, {"kind": "APIResourceList", "groupVersion": DASK_GROUP, "resources": DASK_RESOURCES}
    if path == "/api/v1/namespaces":
        if cluster.namespaces_forbidden:
            return _forbidden(
                'namespaces is forbidden: User "dev" cannot list resource "namespaces" at the cluster scope'
            )
        selector = query.get("fieldSelector", [""])[0]
        wanted = {p.split("=", 1)[1] for p in selector.split(",") if p.startswith("metadata.name=")}
        items = [{"metadata": {"name": n}} for n in cluster.namespaces if not wanted or n in wanted]
        return 200, {"kind": "NamespaceList", "apiVersion": "v1", "metadata": {}, "items": items}
    parts = path.strip("/").split("/")
    if cluster.operator and parts[:3] == ["apis", "kubernetes.dask.org", "v1"] and parts[3:4] == ["namespaces"]:
        namespace = parts[4]
        if namespace in cluster.forbidden_namespaces:
            return _forbidden(
                f'daskclusters.kubernetes.dask.org is forbidden: User "dev" cannot list resource "daskclusters" '
                f'in API group "kubernetes.dask.org" in the namespace "{namespace}"'
            )
        return 200, {"kind": "DaskClusterList", "apiVersion": DASK_GROUP, "metadata": {}, "items": []}
    return _not_found(path)


@contextmanager
def serve(cluster: Cluster) -> Iterator[str]:
    """Serve ``cluster`` on a free loopback port; yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            path = url.path.rstrip("/") or "/"  # kr8s asks for "/version/", "/api/v1/namespaces/"
            cluster.requests.append(path)
            code, body = answer(cluster, path, parse_qs(url.query))
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def kubeconfig(path: Path, server: str) -> Path:
    """Write a kubeconfig for ``server`` (token auth, namespace default) at ``path``."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stub", "cluster": {"server": server}}],
                "users": [{"name": "dev", "user": {"token": "not-a-secret"}}],
                "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "dev", "namespace": "default"}}],
                "current-context": "stub",
            }
        )
    )
    return path
