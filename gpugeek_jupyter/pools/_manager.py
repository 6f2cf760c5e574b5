"""``PoolManager``: launches, tracks and stops this process's pools, and keeps the registry true.

One manager per process. A daemon thread heart-beats every owned pool, opens and closes worker
intervals as workers come and go (cost is computed from them), and carries out stop requests that
other processes (the server, another kernel) write into the registry.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..config import get_config
from ..cost.rates import prices_in_force
from ..errors import ConflictError, GpugeekError, PoolStartError, SpecError
from ..spec import PoolSpec
from ..store import PoolRecord, PoolStatus, Registry, get_registry
from ._backend import Backend, ProgressCallback, RunningCluster
from ._pool import Pool

log = logging.getLogger(__name__)

StatusCallback = Callable[[Pool], None]


def backend_for(name: str) -> Backend:
    if name == "local":
        from .local import LocalBackend

        return LocalBackend()
    if name == "address":
        from .address import AddressBackend

        return AddressBackend()
    if name == "kubernetes":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend()
    raise SpecError(f"unknown backend '{name}' (choose one of local, kubernetes, address; e.g. --backend local)")


class _WorkerTracker:
    """Keeps one open registry interval per connected worker of one pool."""

    def __init__(self, registry: Registry, pool: Pool) -> None:
        self.registry = registry
        self.pool = pool
        self.open_intervals: dict[str, int] = {}  # worker address -> interval id
        self.pricing: dict[str, str] = {}  # worker address -> spot, reserved or on_demand

    def sync(self, workers: dict[str, dict[str, Any]], pids: dict[str, int] | None = None) -> None:
        for address in set(self.open_intervals) - set(workers):
            # a spot worker that vanishes from a live pool was taken back by the provider
            reason = "preempted" if self.pricing.pop(address, None) == "spot" else "worker left"
            self.registry.close_worker_interval(self.open_intervals.pop(address), reason=reason)
        for address, info in workers.items():
            if address in self.open_intervals:
                continue
            name = info.get("name")
            index = int(str(name)) if isinstance(name, int) or str(name).isdigit() else len(self.open_intervals)
            # a backend whose workers belong to named groups (kubernetes: spot/default) prices by group
            pricing_of = self.pool.running.extra.get("pricing_of_worker")
            group_pricing = pricing_of(str(name)) if pricing_of else None
            self.pricing[address] = group_pricing or self.pool.spec.pricing_of_worker(index)
            self.open_intervals[address] = self.registry.open_worker_interval(
                self.pool.id,
                worker_name=str(name),
                pricing=self.pricing[address],
                address=address,
                host=info.get("host"),
                pid=(pids or {}).get(address),
            )


class PoolManager:
    def __init__(self, registry: Registry | None = None, owner: str | None = None) -> None:
        self.registry = registry or get_registry()
        self.owner = owner or f"pid {os.getpid()}"
        self._pools: dict[str, Pool] = {}
        self._trackers: dict[str, _WorkerTracker] = {}
        self._current: str | None = None
        self._lock = threading.RLock()
        self._heartbeat_thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self.on_stopped: list[StatusCallback] = []  # adapters (widgets) subscribe here
        # Called on the heartbeat thread for each owned, live pool after its beat (budget and idle
        # watchers, telemetry flushes). A hook must be quick and must not raise.
        self.heartbeat_hooks: list[Callable[[PoolManager, Pool], None]] = []
        # Called with (manager, pool, reason) before an owned pool's workers are shut down, whoever
        # stops it (user, budget, idle timeout, another process): the place to checkpoint and end the
        # running job cleanly. A hook may block (bounded by its own timeout) and must not raise.
        self.before_stop_hooks: list[Callable[[PoolManager, Pool, str], None]] = []
        # Called with (pool, kind, message) when the core has something to tell the user (budget at
        # 80 %, budget spent, idle shutdown); adapters (magics, widgets) subscribe, the core never prints.
        self.notices: list[Callable[[Pool, str, str], None]] = []
        atexit.register(self.shutdown)

    def post_notice(self, pool: Pool, kind: str, message: str) -> None:
        """Hand ``message`` to every subscriber of :attr:`notices`; a failing subscriber is logged."""
        log.info("pool %s: %s", pool.name, message)
        for callback in list(self.notices):
            try:
                callback(pool, kind, message)
            except Exception as e:
                log.warning("notice subscriber %s failed for pool %s: %s", getattr(callback, "__name__", callback), pool.name, e)

    # -- queries ---------------------------------------------------------------------------------
    @property
    def current(self) -> Pool | None:
        with self._lock:
            return self._pools.get(self._current) if self._current else None

    def pools(self) -> list[Pool]:
        with self._lock:
            return list(self._pools.values())

    def get(self, name: str) -> Pool:
        with self._lock:
            if name in self._pools:
                return self._pools[name]
        return self.attach(name)

    # -- launch ----------------------------------------------------------------------------------
    def ensure_name_free(self, name: str) -> None:
        """ConflictError if a live pool already has ``name`` (launch checks again, atomically)."""
        self.registry.mark_lost_pools(get_config().lost_after_seconds)
        if any(p.name == name for p in self.registry.list_pools(live_only=True)):
            raise ConflictError(
                f"a pool named '{name}' is already running (stop it with %gpugeek_stop {name}, or pick another --name)"
            )

    def launch(self, spec: PoolSpec, on_progress: ProgressCallback | None = None) -> Pool:
        """Start a pool for ``spec``, register it and make it the current pool."""
        _refuse_inside_a_reimported_main()
        backend = backend_for(spec.backend)
        backend.preflight(spec)
        config = get_config()
        self.registry.mark_lost_pools(config.lost_after_seconds)  # frees names held by dead kernels
        record = self.registry.add_pool(
            spec.name, spec.backend, spec.to_dict(), prices_in_force(spec), owner=self.owner, namespace=spec.namespace
        )
        self._ensure_heartbeat()
        progress = on_progress or (lambda ready, total: None)
        try:
            running = backend.start(spec, progress, config.worker_start_timeout)
        except BaseException as e:
            reason = str(e) if isinstance(e, GpugeekError) else f"{type(e).__name__}: {e}"
            if isinstance(e, KeyboardInterrupt):
                reason = "interrupted while starting"
            self.registry.set_pool_status(record.id, PoolStatus.FAILED, reason=reason)
            if isinstance(e, GpugeekError | KeyboardInterrupt):
                raise
            raise PoolStartError(f"pool '{spec.name}' failed to start: {reason}") from e
        pool = Pool(record, running, self, owned=True)
        tracker = _WorkerTracker(self.registry, pool)
        with self._lock:
            self._trackers[spec.name] = tracker
        self._sync_workers(spec.name)
        from ..telemetry import install as install_telemetry

        install_telemetry(pool)  # samplers on every worker, now and after restarts; never raises
        self.registry.set_pool_status(
            record.id,
            PoolStatus.READY,
            scheduler_address=running.scheduler_address,
            dashboard_link=running.dashboard_link,
        )
        # Only now may the heartbeat thread see the pool: a stop requested while it was starting is
        # carried out on the next beat instead of being overwritten by READY.
        with self._lock:
            self._pools[spec.name] = pool
            self._current = spec.name
        log.info("pool %s ready: %s", spec.name, running.dashboard_link)
        return pool

    def attach(self, name: str) -> Pool:
        """A handle on a live pool that another process owns (its scheduler is reachable)."""
        from distributed import Client

        self.registry.mark_lost_pools(get_config().lost_after_seconds)
        record = self.registry.live_pool(name)
        if record.status is not PoolStatus.READY or not record.scheduler_address:
            raise GpugeekError(f"pool '{name}' is {record.status.value}, not ready; try again when it is")
        try:
            client = Client(record.scheduler_address, set_as_default=False, timeout=10)
        except (OSError, TimeoutError) as e:
            raise GpugeekError(f"pool '{name}' is registered but its scheduler {record.scheduler_address} does not answer: {e}") from e
        running = RunningCluster(client, record.scheduler_address, record.dashboard_link, owns_workers=False)
        pool = Pool(record, running, self, owned=False)
        with self._lock:
            self._pools[name] = pool
        return pool

    def use(self, name: str) -> Pool:
        pool = self.get(name)
        with self._lock:
            self._current = name
        return pool

    # -- stop ------------------------------------------------------------------------------------
    def stop(self, name: str, reason: str = "stopped by the user", timeout: float = 60.0) -> PoolRecord:
        """Stop pool ``name``, wherever it was launched; returns its final record."""
        with self._lock:
            pool = self._pools.get(name)
        if pool is not None and pool.owned:
            self._stop_owned(pool, reason)
            return self.registry.pool_by_id(pool.id)
        if pool is not None:  # attached: detach, then ask the owner
            self._forget(name)
            pool.running.close()
        return self.request_stop(name, timeout)

    def request_stop(self, name: str, timeout: float = 60.0) -> PoolRecord:
        """Ask the owning process to stop ``name`` and wait until it has (or the owner is found dead)."""
        config = get_config()
        record = self.registry.request_stop(name)
        deadline = time.monotonic() + timeout
        while record.status.is_live and time.monotonic() < deadline:
            time.sleep(0.2)
            self.registry.mark_lost_pools(config.lost_after_seconds)
            record = self.registry.pool_by_id(record.id)
        if record.status.is_live:
            raise GpugeekError(f"pool '{name}' did not stop within {timeout:.0f} s; its owner ({record.owner}) may be busy")
        return record

    def stop_all(self, reason: str = "stopped by the user") -> list[str]:
        names = [p.name for p in self.pools()]
        for name in names:
            self.stop(name, reason)
        return names

    def _stop_owned(self, pool: Pool, reason: str) -> None:
        record = self.registry.pool_by_id(pool.id)
        if record.status.is_live:
            self.registry.set_pool_status(pool.id, PoolStatus.STOPPING)
        self._forget(pool.name)
        for hook in list(self.before_stop_hooks):  # e.g. checkpoint and end the running job first
            try:
                hook(self, pool, reason)
            except Exception as e:
                log.warning("before-stop hook %s failed for pool %s: %s", getattr(hook, "__name__", hook), pool.name, e)
        try:
            pool.running.close()
            final, why = PoolStatus.STOPPED, reason
        except Exception as e:
            final, why = PoolStatus.STOPPED, f"{reason}; closing reported {type(e).__name__}: {e}"
            log.warning("pool %s: error while closing: %s", pool.name, e)
        if self.registry.pool_by_id(pool.id).status.is_live:
            self.registry.set_pool_status(pool.id, final, reason=why)
        for callback in list(self.on_stopped):
            try:
                callback(pool)
            except Exception as e:
                log.warning("on_stopped callback failed for pool %s: %s", pool.name, e)

    def _forget(self, name: str) -> None:
        with self._lock:
            self._pools.pop(name, None)
            self._trackers.pop(name, None)
            if self._current == name:
                self._current = None

    def shutdown(self) -> None:
        """Stop every pool this process owns (at interpreter exit)."""
        self._stop_event.set()
        for pool in self.pools():
            try:
                if pool.owned:
                    self._stop_owned(pool, "its owner exited")
                else:
                    pool.running.close(timeout=5)
            except Exception as e:
                log.warning("pool %s: could not stop cleanly at exit: %s", pool.name, e)

    # -- heartbeat ---------------------------------------------------------------------------------
    def _ensure_heartbeat(self) -> None:
        with self._lock:
            if self._heartbeat_thread is None or not self._heartbeat_thread.is_alive():
                self._stop_event.clear()
                self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, name="gpugeek-heartbeat", daemon=True)
                self._heartbeat_thread.start()

    def _heartbeat_loop(self) -> None:
        period = get_config().heartbeat_seconds
        while not self._stop_event.wait(period):
            try:
                self.heartbeat_once()
            except Exception as e:  # keep beating; one failed beat is logged, not fatal
                log.warning("heartbeat failed: %s", e)

    def heartbeat_once(self) -> None:
        owned = [p for p in self.pools() if p.owned]
        stop_requested = self.registry.heartbeat([p.id for p in owned])
        for pool in owned:
            if stop_requested.get(pool.id):
                self._stop_owned(pool, "stop requested from another process")
                continue
            self._sync_workers(pool.name)
            for hook in list(self.heartbeat_hooks):
                try:
                    hook(self, pool)
                except Exception as e:
                    log.warning("heartbeat hook %s failed for pool %s: %s", getattr(hook, "__name__", hook), pool.name, e)

    def _sync_workers(self, name: str) -> None:
        with self._lock:
            tracker = self._trackers.get(name)
        if tracker is None:
            return
        client = tracker.pool.client
        try:
            workers = client.scheduler_info(n_workers=-1).get("workers", {})
        except Exception as e:
            log.info("pool %s: scheduler did not answer (%s)", name, e)
            return
        new = [a for a in workers if a not in tracker.open_intervals]
        pids: dict[str, int] = {}
        if new:
            try:
                pids = client.run(os.getpid, workers=new, on_error="ignore")
            except Exception as e:
                log.debug("pool %s: could not read worker pids: %s", name, e)
        tracker.sync(workers, pids)


_manager: PoolManager | None = None
_manager_lock = threading.Lock()


def _refuse_inside_a_reimported_main() -> None:
    """A child process that multiprocessing is preparing re-runs its parent's ``__main__``; a launch
    there would start a pool per child. Local pools never get there (their workers skip that step,
    see :mod:`.worker_origin`); a program's own spawn-started children, or a platform without the
    forkserver method (Windows), still can: fail at once, naming the fix."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise PoolStartError(
            "a pool cannot be launched while multiprocessing re-runs the main script in a child process; "
            "put the launch under `if __name__ == \"__main__\":`"
        )


def create_pool_manager(registry: Registry | None = None, owner: str | None = None) -> PoolManager:
    """A pool manager with the standard hooks, the same in a kernel, a script and the server."""
    from ..cost.guards import install_cost_hooks
    from ..jobs import end_jobs_before_stop
    from .kubernetes import record_disruptions

    manager = PoolManager(registry=registry, owner=owner)
    install_cost_hooks(manager)  # utilization samples, budget and idle-shutdown watchers
    manager.heartbeat_hooks.append(record_disruptions)  # preempted pods of kubernetes pools (no-op otherwise)
    manager.before_stop_hooks.append(end_jobs_before_stop)  # a running job ends, with the reason, first
    return manager


def get_pool_manager() -> PoolManager:
    """This process's pool manager."""
    global _manager
    with _manager_lock:
        if _manager is None:
            _manager = create_pool_manager()
        return _manager
