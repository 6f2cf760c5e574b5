"""A kept Slurm pool's scheduler, in a process of its own: the pool outlives the agent that owns it.

A pool the user's agent keeps must survive the agent too: its workers are Slurm jobs, and what ties
them to the notebook is their dask scheduler. So for such a pool the scheduler does not run in the
agent (as it does in a kernel) but in a *keeper* process, ``python -m
gpugeek_jupyter.pools.slurm.kept_scheduler <folder>``, in a session of its own. dask-jobqueue's
``SLURMCluster`` in the agent drives it as any scheduler it started (:class:`KeptScheduler` is its
``scheduler_cls``, a ``ProcessInterface`` like dask's own ``SubprocessScheduler``), and a running
job's ranks, which talk only to their scheduler, go on whatever happens to the agent.

The keeper's files, in ``<registry folder>/gpugeek-keepers/<pool id>/`` (0700, each 0600):

    keeper.json   what it runs (the scheduler's options, the pool, the command that brings an agent back)
    address       the scheduler's address, once it listens
    owner         ``pid start-time`` of the agent that owns the pool now (a new agent writes its own)
    keeper.log    what it logs

While it runs, the keeper holds the pool's lease in the registry (it is the pool's recorded owner
process and beats its heartbeat), so a dead agent does not make the pool ``lost``. When the owning
agent dies, the keeper starts a new one (the command in ``keeper.json``), which takes the pool back
(its running job included); a stop requested while no agent runs is carried out by the keeper
itself. With no agent back within ``GpugeekConfig.keeper_grace_seconds``, it cancels the pool's Slurm jobs, records the
pool ``lost`` with that reason, and exits: nothing is left running that nobody can reach.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distributed.deploy.spec import ProcessInterface

from ...config import get_config
from ...polling import apoll_until
from ...store import (
    PoolStatus,
    get_registry,
    make_private_directory,
    make_private_file,
    process_is_alive,
    process_started_at,
)
from .jobs import scancel_pool_jobs, slurm_jobs_by_worker

log = logging.getLogger(__name__)

RESTART_EVERY_S = 15.0  # while none has, it runs the agent's start command again this often
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


def keepers_root() -> Path:
    return Path(get_config().registry_path).expanduser().parent / "gpugeek-keepers"


@dataclass(frozen=True)
class KeeperFiles:
    folder: Path

    @classmethod
    def of(cls, pool_id: int) -> KeeperFiles:
        return cls(keepers_root() / str(pool_id))

    @property
    def config(self) -> Path:
        return self.folder / "keeper.json"

    @property
    def address(self) -> Path:
        return self.folder / "address"

    @property
    def owner(self) -> Path:
        return self.folder / "owner"

    @property
    def log(self) -> Path:
        return self.folder / "keeper.log"

    def read_address(self) -> str | None:
        try:
            return self.address.read_text().strip() or None
        except OSError:
            return None

    def write_owner(self, pid: int | None = None) -> None:
        """Make process ``pid`` (default: this one) the pool's owning agent, as the keeper sees it."""
        pid = os.getpid() if pid is None else pid
        _write_private(self.owner, f"{pid} {process_started_at(pid)}\n")

    def owner_alive(self) -> bool:
        try:
            pid, started_at = self.owner.read_text().split()
        except (OSError, ValueError):
            return False
        return process_is_alive(int(pid), float(started_at))


def _write_private(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    make_private_file(partial)
    partial.write_text(text)
    os.replace(partial, path)  # whole or absent


class KeptScheduler(ProcessInterface):
    """dask-jobqueue's ``scheduler_cls`` for a kept pool: the scheduler in a keeper process.

    ``pool_id`` names the pool; ``restart_command`` is how the keeper brings an owner back; the
    other options are the scheduler's (host, port, idle_timeout, dashboard_socket), as for
    :class:`~.private_http.PrivateHttpScheduler`.
    """

    def __init__(
        self, pool_id: int, restart_command: list[str], dashboard_socket: Any = None, **scheduler_options: Any
    ) -> None:
        super().__init__()
        self.files = KeeperFiles.of(pool_id)
        self.pool_id = pool_id
        self.restart_command = restart_command
        self.dashboard_socket = Path(dashboard_socket) if dashboard_socket is not None else None
        # the keeper makes its own Security from the pool's credentials; the dashboard is the socket's
        self.scheduler_options = {
            k: v for k, v in scheduler_options.items() if k not in ("security", "dashboard", "dashboard_address")
        }
        self.pid: int | None = None

    async def start(self) -> None:
        make_private_directory(self.files.folder)
        self.files.address.unlink(missing_ok=True)
        self.files.write_owner()
        _write_private(
            self.files.config,
            json.dumps(
                {
                    "pool_id": self.pool_id,
                    "restart_command": self.restart_command,
                    "dashboard_socket": str(self.dashboard_socket) if self.dashboard_socket else None,
                    "scheduler": self.scheduler_options,
                }
            ),
        )
        make_private_file(self.files.log)
        with self.files.log.open("ab") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "gpugeek_jupyter.pools.slurm.kept_scheduler", str(self.files.folder)],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # not in the agent's process group: a signal to it spares this
                close_fds=True,
            )
        self.pid = process.pid

        def did_not_start() -> RuntimeError:
            why = f"exit code {process.returncode}" if process.returncode is not None else "no address in time"
            return RuntimeError(f"the pool's scheduler process did not start ({why}); see {self.files.log}")

        async def address_written() -> str | None:
            address = self.files.read_address()
            if address is None and process.poll() is not None:
                raise did_not_start()
            return address

        self.address = await apoll_until(
            address_written, timeout=START_TIMEOUT_S, interval=0.05, what="the scheduler", on_timeout=did_not_start
        )
        await super().start()

    async def close(self) -> None:
        if self.pid is not None:
            await asyncio.get_running_loop().run_in_executor(None, stop_keeper, self.pid)
        await super().close()


def stop_keeper(pid: int, timeout: float = STOP_TIMEOUT_S) -> None:
    """End keeper ``pid`` (SIGTERM: it closes its scheduler and cancels its pool's Slurm jobs), by pid."""
    import psutil

    try:
        process = psutil.Process(pid)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=timeout)
    except psutil.NoSuchProcess:
        return
    except psutil.TimeoutExpired:
        process.kill()


# -- taking a pool back -------------------------------------------------------------------------------
class TakenBackCluster:
    """What a new agent holds of a kept Slurm pool it took back: the pool's Slurm jobs (from its
    registry events) and its keeper. It runs jobs and stops; it does not scale or replace workers
    (dask-jobqueue's cluster object, which did, died with the previous agent)."""

    def __init__(self, registry: Any, pool_id: int, keeper_pid: int) -> None:
        self.registry = registry
        self.pool_id = pool_id
        self.keeper_pid = keeper_pid

    def job_ids(self) -> dict[str, str]:
        return slurm_jobs_by_worker(self.registry, self.pool_id)

    def close(self, timeout: float = 30.0) -> None:
        try:
            scancel_pool_jobs(self.registry, self.pool_id)
        finally:
            stop_keeper(self.keeper_pid, timeout=min(timeout, STOP_TIMEOUT_S))


def pools_to_take_back(registry: Any, owner_prefix: str) -> list[Any]:
    """Live pools owned by a previous agent (owner label starting with ``owner_prefix``, not this
    process) whose keeper still runs: a new agent takes them back."""
    records = []
    for record in registry.list_pools(live_only=True):
        files = KeeperFiles.of(record.id)
        if (
            record.owner.startswith(owner_prefix)
            and files.config.exists()
            and not files.owner_alive()
            and record.owner_host == socket.gethostname()
            and process_started_at(record.owner_pid) > 0  # the keeper (the pool's recorded owner process) runs
        ):
            records.append(record)
    return records


def take_back(manager: Any, record: Any) -> Any:
    """Pool ``record`` (see :func:`pools_to_take_back`) owned by ``manager`` from now on: its
    scheduler reached, the keeper told who owns it; the :class:`~.Pool`."""
    from ...dashboards import browser_link
    from .._backend import RunningCluster
    from ..credentials import connection_security
    from ..private_http import PoolClient

    files = KeeperFiles.of(record.id)
    address = files.read_address() or record.scheduler_address
    security = connection_security(record, manager.registry)
    client = PoolClient(
        address, set_as_default=False, timeout=10, security=security, dashboard_link=browser_link(record.dashboard_link)
    )
    cluster = TakenBackCluster(manager.registry, record.id, record.owner_pid)
    running = RunningCluster(
        client=client,
        scheduler_address=address,
        dashboard_link=record.dashboard_link,
        cluster=cluster,
        batch_jobs=cluster.job_ids,
        security=client.security,
        keeper_pid=record.owner_pid,
    )
    files.write_owner()  # from now on the keeper watches this process
    return manager.adopt(record, running)


# -- the keeper process ------------------------------------------------------------------------------
def main(folder: str) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    files = KeeperFiles(Path(folder))
    settings = json.loads(files.config.read_text())
    asyncio.run(_serve(files, settings))


async def _serve(files: KeeperFiles, settings: dict[str, Any]) -> None:
    from ..credentials import pool_credentials
    from ..private_http import PrivateHttpScheduler

    pool_id = int(settings["pool_id"])
    registry = get_registry()
    credentials = pool_credentials(registry, pool_id)
    security = credentials.security() if credentials is not None else None  # None: dask's config (no pool TLS)
    scheduler = PrivateHttpScheduler(
        security=security, dashboard_socket=settings.get("dashboard_socket"), **settings["scheduler"]
    )
    await scheduler
    loop = asyncio.get_running_loop()
    ending = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, ending.set)
    # the pool's lease is this process's from now on: the agent may die, the pool does not
    registry.set_pool_owner_process(pool_id, os.getpid(), process_started_at(os.getpid()))
    _write_private(files.address, scheduler.address + "\n")
    log.info("keeper %d of pool %d: scheduler at %s", os.getpid(), pool_id, scheduler.address)
    watch = _OwnerWatch(files, settings, pool_id, lambda reason: loop.call_soon_threadsafe(ending.set))
    threading.Thread(target=watch.run, name="gpugeek-keeper-watch", daemon=True).start()
    finished = asyncio.ensure_future(scheduler.finished())
    await asyncio.wait([finished, asyncio.ensure_future(ending.wait())], return_when=asyncio.FIRST_COMPLETED)
    watch.done.set()
    if not finished.done():
        _cancel_slurm_jobs(registry, pool_id)
        await scheduler.close()
    if watch.gave_up is not None:
        registry.set_pool_status(pool_id, PoolStatus.LOST, reason=watch.gave_up)
    log.info("keeper %d of pool %d: done", os.getpid(), pool_id)


class _OwnerWatch:
    """The keeper's beat: the pool's heartbeat, its stop requests while no agent runs, and an agent
    brought back when the owning one died."""

    def __init__(self, files: KeeperFiles, settings: dict[str, Any], pool_id: int, end: Any) -> None:
        self.files = files
        self.settings = settings
        self.pool_id = pool_id
        self.end = end
        self.done = threading.Event()
        self.gave_up: str | None = None

    def run(self) -> None:
        registry = get_registry()
        period = max(0.2, min(get_config().heartbeat_seconds, 2.0))
        grace = get_config().keeper_grace_seconds
        orphaned_at: float | None = None
        restarted_at = 0.0
        while not self.done.wait(period):
            try:
                record = registry.pool_by_id(self.pool_id)
                if not record.status.is_live:
                    self.end("its pool ended")
                    return
                stop_requested = registry.heartbeat([self.pool_id]).get(self.pool_id, False)
                if self.files.owner_alive():
                    orphaned_at = None
                    continue
                now = time.monotonic()
                if stop_requested:  # nobody else will: stop it here
                    registry.set_pool_status(self.pool_id, PoolStatus.STOPPED, reason="stopped while no agent ran")
                    self.end("stopped")
                    return
                if orphaned_at is None:
                    orphaned_at = now
                    log.info("keeper %d: the pool's agent is gone; starting one", os.getpid())
                if now - orphaned_at > grace:
                    self.gave_up = f"its agent died and none took the pool back within {grace:.0f} s"
                    self.end(self.gave_up)
                    return
                if now - restarted_at > RESTART_EVERY_S:
                    restarted_at = now
                    subprocess.Popen(  # the agent's own start: under its lock, one wins
                        self.settings["restart_command"],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        start_new_session=True,
                        close_fds=True,
                    )
            except Exception as e:  # a busy registry: the next beat tries again
                log.warning("keeper %d: beat failed: %s: %s", os.getpid(), type(e).__name__, e)


def _cancel_slurm_jobs(registry: Any, pool_id: int) -> None:
    try:
        scancel_pool_jobs(registry, pool_id)
    except Exception as e:  # the scheduler closes all the same; its workers then exit
        log.warning("keeper %d: could not cancel the pool's Slurm jobs: %s", os.getpid(), e)


if __name__ == "__main__":
    main(sys.argv[1])
