"""The ``slurm`` backend: submits a pool's worker jobs through its ``SLURMCluster`` and waits for
them, saying at once why when Slurm can never start them (see the package's docstring)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...config import get_config
from ...dashboards import pool_dashboard_path
from ...errors import BackendUnavailableError, Field, Phrase, PoolStartError, Setting, Value
from ...polling import poll_until
from .._backend import Outliving, ProgressCallback, RunningCluster
from ..scheduler_workers import connected_workers
from .cluster import pool_cluster_class
from .commands import missing_commands, short_path
from .credentials import copy_credentials, make_pool_folder, prune_pool_folders, remove_credentials_copy, shared_root
from .errors import explain_sbatch_error, sbatch_test_only
from .jobqueue import require_jobqueue, submit_jobs
from .ports import free_port_in, port_range
from .script import SCRIPT_SCHEDULER, job_script, job_script_options
from .squeue import HOPELESS_REASONS, JobState, job_states, pending_summary
from .watcher import SlurmJobWatcher

if TYPE_CHECKING:
    from ...spec import PoolSpec
    from .._plugin import PoolLifecyclePlugin
    from ..credentials import PoolCredentials

POLL_SECONDS = 2.0  # squeue while a pool starts


class SlurmBackend:
    """Pools as Slurm jobs (see the module docstring)."""

    name = "slurm"
    uses_pool_credentials = True
    serves_private_dashboard = True  # the scheduler runs in the launching process (or its keeper)
    can_outlive_owner = True  # with ``outliving``, the scheduler runs in a keeper process (kept pools)

    def lifecycle_plugins(self) -> list[PoolLifecyclePlugin]:
        """The plugins of this backend's pools, registered for them only (:meth:`PoolManager.backend`)."""
        return [SlurmJobWatcher()]

    def preflight(self, spec: PoolSpec) -> None:
        """Fail before anything is registered: dask-jobqueue and Slurm's commands must be here, and
        Slurm must accept the job (``sbatch --test-only``)."""
        require_jobqueue()
        missing = missing_commands()
        if missing:
            raise BackendUnavailableError(
                Phrase(
                    "{backend} needs Slurm's commands, and {missing} {is_are} not on PATH ({path}); launch from a "
                    "node where sbatch works (a login node), or load Slurm first (module load slurm)",
                    backend=Setting(backend="slurm"),
                    missing=", ".join(missing),
                    is_are="is" if len(missing) == 1 else "are",
                    path=short_path(),
                )
            )
        sbatch_test_only(job_script(spec, SCRIPT_SCHEDULER, f"{spec.name}-0", "/tmp", None), spec)

    def start(
        self,
        spec: PoolSpec,
        on_progress: ProgressCallback,
        start_timeout: float,
        credentials: PoolCredentials | None = None,
        dashboard_socket: Path | None = None,
        outliving: Outliving | None = None,
    ) -> RunningCluster:
        from distributed import Client

        from ..private_http import PrivateHttpScheduler
        from .kept_scheduler import KeptScheduler

        config = get_config()
        deadline = time.monotonic() + start_timeout
        prune_pool_folders()
        try:
            folder = make_pool_folder(spec)
            worker_security = copy_credentials(credentials, folder) if credentials is not None else None
        except OSError as e:
            raise BackendUnavailableError(
                f"pool '{spec.name}' needs a folder of its own in {shared_root()} (the workers' logs and credentials), "
                f"and it cannot be made there ({e}); set GpugeekConfig.slurm_shared_directory "
                f"(GPUGEEK_SLURM_SHARED_DIRECTORY) to a folder the compute nodes see"
            ) from e
        security = credentials.security() if credentials is not None else None
        host = config.slurm_scheduler_host.strip()
        ports = port_range()
        scheduler_options: dict[str, Any] = {
            "idle_timeout": None,
            # the scheduler runs here: its dashboard on the pool's Unix socket, on no TCP port
            "dashboard": dashboard_socket is not None,
            "dashboard_socket": dashboard_socket,
        }
        if ports is not None:
            scheduler_options["port"] = free_port_in(ports, host)
        if host:
            scheduler_options["host"] = host
        scheduler_cls: type = PrivateHttpScheduler
        if outliving is not None:  # a kept pool: its scheduler in a process of its own, which outlives the agent
            scheduler_cls = KeptScheduler
            scheduler_options["pool_id"] = outliving.pool_id
            scheduler_options["restart_command"] = list(outliving.restart_command)
        try:
            cluster = pool_cluster_class()(
                name=spec.name,
                n_workers=0,
                security=security,
                worker_security=worker_security,
                pool_folder=folder,
                scheduler_cls=scheduler_cls,
                scheduler_options=scheduler_options,
                **job_script_options(spec, str(folder / "logs")),
            )
        except Exception as e:
            remove_credentials_copy(folder)
            raise PoolStartError(f"could not start the dask scheduler of pool '{spec.name}': {e}") from e
        try:
            _submit(cluster, spec)
            client = Client(cluster, set_as_default=False)
            try:
                _wait_for_workers(client, cluster, spec, on_progress, deadline, start_timeout)
            except BaseException:
                client.close()
                raise
        except BaseException:
            cluster.close(timeout=30)  # scancel every job it submitted
            raise
        return RunningCluster(
            client=client,
            scheduler_address=cluster.scheduler_address,
            dashboard_link=pool_dashboard_path(spec.name) if cluster.scheduler.dashboard_socket is not None else None,
            cluster=cluster,
            job_folder=str(folder),
            batch_jobs=cluster.job_ids,
            security=security,
            keeper_pid=getattr(cluster.scheduler, "pid", None),
        )


def _submit(cluster: Any, spec: PoolSpec) -> None:
    """Submit one job per worker; sbatch's refusal as a one-line error."""
    for _ in range(spec.count):
        cluster.worker_spec.update(cluster.new_worker_spec())
    try:
        submit_jobs(cluster)
    except RuntimeError as e:  # dask-jobqueue: "Command exited with non-zero exit code ... stderr: ..."
        text = str(e)
        stderr = text.split("stderr:", 1)[-1] if "stderr:" in text else text
        raise explain_sbatch_error(stderr, spec) from e


def _wait_for_workers(
    client: Any, cluster: Any, spec: PoolSpec, on_progress: ProgressCallback, deadline: float, start_timeout: float
) -> None:
    """Until every worker has connected; at the deadline, or at once when Slurm says the jobs can
    never start, PoolStartError with Slurm's reasons (squeue every :data:`POLL_SECONDS` s)."""
    seen = _Connecting()

    def failure(timed_out: bool) -> PoolStartError:
        states = job_states(list(cluster.job_ids().values()))
        return _not_connected(
            spec, seen.ready, states, cluster, f"within {start_timeout:.0f} s" if timed_out else "so far"
        )

    def all_connected() -> bool:
        ready = len(connected_workers(client))
        if ready != seen.ready:
            on_progress(min(ready, spec.count), spec.count)
            seen.ready = ready
        if ready >= spec.count:
            return True
        if time.monotonic() - seen.polled >= POLL_SECONDS:
            seen.polled = time.monotonic()
            states = job_states(list(cluster.job_ids().values()))
            hopeless = [s for s in states.values() if s.state == "PENDING" and s.reason in HOPELESS_REASONS]
            if hopeless or any(not s.live for s in states.values()):
                raise _not_connected(spec, ready, states, cluster, "so far")
        return False

    poll_until(
        all_connected,
        timeout=max(0.0, deadline - time.monotonic()),
        interval=0.05,
        what=f"the workers of pool {spec.name!r}",
        on_timeout=lambda: failure(timed_out=True),
    )


@dataclass
class _Connecting:
    ready: int = -1  # workers connected at the last look
    polled: float = 0.0  # when squeue was last asked


def _not_connected(spec: PoolSpec, ready: int, states: dict[str, JobState], cluster: Any, when: str) -> PoolStartError:
    return PoolStartError(
        Phrase(
            "pool {name}: {ready}/{count} workers connected {when}; {why}; {fix}",
            name=Value(spec.name),
            ready=str(max(ready, 0)),
            count=str(spec.count),
            when=when,
            why=pending_summary(states),
            fix=_fix_for(states, cluster),
        ),
        field="count",
    )


def _fix_for(states: dict[str, JobState], cluster: Any) -> Any:
    reasons = {s.reason for s in states.values() if s.state == "PENDING"}
    if reasons & set(HOPELESS_REASONS):
        return "change what the pool asks for (see --dry-run)"
    ended = [s for s in states.values() if not s.live]
    if ended or not reasons:
        folder = getattr(cluster, "pool_folder", None)
        return f"see the workers' logs in {folder / 'logs' if folder else 'the pool folder'}"
    return Phrase(
        "try again later, raise GPUGEEK_WORKER_START_TIMEOUT, or ask for fewer workers ({count}) or another {partition}",
        count=Field("count"),
        partition=Field("partition"),
    )
