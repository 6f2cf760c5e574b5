"""The backend interface: how a pool gets its scheduler and workers.

A backend turns a :class:`~gpugeek_jupyter.spec.PoolSpec` into a running dask cluster. Each one is a
small class with :meth:`Backend.start`; the pool manager does everything else (registry, heartbeat,
worker intervals, stop), so a new backend (kubernetes) is a drop-in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import Phrase, PoolStartError
from ..polling import poll_until
from .scheduler_workers import connected_workers

if TYPE_CHECKING:
    from distributed import Client
    from distributed.security import Security

    from ..spec import PoolSpec
    from .credentials import PoolCredentials

ProgressCallback = Callable[[int, int], None]  # (workers ready, workers asked for)


@dataclass
class RunningCluster:
    """What a backend hands back: a connected client and how to shut the cluster down."""

    client: Client
    scheduler_address: str
    # a path relative to the Jupyter server's base URL (gpugeek/pools/<name>/dashboard/status) for a
    # dashboard on this host's private socket, else the dashboard's http address; None without one
    dashboard_link: str | None
    cluster: Any = None  # the dask Cluster object when this process owns it
    owns_workers: bool = True  # False for an attached scheduler: stop() must not shut it down
    # what a backend knows of its workers, each a typed fact (one field each, never a dict of strings):
    cuda_visible_devices: str | None = None  # local GPU pools: the devices the workers were given
    worker_groups: tuple[str, ...] = ()  # kubernetes: the operator's worker groups (default, spot)
    pricing_of_worker: Callable[[str], str | None] | None = None  # a worker's name -> spot/reserved/...
    job_folder: str | None = None  # slurm: the pool's folder of job scripts and worker credentials
    batch_jobs: Callable[[], dict[str, str]] | None = None  # slurm: worker name -> its batch job id, now
    security: Security | None = field(default=None, repr=False)  # how to reach the scheduler (None: dask's config)
    keeper_pid: int | None = None  # a kept Slurm pool: the process its scheduler runs in (it outlives this one)

    def close(self, timeout: float = 30.0) -> None:
        """Close the client and, when this process owns it, the cluster."""
        try:
            self.client.close(timeout=timeout)
        finally:
            if self.cluster is not None and self.owns_workers:
                self.cluster.close(timeout=timeout)


@dataclass(frozen=True)
class Outliving:
    """Asks a backend that can (``can_outlive_owner``) to run pool ``pool_id``'s scheduler apart from
    this process, so the pool outlives it; ``restart_command`` brings an owner back when it dies
    (the user's agent, which takes such pools back: pools/slurm/kept_scheduler.py)."""

    pool_id: int
    restart_command: tuple[str, ...]


class Backend(Protocol):
    """What the manager asks of a backend (named in ``pools/_backends.py``). Optional, looked up with
    ``getattr``: ``lifecycle_plugins()``, the plugins of this backend's pools (registered for them
    only, by ``PoolManager.backend``); ``can_reconnect`` with ``reconnect()``; ``can_outlive_owner``."""

    name: str
    # True: the manager makes the pool its own TLS credentials at launch (GpugeekConfig.pool_tls)
    # and hands them to start(); False: the backend's connections are secured elsewhere, or not
    uses_pool_credentials: bool
    # True: the pool's scheduler runs in this process and serves its dashboard on the Unix socket the
    # manager hands to start() (pools/private_http.py); False: the dashboard is wherever the backend says
    serves_private_dashboard: bool

    def preflight(self, spec: PoolSpec) -> None:
        """Raise a GpugeekError now if ``spec`` cannot work here (before anything is registered)."""
        ...

    def start(
        self,
        spec: PoolSpec,
        on_progress: ProgressCallback,
        start_timeout: float,
        credentials: PoolCredentials | None = None,
        dashboard_socket: Path | None = None,
    ) -> RunningCluster:
        """Start (or attach to) the cluster for ``spec``, requiring ``credentials`` on every connection
        when given, serving the scheduler's dashboard on ``dashboard_socket`` only (and on no TCP
        port) when given; raise a GpugeekError subclass on failure."""
        ...


def wait_for_workers(client: Client, count: int, on_progress: ProgressCallback, timeout: float, what: str) -> None:
    """Report progress until ``count`` workers are connected; PoolStartError after ``timeout`` s."""
    seen = [-1]  # the count reported last

    def connected() -> bool:
        ready = len(connected_workers(client))
        if ready != seen[0]:
            on_progress(min(ready, count), count)
            seen[0] = ready
        return ready >= count

    def too_few() -> PoolStartError:
        return PoolStartError(
            Phrase(
                "{what}: only {ready}/{count} workers connected within {timeout} s "
                "(raise GpugeekConfig.worker_start_timeout, or ask for fewer with {field})",
                what=what,
                ready=str(seen[0]),
                count=str(count),
                timeout=f"{timeout:.0f}",
            ),
            field="count",
        )

    poll_until(connected, timeout=timeout, interval=0.05, what=what, on_timeout=too_few)
