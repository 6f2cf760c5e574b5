"""The ``local`` backend: a real dask ``LocalCluster`` on this machine.

One single-threaded worker process per rank for ``cpu``; dask-cuda's ``LocalCUDACluster`` (one worker
per GPU) when NVML finds GPUs of the asked type among those this process's ``CUDA_VISIBLE_DEVICES``
allows (see :mod:`gpugeek_jupyter.devices`). Everything binds to loopback unless configured, and
speaks TLS with the pool's own certificates (:mod:`.credentials`) unless ``GpugeekConfig.pool_tls``
is off: loopback is shared by every user of the machine. For the same reason the scheduler's
dashboard is served on a Unix socket of the owner's only, and the workers' HTTP servers do not
listen at all (:mod:`.private_http`). Its temporary files (dask's local directory, the workers'
``TMPDIR``) live in a folder of the owner's that goes with the pool (:mod:`.scratch`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import get_config
from ..dashboards import pool_dashboard_path
from ..devices import VARIABLE, format_visible_devices, select_visible
from ..errors import BackendUnavailableError, Phrase, PoolStartError, Setting
from ..logs import LOG_LEVEL_VARIABLE
from ..nvml import GpuDevice, GpuDiscovery, discover_gpus
from ._backend import ProgressCallback, RunningCluster, wait_for_workers
from .scratch import new_pool_folder, remove_pool_folder
from .worker_origin import use_forkserver

if TYPE_CHECKING:
    from ..spec import PoolSpec
    from .credentials import PoolCredentials

log = logging.getLogger(__name__)

WORKER_PRELOAD = "gpugeek_jupyter.pools.worker_preload"

# Dask's nanny puts these into the environment of every worker *and* of the process that creates
# the cluster (the user's kernel). MALLOC_TRIM_THRESHOLD_=65536 costs a training loop ~20%, so we
# drop it; the thread caps move to the worker-only environment, which torchrun sets for ranks too.
_PRE_SPAWN_ENVIRON: dict[str, Any] = {
    "MALLOC_TRIM_THRESHOLD_": None,
    "OMP_NUM_THREADS": None,
    "MKL_NUM_THREADS": None,
    "OPENBLAS_NUM_THREADS": None,
}
_WORKER_ENVIRON = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


@contextlib.contextmanager
def worker_environment() -> Iterator[None]:
    """Dask config under which pool workers (and their nanny restarts) are created.

    Workers are forked from the pool forkserver (:mod:`.worker_origin`): torch is imported there
    already, and the launching program's ``__main__`` is never run again in them.
    """
    import dask

    use_forkserver(get_config().preload_torch)
    with dask.config.set({"distributed.nanny.pre-spawn-environ": _PRE_SPAWN_ENVIRON}):
        yield


def worker_env() -> dict[str, str]:
    """The environment of a pool's workers: this process's, now, with the thread caps torchrun sets.

    Forked from the forkserver, a worker would otherwise see this process's environment as it was
    when the forkserver started.
    """
    env = {key: value for key, value in os.environ.items() if key not in _PRE_SPAWN_ENVIRON}
    env.update(_WORKER_ENVIRON)
    env[LOG_LEVEL_VARIABLE] = get_config().log_level
    return env


@functools.cache
def keeping_lost_workers(cluster_class: type) -> type:
    """``cluster_class`` (a dask ``SpecCluster``) that leaves a lost worker to its nanny.

    A ``SpecCluster`` closes the nanny of a worker still absent ``lost-worker-timeout`` (15 s) after
    it was removed from the scheduler, meant for workers whose nanny died. Here nannies live in this
    process and restart a dead worker themselves; closing one while it restarts (a second death
    within 15 s) would lose the worker for good.
    """
    from distributed.deploy.cluster import Cluster

    class PoolCluster(cluster_class):  # type: ignore[misc]
        def _update_worker_status(self, op: str, msg: Any) -> None:
            if op == "remove":
                Cluster._update_worker_status(self, op, msg)  # the bookkeeping, without SpecCluster's hard close
                return
            super()._update_worker_status(op, msg)

    PoolCluster.__name__ = PoolCluster.__qualname__ = cluster_class.__name__
    return PoolCluster


@functools.cache
def removing_scratch(cluster_class: type) -> type:
    """``cluster_class`` (a dask ``SpecCluster``) that removes the pool's temporary folder (given as
    ``scratch``) once its scheduler and workers have closed, however the close came about."""

    class PoolCluster(cluster_class):  # type: ignore[misc]
        def __init__(self, *args: Any, scratch: Path | None = None, **kwargs: Any) -> None:
            self.gpugeek_scratch = scratch
            try:
                super().__init__(*args, **kwargs)
            except BaseException:
                remove_pool_folder(scratch)
                raise

        async def _close(self) -> None:
            try:
                await super()._close()
            finally:
                remove_pool_folder(self.gpugeek_scratch)
                self.gpugeek_scratch = None

    PoolCluster.__name__ = PoolCluster.__qualname__ = cluster_class.__name__
    return PoolCluster


def _pool_cluster_class(cluster_class: type) -> type:
    from .private_http import private_http_cluster

    return removing_scratch(keeping_lost_workers(private_http_cluster(cluster_class)))


def _describe_usable(found: GpuDiscovery, usable: list[GpuDevice]) -> str:
    """What NVML found, and what of it ``CUDA_VISIBLE_DEVICES`` leaves when it hides some."""
    if len(usable) == len(found.devices):
        return found.describe()
    left = GpuDiscovery(tuple(usable), None).describe() if usable else "none"
    return f"{found.describe()}, of which {VARIABLE}='{os.environ.get(VARIABLE, '')}' leaves {left}"


def _dashboard_link(spec: PoolSpec, cluster: Any) -> str | None:
    """The Jupyter server's route to the dashboard, when the scheduler serves one on its socket."""
    return pool_dashboard_path(spec.name) if cluster.scheduler.dashboard_socket is not None else None


class LocalBackend:
    name = "local"
    uses_pool_credentials = True
    serves_private_dashboard = True

    def preflight(self, spec: PoolSpec) -> None:
        if not spec.gpu.is_cpu:
            self._matching_devices(spec)

    def _matching_devices(self, spec: PoolSpec) -> str:
        """CUDA_VISIBLE_DEVICES for the pool; BackendUnavailableError listing what is here otherwise."""
        gpu = spec.gpu
        found = discover_gpus()
        usable = select_visible(found.devices)  # this process's CUDA_VISIBLE_DEVICES binds its pools too
        matching = [d for d in usable if gpu.matches_nvml_name(d.name)]
        if len(matching) < spec.count:
            raise BackendUnavailableError(
                Phrase(
                    "{asked} needs {count} x {gpu}, but this machine has {found}; use {cpu} here, "
                    "or {kubernetes} / {address} for a cluster that has them",
                    asked=Setting(gpu_type=spec.gpu_type, count=spec.count),
                    count=str(spec.count),
                    gpu=spec.gpu_type,
                    found=_describe_usable(found, usable),
                    cpu=Setting(gpu_type="cpu"),
                    kubernetes=Setting(backend="kubernetes"),
                    address=Setting(backend="address"),
                )
            )
        return format_visible_devices(d.index for d in matching[: spec.count])

    def start(
        self,
        spec: PoolSpec,
        on_progress: ProgressCallback,
        start_timeout: float,
        credentials: PoolCredentials | None = None,
        dashboard_socket: Path | None = None,
    ) -> RunningCluster:
        security = credentials.security() if credentials is not None else None
        if spec.gpu.is_cpu:
            return self._start_cpu(spec, on_progress, start_timeout, security, dashboard_socket)
        return self._start_gpu(spec, on_progress, start_timeout, security, dashboard_socket)

    def _cluster_kwargs(self, spec: PoolSpec, security: Any, dashboard_socket: Path | None) -> dict[str, Any]:
        """What the scheduler, the nannies and the workers are made with. dask hands ``security`` to
        each of them and, since it requires encryption, listens on ``tls://``: every connection then
        needs the pool's certificate. The scheduler's HTTP application goes to ``dashboard_socket``
        (or nowhere), never to a TCP port. Their temporary files go to the pool's own folder."""
        config = get_config()
        scratch = new_pool_folder(spec.name)
        env = worker_env()
        kwargs: dict[str, Any] = {
            "death_timeout": config.worker_death_timeout,
            "preload": [WORKER_PRELOAD],
            "env": env,
            "dashboard_address": None,
            "scheduler_kwargs": {
                "idle_timeout": None,
                "dashboard": dashboard_socket is not None,
                "dashboard_socket": dashboard_socket,
            },
            "scratch": scratch,
        }
        if scratch is not None:
            kwargs["local_directory"] = str(scratch)  # the nannies and workers
            kwargs["scheduler_kwargs"]["local_directory"] = str(scratch)
            env["TMPDIR"] = str(scratch)  # torch's error files, the ranks' own temporary files
        if security is not None:
            kwargs["security"] = security
        if spec.worker_memory is not None:  # else dask's "auto": the host's memory shared by the workers
            kwargs["memory_limit"] = spec.worker_memory
        return kwargs

    def _start_cpu(
        self,
        spec: PoolSpec,
        on_progress: ProgressCallback,
        start_timeout: float,
        security: Any,
        dashboard_socket: Path | None,
    ) -> RunningCluster:
        from distributed import Client, LocalCluster

        config = get_config()
        with worker_environment():
            try:
                cluster = _pool_cluster_class(LocalCluster)(
                    name=spec.name,
                    n_workers=0,
                    threads_per_worker=1,
                    processes=True,
                    host=config.bind_host,
                    **self._cluster_kwargs(spec, security, dashboard_socket),
                )
            except Exception as e:
                raise PoolStartError(f"could not start a local dask scheduler for pool '{spec.name}': {e}") from e
            try:
                client = Client(cluster, set_as_default=False)
                cluster.scale(spec.count)
                wait_for_workers(client, spec.count, on_progress, start_timeout, f"pool '{spec.name}'")
            except BaseException:
                cluster.close(timeout=10)
                raise
        return RunningCluster(
            client=client,
            scheduler_address=cluster.scheduler_address,
            dashboard_link=_dashboard_link(spec, cluster),
            cluster=cluster,
            security=security,
        )

    def _start_gpu(
        self,
        spec: PoolSpec,
        on_progress: ProgressCallback,
        start_timeout: float,
        security: Any,
        dashboard_socket: Path | None,
    ) -> RunningCluster:
        devices = self._matching_devices(spec)
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError as e:
            raise BackendUnavailableError(
                "GPU pools on one machine need dask-cuda (pip install 'gpugeek-jupyter[gpu]')"
            ) from e
        from distributed import Client

        config = get_config()
        with worker_environment():
            try:
                cluster = _pool_cluster_class(LocalCUDACluster)(
                    name=spec.name,
                    CUDA_VISIBLE_DEVICES=devices,
                    n_workers=spec.count,
                    threads_per_worker=1,
                    host=config.bind_host,
                    **self._cluster_kwargs(spec, security, dashboard_socket),
                )
            except Exception as e:
                raise PoolStartError(f"could not start dask-cuda workers for pool '{spec.name}': {e}") from e
            try:
                client = Client(cluster, set_as_default=False)
                wait_for_workers(client, spec.count, on_progress, start_timeout, f"pool '{spec.name}'")
            except BaseException:
                cluster.close(timeout=10)
                raise
        return RunningCluster(
            client=client,
            scheduler_address=cluster.scheduler_address,
            dashboard_link=_dashboard_link(spec, cluster),
            cluster=cluster,
            cuda_visible_devices=devices,
            security=security,
        )
