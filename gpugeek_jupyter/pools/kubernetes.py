"""The ``kubernetes`` backend: a pool as a ``DaskCluster`` of the dask-kubernetes operator.

``%gpugeek_launch --backend kubernetes --namespace team-risk --gpu-type A100-80GB --count 8
--spot-fraction 0.7`` creates, in namespace ``team-risk`` only:

1. the manifests of :func:`~gpugeek_jupyter.pools.k8s_manifest.build_manifests` (a ``DaskCluster``
   with the on-demand workers, a ``DaskWorkerGroup`` with the spot ones), via the Kubernetes API; with TLS on (``GpugeekConfig.pool_tls``), first the Secret ``<pool>-tls`` with the pool's own
   certificate authority, certificate and key, which the pods mount; the ``DaskCluster`` owns it;
2. waits, within ``GpugeekConfig.worker_start_timeout``, for the scheduler pod, then connects a
   :class:`~gpugeek_jupyter.pools.k8s_cluster.KubernetesPoolCluster` to it over TLS (stopping the
   pool, or the kernel exiting, deletes the ``DaskCluster`` and with it every pod), then waits for
   the workers.

We create the resources ourselves rather than through ``KubeCluster(custom_cluster_spec=...)``
because ``KubeCluster`` waits without a deadline for a scheduler pod that cannot be scheduled; here
a pod still Pending at the deadline fails the launch with the scheduler's reason, from the pod's
events ("6 pods Pending: 0/12 nodes have nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB"), and
everything created is deleted again.

Failure modes, each a one-line :class:`~gpugeek_jupyter.errors.GpugeekError`: no kubeconfig, API
server unreachable, operator not installed (with the helm command), namespace missing or forbidden,
a pool of that name already there, pods Pending past the deadline (with why).

Imports of kr8s, dask_kubernetes and yaml stay inside functions: the local backend works without
the ``kubernetes`` extra.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BackendUnavailableError, GpugeekError, Phrase, PoolStartError, Setting
from ..polling import PollTimeout, apoll_until, poll_until
from ._backend import ProgressCallback, RunningCluster, wait_for_workers
from ._plugin import PoolLifecyclePlugin
from .k8s_errors import disruption_of, explain_pending, no_credentials_error, translate_api_error, unreachable_error
from .k8s_manifest import (
    API_VERSION,
    DEFAULT_GROUP,
    SPOT_GROUP,
    build_tls_secret,
    current_user,
    group_of_worker,
    manifests_for,
    pool_selector,
    render_manifests,
    tls_secret_name,
)

if TYPE_CHECKING:
    from ..spec import PoolSpec
    from ._manager import PoolManager
    from ._pool import Pool
    from .autoscale import AutoscalePolicy, GroupAdaptive, GroupPolicies
    from .credentials import PoolCredentials

__all__ = [
    "DisruptionRecorder",
    "KubernetesBackend",
    "KubernetesWorkerGroup",
    "autoscale_pool",
    "connect",
    "diagnose",
    "list_cluster_pools",
    "pricing_of_worker",
    "record_disruptions",
    "render_manifests",  # from k8s_manifest: what --dry-run prints
]

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0


# -- the API ------------------------------------------------------------------------------------------
DEFAULT_KUBECONFIG = "~/.kube/config"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # a pod's own credentials


def connect() -> Any:
    """A kr8s API client from KUBECONFIG (or the in-cluster service account); clear errors otherwise."""
    try:
        import kr8s
    except ImportError as e:
        raise BackendUnavailableError(
            Phrase(
                "{backend} needs the kubernetes extra (pip install 'gpugeek-jupyter[kubernetes]')",
                backend=Setting(backend="kubernetes"),
            )
        ) from e
    import httpx

    kubeconfig = os.environ.get("KUBECONFIG") or None
    # named explicitly: kr8s.api() with no arguments returns any API object this thread made before,
    # whatever credentials it was made from (a stale server after KUBECONFIG changed)
    credentials: dict[str, str] = {}
    if kubeconfig:
        credentials["kubeconfig"] = kubeconfig
    elif os.path.exists(os.path.expanduser(DEFAULT_KUBECONFIG)):
        credentials["kubeconfig"] = os.path.expanduser(DEFAULT_KUBECONFIG)
    elif os.path.exists(os.path.join(SERVICE_ACCOUNT_DIR, "token")):
        credentials["serviceaccount"] = SERVICE_ACCOUNT_DIR
    else:
        raise no_credentials_error(FileNotFoundError(f"no {DEFAULT_KUBECONFIG}, not in a pod"), kubeconfig)
    try:
        return kr8s.api(**credentials)
    except ValueError as e:  # kr8s: "Unable to find valid credentials"
        raise no_credentials_error(e, kubeconfig) from e
    except (httpx.TransportError, kr8s.APITimeoutError, OSError) as e:
        raise unreachable_error(e, _server_of(kubeconfig)) from e
    except kr8s.ServerError as e:
        raise translate_api_error(e, "", "connect to the Kubernetes API") from e


def _server_of(kubeconfig: str | None) -> str | None:
    try:
        import yaml

        with open(os.path.expanduser((kubeconfig or "~/.kube/config").split(os.pathsep)[0])) as f:
            config = yaml.safe_load(f) or {}
        context = next(c for c in config.get("contexts", []) if c["name"] == config.get("current-context"))
        cluster = next(c for c in config.get("clusters", []) if c["name"] == context["context"]["cluster"])
        return str(cluster["cluster"]["server"])
    except Exception:  # only decorates a message
        return None


def _resource_class(kind: str) -> Any:
    from kr8s.objects import NetworkPolicy, Secret, new_class

    if kind == "Secret":
        return Secret
    if kind == "NetworkPolicy":
        return NetworkPolicy
    return new_class(kind, API_VERSION, asyncio=False, namespaced=True, plural=kind.lower() + "s")


def _create(api: Any, manifest: dict[str, Any]) -> None:
    import httpx
    import kr8s

    kind, name, namespace = manifest["kind"], manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    try:
        _resource_class(kind)(manifest, api=api).create()
    except kr8s.ServerError as e:
        raise translate_api_error(e, namespace, f"create {kind} '{name}' in namespace '{namespace}'") from e
    except (httpx.TransportError, kr8s.APITimeoutError) as e:
        raise unreachable_error(e, None) from e


def delete_pool_resources(api: Any, spec: PoolSpec) -> None:
    """Delete the pool's DaskWorkerGroups and DaskCluster (the operator then deletes their pods) and its
    TLS Secret."""
    import kr8s

    secret = {"kind": "Secret", "metadata": {"name": tls_secret_name(spec.name), "namespace": spec.namespace}}
    for manifest in [*reversed(manifests_for(spec)), secret]:
        try:
            _resource_class(manifest["kind"])(manifest, api=api).delete()
        except kr8s.NotFoundError:
            pass
        except Exception as e:
            log.warning("could not delete %s %s in %s: %s", manifest["kind"], spec.name, spec.namespace, e)


def _pods(api: Any, namespace: str, selector: str) -> list[dict[str, Any]]:
    return list(api.get("pods", namespace=namespace, label_selector=selector, raw=True))


def _events_for(api: Any, namespace: str, pods: list[dict[str, Any]], limit: int = 5) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    pending = [p for p in pods if p.get("status", {}).get("phase") == "Pending"][:limit]
    for pod in pending:
        name = pod["metadata"]["name"]
        events += api.get("events", namespace=namespace, field_selector=f"involvedObject.name={name}", raw=True)
    return sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


def diagnose(api: Any, spec: PoolSpec, selector: str | None = None) -> str:
    """Why the pool's pods are not all running (one line), read from the cluster."""
    assert spec.namespace
    try:
        pods = _pods(api, spec.namespace, selector or pool_selector(spec.namespace, spec.name))
        if not pods:
            return _operator_silence(api, spec)
        return explain_pending(pods, _events_for(api, spec.namespace, pods))
    except Exception as e:  # the diagnosis decorates an error; it must not replace it
        return f"could not read the pods' state ({type(e).__name__}: {e})"


def _operator_silence(api: Any, spec: PoolSpec) -> str:
    found = list(api.get("daskclusters.kubernetes.dask.org", spec.name, namespace=spec.namespace, raw=True))
    phase = (found[0].get("status") or {}).get("phase") if found else None
    if not phase:
        return (
            f"no pod was created and DaskCluster '{spec.name}' has no status: is the dask-kubernetes operator "
            f"running? (kubectl get pods -A -l app.kubernetes.io/name=dask-kubernetes-operator)"
        )
    return f"DaskCluster '{spec.name}' is {phase} but no pod exists yet"


def _pod_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", []) or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def wait_for_scheduler_pod(api: Any, spec: PoolSpec, deadline: float, timeout: float) -> None:
    """Until the scheduler pod is Ready; PoolStartError saying why at the deadline."""
    assert spec.namespace
    namespace = spec.namespace
    selector = f"dask.org/cluster-name={spec.name},dask.org/component=scheduler"
    pods: list[dict[str, Any]] = []

    def ready() -> bool:
        pods[:] = _pods(api, namespace, selector)
        return any(_pod_ready(p) for p in pods)

    def not_ready() -> PoolStartError:
        why = explain_pending(pods, _events_for(api, namespace, pods)) if pods else _operator_silence(api, spec)
        if pods and why == "no pod is Pending":
            name = pods[0]["metadata"]["name"]
            why = (
                f"pod {name} is {pods[0].get('status', {}).get('phase')} but not ready "
                f"(see kubectl -n {namespace} logs {name})"
            )
        return PoolStartError(
            f"pool '{spec.name}': the dask scheduler was not ready within {timeout:.0f} s: {why} "
            f"(raise GPUGEEK_WORKER_START_TIMEOUT if nodes are still being added)"
        )

    poll_until(
        ready,
        timeout=deadline - time.monotonic(),
        interval=POLL_SECONDS,
        what=f"pool '{spec.name}' scheduler pod",
        on_timeout=not_ready,
    )


# -- the backend --------------------------------------------------------------------------------------
class KubernetesBackend:
    """Pools on Kubernetes through the dask-kubernetes operator (see the module docstring)."""

    name = "kubernetes"
    uses_pool_credentials = True  # a Secret '<pool>-tls' mounted into the scheduler and worker pods
    serves_private_dashboard = False  # the scheduler is a pod: its dashboard is the Service's http-dashboard port
    can_reconnect = True  # reconnect(): its DaskCluster outlives the process that launched it

    def lifecycle_plugins(self) -> list[PoolLifecyclePlugin]:
        """The plugins of this backend's pools, registered for them only (:meth:`PoolManager.backend`)."""
        return [DisruptionRecorder()]

    def autoscale(self, pool: Pool, policy: AutoscalePolicy | GroupPolicies | None) -> list[GroupAdaptive]:
        """Autoscale each worker group of ``pool`` (:func:`autoscale_pool`), for ``pools.autoscale``."""
        return autoscale_pool(pool, policy)

    def preflight(self, spec: PoolSpec) -> None:
        """Fail before anything is registered: the manifests must build and the API must answer."""
        manifests_for(spec)
        connect()

    def existing_credentials(self, spec: PoolSpec) -> dict[str, bytes] | None:
        """The TLS files of pool ``spec``'s running DaskCluster, from its ``<pool>-tls`` Secret (None:
        it has none), so that a new owner (the next agent, its own having died) connects as the
        pods expect."""
        import base64

        import kr8s

        api = connect()
        try:
            secret = _resource_class("Secret").get(tls_secret_name(spec.name), namespace=spec.namespace, api=api)
        except kr8s.NotFoundError:
            return None
        data = secret.raw.get("data") or {}
        return {name: base64.b64decode(value) for name, value in data.items()}

    def reconnect(
        self,
        spec: PoolSpec,
        on_progress: ProgressCallback,
        start_timeout: float,
        credentials: PoolCredentials | None = None,
        dashboard_socket: Path | None = None,
    ) -> RunningCluster:
        """Connect to pool ``spec``'s DaskCluster that outlived its owner (nothing is created; the
        operator kept the pods); stopping the pool deletes it as for a launched one. PoolStartError
        when there is no such DaskCluster."""
        import kr8s

        api = connect()
        try:
            _resource_class("DaskCluster").get(spec.name, namespace=spec.namespace, api=api)
        except kr8s.NotFoundError as e:
            raise PoolStartError(
                f"pool '{spec.name}': no DaskCluster of that name in namespace {spec.namespace!r} any more"
            ) from e
        deadline = time.monotonic() + start_timeout
        wait_for_scheduler_pod(api, spec, deadline, start_timeout)
        cluster = _connect_pool_cluster(
            spec, credentials, max(10.0, deadline - time.monotonic()), on_close=lambda: delete_pool_resources(api, spec)
        )
        return self._connect_client(api, spec, cluster, on_progress, deadline, start_timeout)

    def start(
        self,
        spec: PoolSpec,
        on_progress: ProgressCallback,
        start_timeout: float,
        credentials: PoolCredentials | None = None,
        dashboard_socket: Path | None = None,
    ) -> RunningCluster:
        tls = credentials is not None
        manifests = manifests_for(spec, tls=tls)  # spec problems fail before anything is created
        api = connect()
        deadline = time.monotonic() + start_timeout
        created = False
        try:
            if credentials is not None:  # the pods mount it: it must exist before them
                _create(api, build_tls_secret(spec, credentials.files(), user=current_user()))
                created = True
            for manifest in manifests:
                _create(api, manifest)
                created = True
            if credentials is not None:
                _owned_by_cluster(api, spec)  # Kubernetes deletes it with the DaskCluster, whoever deletes that
            wait_for_scheduler_pod(api, spec, deadline, start_timeout)
            cluster = _connect_pool_cluster(
                spec,
                credentials,
                max(10.0, deadline - time.monotonic()),
                on_close=lambda: delete_pool_resources(api, spec),
            )
            running = self._connect_client(api, spec, cluster, on_progress, deadline, start_timeout)
        except BaseException:
            if created:
                delete_pool_resources(api, spec)
            raise
        return running

    def _connect_client(
        self,
        api: Any,
        spec: PoolSpec,
        cluster: Any,
        on_progress: ProgressCallback,
        deadline: float,
        start_timeout: float,
    ) -> RunningCluster:
        from distributed import Client

        try:
            client = Client(cluster, set_as_default=False)
        except BaseException:
            cluster.close(timeout=30)
            raise
        try:
            wait_for_workers(
                client, spec.count, on_progress, max(0.0, deadline - time.monotonic()), f"pool '{spec.name}'"
            )
        except PoolStartError as e:
            why = diagnose(api, spec)
            client.close()
            cluster.close(timeout=30)
            raise PoolStartError(f"{e}; {why}") from e
        except BaseException:
            client.close()
            cluster.close(timeout=30)
            raise
        return RunningCluster(
            client=client,
            scheduler_address=cluster.scheduler_address,
            dashboard_link=cluster.dashboard_link,
            cluster=cluster,
            worker_groups=(DEFAULT_GROUP, *([SPOT_GROUP] if spec.spot_workers else [])),
            pricing_of_worker=lambda worker_name: pricing_of_worker(spec, worker_name),
            security=cluster.security,  # the pool's own credentials (None: plain TCP)
        )


def _connect_pool_cluster(
    spec: PoolSpec, credentials: PoolCredentials | None, timeout: float, on_close: Callable[[], None]
) -> Any:
    """This process's cluster manager for the running pool (TLS with the pool's credentials when it
    has them); closing it deletes the pool's resources (stopping the pool)."""
    from .k8s_cluster import KubernetesPoolCluster, scheduler_addresses

    assert spec.namespace
    try:
        address, dashboard = scheduler_addresses(spec.name, spec.namespace, tls=credentials is not None)
        return KubernetesPoolCluster(
            spec.name,
            address,
            security=credentials.security() if credentials is not None else None,
            dashboard_link=dashboard,
            on_close=on_close,
            timeout=timeout,
        )
    except GpugeekError:
        raise
    except Exception as e:
        raise PoolStartError(
            f"pool '{spec.name}': its scheduler runs in namespace '{spec.namespace}' but this kernel cannot "
            f"connect to it ({type(e).__name__}: {e})"
        ) from e


def _owned_by_cluster(api: Any, spec: PoolSpec) -> None:
    """Make the pool's DaskCluster the owner of its TLS Secret (garbage-collected with it)."""
    try:
        cluster = _resource_class("DaskCluster").get(spec.name, namespace=spec.namespace, api=api)
        owner = {
            "apiVersion": API_VERSION,
            "kind": "DaskCluster",
            "name": spec.name,
            "uid": cluster.metadata["uid"],
        }
        secret = _resource_class("Secret").get(tls_secret_name(spec.name), namespace=spec.namespace, api=api)
        secret.patch({"metadata": {"ownerReferences": [owner]}})
    except Exception as e:  # the Secret is still deleted with the pool by delete_pool_resources
        log.info("pool %s: could not make its DaskCluster own its TLS Secret: %s", spec.name, e)


def pricing_of_worker(spec: PoolSpec, worker_name: str) -> str | None:
    """How a worker of a kubernetes pool is priced, from its group ('spot' or the base pricing)."""
    group = group_of_worker(spec.name, worker_name)
    if group == SPOT_GROUP:
        return "spot"
    if group == DEFAULT_GROUP:
        return spec.base_pricing
    return None


# -- isolation: what a team sees ---------------------------------------------------------------------
def list_cluster_pools(namespace: str) -> list[dict[str, Any]]:
    """The pools running in ``namespace`` as the cluster knows them (only that team's, by label)."""
    import kr8s

    api = connect()
    try:
        clusters = api.get(
            "daskclusters.kubernetes.dask.org", namespace=namespace, label_selector=pool_selector(namespace), raw=True
        )
        return [
            {
                "name": c["metadata"]["name"],
                "namespace": c["metadata"].get("namespace", namespace),
                "labels": c["metadata"].get("labels", {}),
                "phase": (c.get("status") or {}).get("phase"),
                "on_demand_workers": c["spec"]["worker"].get("replicas"),
            }
            for c in clusters
        ]
    except kr8s.ServerError as e:
        raise translate_api_error(e, namespace, f"list pools in namespace '{namespace}'") from e


# -- spot preemptions ---------------------------------------------------------------------------------
_DISRUPTION_PERIOD = 15.0
_disruption_state: dict[int, tuple[float, set[str]]] = {}  # pool id -> (last check, pod uids recorded)


class DisruptionRecorder(PoolLifecyclePlugin):
    """The plugin of kubernetes pools (``KubernetesBackend.lifecycle_plugins``, registered for them
    only): records their preempted pods as pool events."""

    name = "gpugeek-kubernetes-disruptions"

    def heartbeat(self, manager: PoolManager, pool: Pool) -> None:
        """Housekeeping: :func:`record_disruptions`, at most every ``_DISRUPTION_PERIOD`` s a pool."""
        record_disruptions(manager, pool)


def record_disruptions(manager: PoolManager, pool: Pool) -> None:
    """Note each preempted (disrupted) pod of a kubernetes pool as a pool event (the Kubernetes API
    calls are bounded by kr8s's own request timeout)."""
    if not pool.spec.namespace:
        return
    last, seen = _disruption_state.get(pool.id, (0.0, set()))
    if time.monotonic() - last < _DISRUPTION_PERIOD:
        return
    _disruption_state[pool.id] = (time.monotonic(), seen)
    pods = _pods(connect(), pool.spec.namespace, pool_selector(pool.spec.namespace, pool.name))
    for pod in pods:
        uid = pod["metadata"].get("uid", pod["metadata"]["name"])
        why = disruption_of(pod)
        if why and uid not in seen:
            seen.add(uid)
            pricing = (pod["metadata"].get("labels") or {}).get("gpugeek.io/pricing", "?")
            message = f"{pricing} worker pod {pod['metadata']['name']} was disrupted: {why}"
            manager.registry.add_event(pool.id, "preempted", message)
            log.warning("pool %s: %s", pool.name, message)


# -- autoscaling --------------------------------------------------------------------------------------
class KubernetesWorkerGroup:
    """A ``DaskWorkerGroup`` of a running pool, for :mod:`.autoscale` (runs on the cluster's loop).

    Scaling down deletes the retired workers' own Deployments before lowering ``replicas``: the
    operator, left to choose, may retire workers of another group (dask-kubernetes #914, #933).
    """

    def __init__(self, cluster_name: str, namespace: str, group: str) -> None:
        self.cluster_name = cluster_name
        self.namespace = namespace
        self.name = group
        self.resource_name = f"{cluster_name}-{group}"
        self._requested: set[str] = set()

    def owns(self, worker_name: str) -> bool:
        return group_of_worker(self.cluster_name, worker_name) == self.name

    def requested(self) -> set[str]:
        return set(self._requested)

    async def refresh(self) -> None:
        import kr8s.asyncio

        deployments = kr8s.asyncio.get(
            "deployments", namespace=self.namespace, label_selector={"dask.org/workergroup-name": self.resource_name}
        )
        self._requested = {d.name async for d in deployments}

    async def _set_replicas(self, n: int) -> None:
        from kr8s.asyncio.objects import new_class

        group_class = new_class("DaskWorkerGroup", API_VERSION, namespaced=True, plural="daskworkergroups")
        group = await group_class.get(self.resource_name, namespace=self.namespace)
        await group.patch({"spec": {"worker": {"replicas": n}}})

    async def scale_up(self, n: int) -> None:
        await self._set_replicas(n)

    async def scale_down(self, worker_names: list[str]) -> None:
        import kr8s
        from kr8s.asyncio.objects import Deployment

        mine = [n for n in worker_names if self.owns(n)]
        for name in mine:
            try:
                deployment = await Deployment.get(name, namespace=self.namespace)
                await deployment.delete()
            except kr8s.NotFoundError:
                pass

        async def deleted() -> bool:
            await self.refresh()
            return not self._requested & set(mine)

        # a deployment still listed after a minute is left to the operator; the replicas are set all the same
        with contextlib.suppress(PollTimeout):
            await apoll_until(deleted, timeout=60, interval=0.5, what=f"workers {mine} to go")
        await self._set_replicas(len(self._requested))


def autoscale_pool(pool: Pool, policy: AutoscalePolicy | GroupPolicies | None = None) -> list[GroupAdaptive]:
    """Autoscale each worker group of a kubernetes pool this process owns (stop with ``.stop()``);
    the pool's queued jobs count as pending work and its running job keeps every worker busy.
    :func:`~gpugeek_jupyter.pools.autoscale.autoscale` calls this for kubernetes pools.

    >>> from gpugeek_jupyter.pools.autoscale import AutoscalePolicy, GroupPolicies     # doctest: +SKIP
    >>> autoscale_pool(pool, GroupPolicies(by_group={"spot": AutoscalePolicy(maximum=16),
    ...                                               "default": AutoscalePolicy(minimum=2, maximum=2)}))
    """
    from .autoscale import adapt_groups, pool_queue_reader

    if pool.spec.backend != "kubernetes" or pool.cluster is None or not pool.spec.namespace:
        raise GpugeekError(
            f"pool '{pool.name}' is not a kubernetes pool owned by this kernel; autoscale it where it was launched"
        )
    groups = [KubernetesWorkerGroup(pool.name, pool.spec.namespace, g) for g in pool.running.worker_groups]
    return adapt_groups(pool.cluster, groups, policy, queue=pool_queue_reader(pool))
