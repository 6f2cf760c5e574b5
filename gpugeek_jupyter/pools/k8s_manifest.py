"""The Kubernetes manifests of a pool, built by one pure function: :func:`build_manifests`.

A pool on Kubernetes is one ``DaskCluster`` (the dask-kubernetes operator's ``kubernetes.dask.org/v1``
resource: a scheduler plus the default worker group) and, when part of the pool runs on spot
capacity, one extra ``DaskWorkerGroup``:

- ``<pool>`` (DaskCluster): the scheduler (CPU only, kept off spot nodes) and the default worker
  group with the ``count - round(count x spot_fraction)`` on-demand (or reserved) workers;
- ``<pool>-spot`` (DaskWorkerGroup): ``round(count x spot_fraction)`` workers on spot nodes.

With them goes ``<pool>-network`` (:func:`build_network_policy`, a ``NetworkPolicy``): the pool's pods
take connections only from the pool's own pods (scheduler, workers, both groups), from pods of the
namespaces allowed for clients (``GpugeekConfig.kubernetes_allowed_namespaces``; by default the
notebook's own, when it runs in the cluster) and from the dask-kubernetes operator (it scales and
retires workers through the scheduler). A notebook outside the cluster reaches its scheduler through
``kubectl port-forward``, which NetworkPolicies do not filter.

Each worker is one pod with one GPU (``nvidia.com/gpu: 1``), pinned to the catalog's
``nvidia.com/gpu.product`` node label, tolerating the ``nvidia.com/gpu`` taint, with a memory-backed
``/dev/shm`` for NCCL and CPU/memory requests. Every object carries the same labels, so cost can be
attributed (team = namespace, pool, user) and one team's listing selects only its own pools.

:func:`render_manifests` is what ``%gpugeek_launch ... --dry-run`` prints: the same manifests as
YAML, with the options read from this process's settings; it touches no cluster.

>>> from gpugeek_jupyter.catalog import load_catalog
>>> from gpugeek_jupyter.spec import PoolSpec
>>> spec = PoolSpec.create(gpu_type="A100-80GB", count=8, spot_fraction=0.7, backend="kubernetes",
...                        namespace="team-risk", name="risk")
>>> [m["kind"] for m in build_manifests(spec, load_catalog(), KubernetesOptions(user="ada"))]
['DaskCluster', 'DaskWorkerGroup']
"""

from __future__ import annotations

import base64
import getpass
import os
import re
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..catalog import Catalog, GpuType, load_catalog
from ..config import get_config
from ..errors import SpecError

if TYPE_CHECKING:
    from ..config import GpugeekConfig
    from ..spec import PoolSpec

API_VERSION = "kubernetes.dask.org/v1"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
SPOT_GROUP = "spot"
DEFAULT_GROUP = "default"  # the DaskCluster's own worker group: the on-demand/reserved workers
# The operator names the scheduler Deployment/Service '<cluster>-scheduler' (63 characters at most).
MAX_CLUSTER_NAME = 53

LABEL_PREFIX = "gpugeek.io"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpugeek-jupyter"}
POOL_LABEL = f"{LABEL_PREFIX}/pool"
TEAM_LABEL = f"{LABEL_PREFIX}/team"
USER_LABEL = f"{LABEL_PREFIX}/user"
GPU_TYPE_LABEL = f"{LABEL_PREFIX}/gpu-type"
PRICING_LABEL = f"{LABEL_PREFIX}/pricing"
PRICE_ANNOTATION = f"{LABEL_PREFIX}/usd-per-gpu-hour"

GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}

# TLS with the pool's own credentials (see pools/credentials.py): a Secret '<pool>-tls' holding
# ca.pem, cert.pem and key.pem, mounted read-only (0400) into the scheduler and every worker.
TLS_MOUNT_PATH = "/etc/gpugeek/tls"
TLS_VOLUME = "gpugeek-tls"
TLS_FILES = ("ca.pem", "cert.pem", "key.pem")
TLS_FILE_MODE = 0o400


@dataclass(frozen=True)
class SpotPlacement:
    """How spot workers find spot nodes: a node selector and the tolerations for their taints."""

    node_selector: dict[str, str]
    tolerations: tuple[dict[str, str], ...] = ()

    def avoid_affinity(self) -> dict[str, Any] | None:
        """Node affinity that keeps a pod off these spot nodes (None when there is no selector)."""
        if not self.node_selector:
            return None
        expressions = [{"key": k, "operator": "NotIn", "values": [v]} for k, v in sorted(self.node_selector.items())]
        return {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": expressions}]
                }
            }
        }


# The labels (and taints) each managed Kubernetes service puts on its spot nodes.
SPOT_PRESETS: dict[str, SpotPlacement] = {
    # GKE Spot VMs: label always set; the taint only when the node pool was created with it.
    "gke": SpotPlacement(
        {"cloud.google.com/gke-spot": "true"},
        ({"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},),
    ),
    # EKS managed node groups with capacityType SPOT (no taint by default).
    "eks": SpotPlacement({"eks.amazonaws.com/capacityType": "SPOT"}),
    # EKS with Karpenter.
    "karpenter": SpotPlacement({"karpenter.sh/capacity-type": "spot"}),
    # AKS spot node pools: label and taint are always set.
    "aks": SpotPlacement(
        {"kubernetes.azure.com/scalesetpriority": "spot"},
        (
            {
                "key": "kubernetes.azure.com/scalesetpriority",
                "operator": "Equal",
                "value": "spot",
                "effect": "NoSchedule",
            },
        ),
    ),
}


@dataclass(frozen=True)
class KubernetesOptions:
    """Everything besides the spec and the catalog that the manifests depend on (explicit, so the
    builder stays pure); :func:`options_from_config` fills it in from the settings."""

    user: str = "unknown"
    dask_version: str = "2026.8.0"  # the client's; workers install it when their image lacks dask
    python_version: str = "3.11"
    spot: SpotPlacement = field(default_factory=lambda: SPOT_PRESETS["gke"])
    scheduler_image: str | None = None  # default: ghcr.io/dask/dask:<dask_version>-py<python_version>
    worker_cpu: str | None = None  # default: from the GPU type (see _worker_resources)
    worker_memory_gib: int | None = None
    idle_timeout_minutes: float = 0.0  # used when the spec has none; 0 = never
    install_dask: bool = True  # pip-install distributed at worker start when the image lacks it
    tls: bool = False  # scheduler and workers require the pool's certificates (Secret <pool>-tls)
    # namespaces whose pods may connect to the pool's pods (the clients'), besides the pool's own pods
    allowed_namespaces: tuple[str, ...] = ()
    operator_namespace: str = "dask-operator"  # where the dask-kubernetes operator runs


def build_manifests(spec: PoolSpec, catalog: Catalog, options: KubernetesOptions) -> list[dict[str, Any]]:
    """The ``DaskCluster`` and, with spot workers, the ``DaskWorkerGroup`` for ``spec``, in create order.

    Pure: the same arguments always give the same manifests; nothing is read from the environment.
    Raises :class:`SpecError` for a spec that cannot run on Kubernetes (name too long, no namespace).
    """
    if len(spec.name) > MAX_CLUSTER_NAME:
        raise SpecError(
            field="name",
            value=spec.name,
            example="risk-a100",
            rule=f"at most {MAX_CLUSTER_NAME} characters on Kubernetes (the operator appends '-scheduler')",
        )
    if not spec.namespace:
        raise SpecError(
            field="namespace",
            value=spec.namespace,
            example="team-risk",
            rule="a Kubernetes namespace (a kubernetes pool needs one)",
        )
    gpu = spec.gpu  # resolved once, when the spec was made
    image = spec.image or catalog.image_for(spec.framework)
    prices = gpu.prices.to_dict()
    base_pricing = spec.base_pricing
    common = _labels(spec, gpu, options.user)
    idle_minutes = spec.idle_timeout if spec.idle_timeout is not None else options.idle_timeout_minutes

    def worker_group(pricing: str, replicas: int, spot: bool) -> dict[str, Any]:
        price = spec.price if spec.price is not None else prices[pricing]
        return {
            "replicas": replicas,
            "metadata": {
                "labels": {**common, PRICING_LABEL: pricing.replace("_", "-")},
                "annotations": {PRICE_ANNOTATION: f"{price:g}"},
            },
            "spec": _worker_pod_spec(gpu, image, options, spot, spec),
        }

    cluster = {
        "apiVersion": API_VERSION,
        "kind": "DaskCluster",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": dict(common)},
        "spec": {
            "idleTimeout": int(round(idle_minutes * 60)),
            "scheduler": _scheduler(spec, options, common),
            "worker": worker_group(base_pricing, spec.reserved_workers, spot=False),
        },
    }
    manifests = [cluster]
    if spec.spot_workers:
        manifests.append(
            {
                "apiVersion": API_VERSION,
                "kind": "DaskWorkerGroup",
                "metadata": {
                    "name": f"{spec.name}-{SPOT_GROUP}",
                    "namespace": spec.namespace,
                    "labels": {**common, PRICING_LABEL: "spot"},
                },
                "spec": {"cluster": spec.name, "worker": worker_group("spot", spec.spot_workers, spot=True)},
            }
        )
    return manifests


CLUSTER_NAME_LABEL = "dask.org/cluster-name"  # the operator puts it on every pod of a DaskCluster
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "dask-kubernetes-operator"}  # its Helm chart's selector
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # Kubernetes sets it on every namespace (1.21+)


def network_policy_name(pool: str) -> str:
    return f"{pool}-network"


def build_network_policy(spec: PoolSpec, options: KubernetesOptions) -> dict[str, Any]:
    """The ``NetworkPolicy`` of ``spec``'s pool: its pods (every pod the operator labels with the pool's
    cluster name) admit connections only from the pool's own pods, from any pod of
    ``options.allowed_namespaces`` (the clients') and from the operator's pods; other traffic in,
    from any other namespace or pod, is dropped by the cluster's network plugin. Outgoing traffic is
    not limited (images, pip, object stores). Pure, as :func:`build_manifests`."""
    pool_pods = {"matchLabels": {CLUSTER_NAME_LABEL: spec.name}}
    peers: list[dict[str, Any]] = [{"podSelector": pool_pods}]  # the pool's own pods, in its namespace
    for namespace in sorted(set(options.allowed_namespaces)):
        peers.append({"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}})
    if options.operator_namespace:
        peers.append(
            {
                "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: options.operator_namespace}},
                "podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)},
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": network_policy_name(spec.name),
            "namespace": spec.namespace,
            "labels": dict(_policy_labels(spec, options.user)),
        },
        "spec": {"podSelector": pool_pods, "policyTypes": ["Ingress"], "ingress": [{"from": peers}]},
    }


def _policy_labels(spec: PoolSpec, user: str) -> dict[str, str]:
    return {
        **MANAGED_BY,
        POOL_LABEL: label_value(spec.name),
        TEAM_LABEL: label_value(spec.namespace or ""),
        USER_LABEL: label_value(user),
    }


def tls_secret_name(pool: str) -> str:
    """The Secret that holds a pool's TLS credentials: ``<pool>-tls``."""
    return f"{pool}-tls"


def scheduler_tls_address(spec: PoolSpec) -> str:
    """The ``tls://`` address of the pool's scheduler Service, as workers in the cluster reach it (the
    operator gives them ``DASK_SCHEDULER_ADDRESS`` as ``tcp://``; a worker's own value wins)."""
    return f"tls://{spec.name}-scheduler.{spec.namespace}.svc.cluster.local:8786"


def build_tls_secret(spec: PoolSpec, files: dict[str, bytes], user: str = "unknown") -> dict[str, Any]:
    """The ``<pool>-tls`` Secret, from the contents of ``ca.pem``, ``cert.pem`` and ``key.pem``.

    Kept apart from :func:`build_manifests` on purpose: ``--dry-run`` prints those, and must never
    print a key. Created before the ``DaskCluster``, deleted with it.
    """
    missing = [name for name in TLS_FILES if name not in files]
    if missing:
        raise ValueError(f"the TLS Secret needs {', '.join(TLS_FILES)}; missing {', '.join(missing)}")
    labels = {
        **MANAGED_BY,
        POOL_LABEL: label_value(spec.name),
        TEAM_LABEL: label_value(spec.namespace or ""),
        USER_LABEL: label_value(user),
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": tls_secret_name(spec.name), "namespace": spec.namespace, "labels": labels},
        "type": "Opaque",
        "data": {name: base64.b64encode(files[name]).decode("ascii") for name in TLS_FILES},
    }


def _tls_volume(spec: PoolSpec) -> dict[str, Any]:
    return {
        "name": TLS_VOLUME,
        "secret": {"secretName": tls_secret_name(spec.name), "defaultMode": TLS_FILE_MODE},
    }


def _tls_mount() -> dict[str, Any]:
    return {"name": TLS_VOLUME, "mountPath": TLS_MOUNT_PATH, "readOnly": True}


def _tls_arguments() -> list[str]:
    """``dask scheduler`` / ``dask worker`` options that require the pool's certificates."""
    return [
        "--protocol",
        "tls",
        "--tls-ca-file",
        f"{TLS_MOUNT_PATH}/ca.pem",
        "--tls-cert",
        f"{TLS_MOUNT_PATH}/cert.pem",
        "--tls-key",
        f"{TLS_MOUNT_PATH}/key.pem",
    ]


TLS_REQUIRED_ENV = {"name": "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION", "value": "True"}


def label_value(text: str) -> str:
    """``text`` made into a valid label value (63 characters of [A-Za-z0-9-_.], alphanumeric ends)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text))[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned) or "unknown"


def pool_selector(namespace: str, pool: str | None = None) -> str:
    """The label selector of a team's pools (or one pool): what a listing in ``namespace`` uses."""
    parts = [f"{k}={v}" for k, v in MANAGED_BY.items()] + [f"{TEAM_LABEL}={label_value(namespace)}"]
    if pool:
        parts.append(f"{POOL_LABEL}={label_value(pool)}")
    return ",".join(parts)


def group_of_worker(pool: str, worker_name: str) -> str | None:
    """The worker group (``default`` or ``spot``) of a dask worker of ``pool``, from its name.

    The operator names each worker after its Deployment: ``<pool>-<group>-worker-<10 hex>``.
    """
    match = re.fullmatch(rf"{re.escape(pool)}-([a-z0-9-]+?)-worker-[0-9a-f]+", str(worker_name))
    return match.group(1) if match else None


def _labels(spec: PoolSpec, gpu: GpuType, user: str) -> dict[str, str]:
    return {
        **MANAGED_BY,
        POOL_LABEL: label_value(spec.name),
        TEAM_LABEL: label_value(spec.namespace or ""),
        USER_LABEL: label_value(user),
        GPU_TYPE_LABEL: label_value(gpu.name),
    }


def _worker_resources(gpu: GpuType, options: KubernetesOptions, spec: PoolSpec) -> tuple[str, int, int]:
    """CPU, the pod's memory (GiB) and its memory-backed ``/dev/shm`` (GiB, counted against the pod's
    memory: NCCL and DataLoader workers use it) per worker. The memory is sized to fit one GPU's
    share of common GPU nodes; for a pool with a ``worker_memory``, it is that limit (the dask
    worker's, rounded up to GiB) plus the ``/dev/shm``."""
    if gpu.is_cpu:
        cpu, memory = "1", 4
    elif gpu.memory_gb <= 24:  # T4/L4 nodes: 4 vCPU, 15-16 GB
        cpu, memory = "3", 12
    elif gpu.memory_gb <= 48:
        cpu, memory = "6", 40
    else:  # A100/H100/H200 nodes: 12+ vCPU and 170+ GB per GPU
        cpu, memory = "8", int(gpu.memory_gb)
    cpu = options.worker_cpu or cpu
    if spec.worker_memory is not None:
        worker_gib = -(-spec.worker_memory // 2**30)
        return cpu, worker_gib + max(1, worker_gib // 2), max(1, worker_gib // 2)
    memory = options.worker_memory_gib or memory
    return cpu, memory, max(1, memory // 2)


def _worker_pod_spec(
    gpu: GpuType, image: str, options: KubernetesOptions, spot: bool, spec: PoolSpec
) -> dict[str, Any]:
    cpu, memory_gib, shm_gib = _worker_resources(gpu, options, spec)
    resources: dict[str, Any] = {
        "requests": {"cpu": cpu, "memory": f"{memory_gib}Gi"},
        "limits": {"memory": f"{memory_gib}Gi"},
    }
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, str]] = []
    if not gpu.is_cpu:
        resources["requests"][GPU_RESOURCE] = "1"
        resources["limits"][GPU_RESOURCE] = "1"
        node_selector[GPU_PRODUCT_LABEL] = gpu.k8s_product
        tolerations.append(dict(GPU_TOLERATION))
    worker_args = [
        "--nthreads",
        "1",
        "--nworkers",
        "1",
        "--memory-limit",
        f"{memory_gib - shm_gib}GiB",
        "--dashboard-address",
        ":8788",
        "--death-timeout",
        "60",
    ]
    if not gpu.is_cpu:
        worker_args += ["--resources", "GPU=1"]
    env = [{"name": "NCCL_DEBUG", "value": "WARN"}]
    if options.tls:
        worker_args += _tls_arguments()
        env += [TLS_REQUIRED_ENV, {"name": "DASK_SCHEDULER_ADDRESS", "value": scheduler_tls_address(spec)}]
    container_args: dict[str, Any]
    if options.install_dask:
        # Framework images ship torch, not dask: install the client's version when it is missing.
        # The operator sets DASK_WORKER_NAME (the worker's Deployment name) and DASK_SCHEDULER_ADDRESS.
        script = (
            "python -c 'import distributed' 2>/dev/null || "
            f"pip install --quiet --no-cache-dir 'distributed=={options.dask_version}'; "
            'exec dask worker --name "$DASK_WORKER_NAME" ' + " ".join(worker_args)
        )
        container_args = {"command": ["/bin/sh", "-c", script]}
    else:
        container_args = {"args": ["dask", "worker", "--name", "$(DASK_WORKER_NAME)", *worker_args]}
    pod: dict[str, Any] = {
        "containers": [
            {
                "name": "worker",
                "image": image,
                **container_args,
                "env": env,
                "resources": resources,
                "ports": [{"name": "http-dashboard", "containerPort": 8788, "protocol": "TCP"}],
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
            }
        ],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gib}Gi"}}],
        "terminationGracePeriodSeconds": 30,
    }
    if options.tls:
        pod["containers"][0]["volumeMounts"].append(_tls_mount())
        pod["volumes"].append(_tls_volume(spec))
    if spot:
        node_selector.update(options.spot.node_selector)
        tolerations.extend(dict(t) for t in options.spot.tolerations)
    else:
        affinity = options.spot.avoid_affinity()
        if affinity:
            pod["affinity"] = affinity
    if node_selector:
        pod["nodeSelector"] = node_selector
    if tolerations:
        pod["tolerations"] = tolerations
    return pod


def _scheduler(spec: PoolSpec, options: KubernetesOptions, labels: dict[str, str]) -> dict[str, Any]:
    image = options.scheduler_image or f"ghcr.io/dask/dask:{options.dask_version}-py{options.python_version}"
    pod: dict[str, Any] = {
        "containers": [
            {
                "name": "scheduler",
                "image": image,
                "args": ["dask", "scheduler", "--host", "0.0.0.0"],
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
                "ports": [
                    {"name": "tcp-comm", "containerPort": 8786, "protocol": "TCP"},
                    {"name": "http-dashboard", "containerPort": 8787, "protocol": "TCP"},
                ],
                "readinessProbe": {
                    "httpGet": {"port": "http-dashboard", "path": "/health"},
                    "initialDelaySeconds": 0,
                    "periodSeconds": 1,
                    "timeoutSeconds": 300,
                },
                "livenessProbe": {
                    "httpGet": {"port": "http-dashboard", "path": "/health"},
                    "initialDelaySeconds": 15,
                    "periodSeconds": 20,
                },
            }
        ],
    }
    if options.tls:
        container = pod["containers"][0]
        container["args"] = [*container["args"], *_tls_arguments()]
        container["env"] = [TLS_REQUIRED_ENV]
        container["volumeMounts"] = [_tls_mount()]
        pod["volumes"] = [_tls_volume(spec)]
    affinity = options.spot.avoid_affinity()  # a preempted scheduler takes the whole pool with it
    if affinity:
        pod["affinity"] = affinity
    return {
        "metadata": {"labels": dict(labels)},
        "spec": pod,
        "service": {
            "type": "ClusterIP",
            "selector": {"dask.org/cluster-name": spec.name, "dask.org/component": "scheduler"},
            "ports": [
                {"name": "tcp-comm", "protocol": "TCP", "port": 8786, "targetPort": "tcp-comm"},
                {"name": "http-dashboard", "protocol": "TCP", "port": 8787, "targetPort": "http-dashboard"},
            ],
        },
    }


# -- settings -> options, and what --dry-run prints --------------------------------------------------
def spot_placement(config: GpugeekConfig) -> SpotPlacement:
    """The configured spot placement: a preset (gke, eks, karpenter, aks), or a custom selector."""
    preset_name = (config.kubernetes_spot_preset or "gke").strip().lower()
    if preset_name not in SPOT_PRESETS and preset_name != "custom":
        raise SpecError(
            f"GpugeekConfig.kubernetes_spot_preset '{config.kubernetes_spot_preset}' is unknown "
            f"(choose one of {', '.join(SPOT_PRESETS)}, custom; e.g. GPUGEEK_SPOT_PRESET=eks)",
            field="spot_preset",
        )
    preset = SPOT_PRESETS.get(preset_name, SpotPlacement({}))
    selector = dict(config.kubernetes_spot_node_selector) or dict(preset.node_selector)
    tolerations = tuple(dict(t) for t in config.kubernetes_spot_tolerations) or preset.tolerations
    if not selector:
        raise SpecError(
            "GpugeekConfig.kubernetes_spot_preset is 'custom' but kubernetes_spot_node_selector is empty "
            "(e.g. c.GpugeekConfig.kubernetes_spot_node_selector = {'node-pool': 'spot-a100'})",
            field="spot_preset",
        )
    return SpotPlacement(selector, tolerations)


def current_user() -> str:
    return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def notebook_namespace(path: str | None = None) -> str | None:
    """The namespace of the pod this process runs in (None outside a Kubernetes pod)."""
    try:
        with open(path or SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as file:
            return file.read().strip() or None
    except OSError:
        return None


def allowed_client_namespaces(config: GpugeekConfig) -> tuple[str, ...]:
    """The namespaces whose pods may reach a pool: the configured ones, else the notebook's own."""
    configured = tuple(str(n) for n in config.kubernetes_allowed_namespaces)
    if configured:
        return configured
    own = notebook_namespace()
    return (own,) if own else ()


def options_from_config(config: GpugeekConfig | None = None, tls: bool | None = None) -> KubernetesOptions:
    """:class:`KubernetesOptions` from this process's settings (user, dask version, spot placement,
    TLS: ``GpugeekConfig.pool_tls`` unless ``tls`` says)."""
    import distributed

    config = config or get_config()
    return KubernetesOptions(
        user=current_user(),
        dask_version=str(getattr(distributed, "__version__", "unknown")),
        python_version=f"{sys.version_info.major}.{sys.version_info.minor}",
        spot=spot_placement(config),
        idle_timeout_minutes=config.idle_timeout_minutes,
        tls=config.pool_tls if tls is None else tls,
        allowed_namespaces=allowed_client_namespaces(config),
        operator_namespace=config.kubernetes_operator_namespace,
    )


def manifests_for(spec: PoolSpec, tls: bool | None = None) -> list[dict[str, Any]]:
    """What a launch creates, in order: :func:`build_manifests`' and the pool's NetworkPolicy."""
    config = get_config()
    options = options_from_config(config, tls=tls)
    return [
        *build_manifests(spec, load_catalog(config.price_file or None), options),
        build_network_policy(spec, options),
    ]


def render_manifests(spec: PoolSpec) -> str:
    """The YAML that ``--dry-run`` prints: every manifest the launch would create, nothing touched
    (the TLS Secret only named: its data is the pool's key, made at launch)."""
    import yaml

    text = str(yaml.safe_dump_all(manifests_for(spec), sort_keys=False, default_flow_style=False))
    if get_config().pool_tls:
        text = (
            f"# and first a Secret '{tls_secret_name(spec.name)}' with the pool's own TLS certificate authority, "
            f"certificate and key (ca.pem, cert.pem, key.pem), made at launch and deleted with the pool\n---\n" + text
        )
    return text
