"""``PoolManager``: launches, tracks and stops this process's pools, and keeps the registry true.

One manager per process. A liveness beat renews the heartbeat of every pool it owns and reads stop
requests that other processes (the server, another kernel) write into the registry; housekeeping,
apart from it, opens and closes worker intervals as workers come and go (cost is computed from
them) and runs the plugins' ``heartbeat`` hooks (cost watchers, preemption records). See
:class:`PoolManager` for the threads, :mod:`._plugin` for the hooks.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

from ..config import get_config
from ..dashboards import browser_link
from ..errors import ConflictError, GpugeekError, NotFoundError, PoolStartError
from ..interrupts import outside_imports
from ..logs import set_library_log_level
from ..polling import poll_until
from ..pricing import prices_in_force
from ..spec import PoolSpec
from ..store import PoolRecord, PoolStatus, Registry, get_registry
from ._backend import Backend, Outliving, ProgressCallback, RunningCluster
from ._backends import backend_for
from ._plugin import HOOKS, PoolLifecyclePlugin, implemented_hooks, plugin_name
from ._pool import Pool
from .credentials import (
    PoolCredentials,
    connection_security,
    create_pool_credentials,
    keep_pool_credentials,
    prune_pool_credentials,
    remove_pool_credentials,
)
from .dashboard_socket import prepare_dashboard_socket, prune_dashboard_sockets, remove_dashboard_socket
from .scheduler_workers import connected_workers
from .scratch import remove_process_folder_at_exit

log = logging.getLogger(__name__)

HOUSEKEEPING_MIN_TIMEOUT_S = 10.0
# threads that run housekeeping tasks: a pool stuck in a plugin holds one, the other pools use the rest
HOUSEKEEPING_WORKERS = 4


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
            self.pricing[address] = self.pool.pricing_of(str(name), index=len(self.open_intervals))
            self.open_intervals[address] = self.registry.open_worker_interval(
                self.pool.id,
                worker_name=str(name),
                pricing=self.pricing[address],
                address=address,
                host=info.get("host"),
                pid=(pids or {}).get(address),
            )


class PoolManager:
    """Launches, tracks and stops this process's pools, and keeps their registry rows alive and true.

    Liveness is kept apart from housekeeping, as Kubernetes keeps node leases apart from node
    status, so that no slow pool can make a live one look dead to another process:

    - the **liveness beat** (thread ``gpugeek-liveness``) renews, every
      ``GpugeekConfig.heartbeat_seconds``, the heartbeat of every pool this process keeps alive
      (starting, ready or stopping) in one registry write, and reads stop requests. It never talks
      to dask; a stop request it reads is carried out on a thread of its own (``gpugeek-stop-NAME``);
    - **housekeeping** (thread ``gpugeek-housekeeping``) submits, once per period, one task per ready
      owned pool to a pool of :data:`HOUSEKEEPING_WORKERS` threads (``gpugeek-housekeeping-task``,
      made once and reused): worker intervals first, then every plugin's ``heartbeat`` hook, within
      :attr:`housekeeping_timeout` seconds. A pool whose previous task has not finished is skipped
      for the period (logged once), so one slow pool delays neither the others nor the beat.

    Extensions (cost watchers, job ending, notices, cards) are :class:`PoolLifecyclePlugin`\\ s,
    see :meth:`register_plugin`.
    """

    def __init__(self, registry: Registry | None = None, owner: str | None = None) -> None:
        self.registry = registry or get_registry()
        self.owner = owner or f"pid {os.getpid()}"
        # set by the user's agent: its pools that can outlive it do (a kept Slurm pool's scheduler
        # runs in a keeper process), and this command brings an agent back when it dies
        self.restart_command: tuple[str, ...] | None = None
        self.heartbeat_seconds = get_config().heartbeat_seconds
        # a task's deadline: long enough for a utilization sample's 5 s client.run, and a few periods
        self.housekeeping_timeout = max(HOUSEKEEPING_MIN_TIMEOUT_S, 5 * self.heartbeat_seconds)
        self._pools: dict[str, Pool] = {}
        self._trackers: dict[str, _WorkerTracker] = {}
        self._current: str | None = None
        self._lock = threading.RLock()
        self._plugins: dict[str, PoolLifecyclePlugin] = {}
        self._plugin_backend: dict[str, str | None] = {}  # plugin name -> the backend whose pools it serves (None: all)
        self._backends_with_plugins: set[str] = set()  # backends whose own plugins are registered
        # called with each spec before anything of a launch starts; one raises to refuse it (quotas)
        self.admission_checks: list[Callable[[PoolSpec], None]] = []
        self._kept_alive: set[int] = set()  # ids of owned pools not yet final: the liveness beat renews them
        self._stopping: dict[int, threading.Event] = {}  # pool id -> set once its stop has finished
        self._stop_threads: dict[int, threading.Thread] = {}
        self._housekeeping: dict[int, tuple[Future[None], float]] = {}  # pool id -> (task, monotonic submit)
        self._executor: Executor | None = None  # runs the housekeeping tasks, made by _ensure_threads
        self._overdue: set[int] = set()  # pools whose skip or late finish was logged, until they catch up
        self._task = threading.local()  # the deadline of the housekeeping task on this thread
        self._threads: list[threading.Thread] = []
        self._stop_event = threading.Event()
        remove_process_folder_at_exit()  # registered first, so it runs after this shutdown
        atexit.register(self.shutdown)

    # -- plugins ---------------------------------------------------------------------------------
    def register_plugin(self, plugin: PoolLifecyclePlugin, name: str | None = None, backend: str | None = None) -> str:
        """Add ``plugin`` under ``name`` (default: its ``name`` attribute, else its class); returns the name.
        With ``backend``, its hooks run for that backend's pools only (a backend's own plugins,
        :meth:`backend`).

        Registering a name again replaces that plugin, so a plugin is never installed twice:

        >>> manager.register_plugin(BudgetAlarm(), name="budget-alarm")    # doctest: +SKIP
        'budget-alarm'
        >>> manager.unregister_plugin("budget-alarm")                      # doctest: +SKIP
        """
        if not implemented_hooks(plugin):
            raise TypeError(
                f"{plugin!r} has none of the hooks {', '.join(HOOKS)}; subclass PoolLifecyclePlugin and "
                f"override one (e.g. def notice(self, manager, pool, kind, message): ...)"
            )
        chosen = plugin_name(plugin, name)
        with self._lock:
            self._plugins[chosen] = plugin
            self._plugin_backend[chosen] = backend
        return chosen

    def unregister_plugin(self, name: str) -> PoolLifecyclePlugin | None:
        """Remove the plugin registered as ``name``; returns it, or None when there was none."""
        with self._lock:
            self._plugin_backend.pop(name, None)
            return self._plugins.pop(name, None)

    @property
    def plugins(self) -> dict[str, PoolLifecyclePlugin]:
        """The registered plugins by name, in the order their hooks run (a copy)."""
        with self._lock:
            return dict(self._plugins)

    def plugins_for(self, backend: str) -> dict[str, PoolLifecyclePlugin]:
        """The plugins whose hooks run for a pool of ``backend``: those of every pool and its own."""
        with self._lock:
            return {n: p for n, p in self._plugins.items() if self._plugin_backend.get(n) in (None, backend)}

    def backend(self, name: str) -> Backend:
        """The backend ``name`` (``pools/_backends.py``), its own lifecycle plugins registered for its
        pools the first time (``lifecycle_plugins()``, e.g. Slurm's job watcher)."""
        backend = backend_for(name)
        with self._lock:
            first = name not in self._backends_with_plugins
            self._backends_with_plugins.add(name)
        if first:
            for plugin in getattr(backend, "lifecycle_plugins", list)():
                self.register_plugin(plugin, backend=name)
        return backend

    def _dispatch(self, hook: str, pool: Pool, *args: Any) -> None:
        """Call ``hook`` of ``pool`` on every plugin that has it and serves the pool's backend; a
        failing one is logged with its name."""
        for name, plugin in self.plugins_for(pool.spec.backend).items():
            self._call_hook(name, plugin, hook, *args, pool_name=pool.name)

    def _call_hook(self, name: str, plugin: PoolLifecyclePlugin, hook: str, *args: Any, pool_name: str = "") -> None:
        method = getattr(plugin, hook, None)
        if method is None:
            return
        try:
            method(self, *args)
        except Exception as e:  # one plugin's failure must not cost the pool, or the other plugins, anything
            log.warning(
                "plugin %r: %s hook failed for pool %s: %s: %s",
                name,
                hook,
                pool_name,
                type(e).__name__,
                e,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )

    def post_notice(self, pool: Pool, kind: str, message: str) -> None:
        """Hand ``message`` to every plugin's ``notice`` hook; a failing one is logged."""
        log.info("pool %s: %s", pool.name, message)
        self._dispatch("notice", pool, pool, kind, message)

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
            raise ConflictError.pool_name_taken(name)

    @outside_imports  # a launch imports lazily while other threads import
    def launch(self, spec: PoolSpec, on_progress: ProgressCallback | None = None, reconnect: bool = False) -> Pool:
        """Start a pool for ``spec``, register it and make it the current pool.

        ``reconnect``: the pool's cluster still runs (a Kubernetes DaskCluster whose owner died):
        connect to it again under a new record, with its own credentials, instead of creating it."""
        _refuse_inside_a_reimported_main()
        backend = self.backend(spec.backend)
        backend.preflight(spec)
        for admit in list(self.admission_checks):
            admit(spec)
        config = get_config()
        self.registry.mark_lost_pools(config.lost_after_seconds)  # frees names held by dead kernels
        # From the row on, everything is inside the clean-up's reach: an interrupt at any instant
        # (while the row is written, 0.2 s into the launch, or after the cluster came up) leaves the
        # row failed, the name free and no cluster running.
        running: RunningCluster | None = None
        record: PoolRecord | None = None
        try:
            record = self.registry.add_pool(
                spec.name,
                spec.backend,
                spec.to_dict(),
                prices_in_force(spec),
                owner=self.owner,
                namespace=spec.namespace,
            )
            with self._lock:
                self._kept_alive.add(record.id)  # a start can outlast lost_after: it is beaten from now on
            self._ensure_threads()
            set_library_log_level(config.log_level)  # dask's warnings about its own routine stay out of sight
            progress = on_progress or (lambda ready, total: None)
            if reconnect and getattr(backend, "can_reconnect", False):
                running = self._reconnect(backend, spec, record, progress, config.worker_start_timeout)
            else:
                running = self._start(backend, spec, record, progress, config.worker_start_timeout)
            pool = Pool(record, running, self, owned=True)
            tracker = _WorkerTracker(self.registry, pool)
            with self._lock:
                self._trackers[spec.name] = tracker
            self._sync_workers(spec.name, timeout=self.housekeeping_timeout)
            self._dispatch("ready", pool, pool)  # e.g. telemetry's samplers on every worker
            self.registry.set_pool_status(
                record.id,
                PoolStatus.READY,
                scheduler_address=running.scheduler_address,
                dashboard_link=running.dashboard_link,
            )
            # Only now may the liveness beat act on the pool's stop requests, and housekeeping see it: a
            # stop requested while it was starting is carried out on the next beat, not overwritten by READY.
            with self._lock:
                self._pools[spec.name] = pool
                self._current = spec.name
        except BaseException as e:
            record = record or self._written_before(spec.name)  # interrupted once the row was in
            if record is not None:
                self._abandon_start(record, spec.name, running, e)
            reason = _start_failure(e)
            if isinstance(e, GpugeekError | KeyboardInterrupt):
                raise
            raise PoolStartError(f"pool '{spec.name}' failed to start: {reason}") from e
        # a beat now, after the worker intervals opened: should this process die before the next
        # one, its pool's cost (which ends at the last heartbeat) still covers the workers it started
        self.registry.heartbeat([record.id])
        log.info("pool %s ready: %s", spec.name, running.dashboard_link)
        return pool

    def _written_before(self, name: str) -> PoolRecord | None:
        """The starting row of ``name`` this manager wrote, when a launch was interrupted after the
        registry had it but before the launch knew (None: no such row)."""
        try:
            row = self.registry.live_pool(name)
        except NotFoundError:
            return None
        return row if row.owner == self.owner and row.status is PoolStatus.STARTING else None

    def _abandon_start(
        self, record: PoolRecord, name: str, running: RunningCluster | None, error: BaseException
    ) -> None:
        """Undo a launch that did not finish: the cluster it started closed, the row failed."""
        with self._lock:
            self._kept_alive.discard(record.id)
            self._trackers.pop(name, None)
            made = self._pools.get(name)
            if made is not None and made.id == record.id:
                del self._pools[name]
                if self._current == name:
                    self._current = None
        try:
            if running is not None:
                running.close(timeout=10)
        except BaseException as e:  # the row must still say failed: the cluster is the one lost
            log.warning("pool %s: the cluster of an unfinished launch did not close: %s", name, e)
        finally:
            self.registry.set_pool_status(record.id, PoolStatus.FAILED, reason=_start_failure(error))
            remove_pool_credentials(self.registry, record.id)
            remove_dashboard_socket(self.registry, record.id)

    def _start(
        self, backend: Backend, spec: PoolSpec, record: PoolRecord, progress: ProgressCallback, timeout: float
    ) -> RunningCluster:
        return backend.start(
            spec,
            progress,
            timeout,
            credentials=self._credentials_for(backend, record),
            dashboard_socket=self._dashboard_socket_for(backend, record),
            **self._outliving_for(backend, record),
        )

    def _reconnect(
        self, backend: Any, spec: PoolSpec, record: PoolRecord, progress: ProgressCallback, timeout: float
    ) -> RunningCluster:
        """The running cluster of ``spec`` connected again under ``record``, with the credentials it
        was made with (from the backend: its pods hold them), when it has any."""
        credentials = None
        if getattr(backend, "uses_pool_credentials", False) and get_config().pool_tls:
            files = backend.existing_credentials(spec)
            if files:
                credentials = keep_pool_credentials(self.registry, record.id, files)
        running: RunningCluster = backend.reconnect(spec, progress, timeout, credentials=credentials)
        return running

    def _outliving_for(self, backend: Backend, record: PoolRecord) -> dict[str, Outliving]:
        """``outliving=`` for a backend whose pools can outlive this process, when this process is
        one whose pools should (the agent's); else no argument."""
        if self.restart_command is None or not getattr(backend, "can_outlive_owner", False):
            return {}
        return {"outliving": Outliving(record.id, self.restart_command)}

    def adopt(self, record: PoolRecord, running: RunningCluster) -> Pool:
        """Take back live pool ``record`` that outlived its owner (a kept Slurm pool whose agent
        died: ``running`` reaches its scheduler and stops it), as if this process had launched it."""
        self.registry.set_pool_owner(record.id, self.owner)
        self.backend(record.backend)  # its own plugins (Slurm's job watcher) follow the pool too
        pool = Pool(self.registry.pool_by_id(record.id), running, self, owned=True)
        with self._lock:
            self._kept_alive.add(record.id)
            self._trackers[pool.name] = _WorkerTracker(self.registry, pool)
            self._pools[pool.name] = pool
        self._ensure_threads()
        self._dispatch("ready", pool, pool)
        log.info("pool %s taken back from a previous owner", pool.name)
        return pool

    def _credentials_for(self, backend: Backend, record: PoolRecord) -> PoolCredentials | None:
        """The new pool's own TLS credentials, when its backend takes them and TLS is on; the
        credentials of pools that ended without removing theirs (a killed owner) go first."""
        if not (getattr(backend, "uses_pool_credentials", False) and get_config().pool_tls):
            return None
        prune_pool_credentials(self.registry)
        return create_pool_credentials(self.registry, record.id, record.name)

    def _dashboard_socket_for(self, backend: Backend, record: PoolRecord) -> Path | None:
        """Where the new pool's scheduler serves its dashboard, when it runs in this process (None:
        the backend's own dashboard, or none); the sockets of pools that ended without removing
        theirs go first."""
        if not getattr(backend, "serves_private_dashboard", False):
            return None
        prune_dashboard_sockets(self.registry)
        return prepare_dashboard_socket(self.registry, record.id)

    def attach(self, name: str) -> Pool:
        """A handle on a live pool that another process owns (its scheduler is reachable, and this
        process can read the pool's TLS credentials when it has any)."""
        from .private_http import PoolClient

        self.registry.mark_lost_pools(get_config().lost_after_seconds)
        record = self.registry.live_pool(name)
        if record.status is not PoolStatus.READY or not record.scheduler_address:
            raise ConflictError(f"pool '{name}' is {record.status.value}, not ready; try again when it is")
        security = connection_security(record, self.registry)
        try:
            client = PoolClient(
                record.scheduler_address,
                set_as_default=False,
                timeout=10,
                security=security,
                dashboard_link=browser_link(record.dashboard_link),
            )
        except (OSError, TimeoutError) as e:
            raise GpugeekError(
                f"pool '{name}' is registered but its scheduler {record.scheduler_address} does not answer: {e}"
            ) from e
        running = RunningCluster(
            client, record.scheduler_address, record.dashboard_link, owns_workers=False, security=client.security
        )
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
            self._stop_owned(pool, reason, timeout)
            return self.registry.pool_by_id(pool.id)
        if pool is not None:  # attached: detach, then ask the owner
            self._forget(name)
            pool.running.close()
        return self.request_stop(name, timeout)

    def request_stop(self, name: str, timeout: float = 60.0) -> PoolRecord:
        """Ask the owning process to stop ``name`` and wait until it has (or the owner is found dead)."""
        config = get_config()
        requested = self.registry.request_stop(name)
        if not requested.status.is_live:
            return requested

        def stopped() -> PoolRecord | None:
            self.registry.mark_lost_pools(config.lost_after_seconds)
            record = self.registry.pool_by_id(requested.id)
            return None if record.status.is_live else record

        def still_live() -> GpugeekError:
            return GpugeekError(
                f"pool '{name}' did not stop within {timeout:.0f} s; its owner ({requested.owner}) may be busy"
            )

        return poll_until(stopped, timeout=timeout, interval=0.2, what=f"pool '{name}' to stop", on_timeout=still_live)

    def stop_all(self, reason: str = "stopped by the user") -> list[str]:
        names = [p.name for p in self.pools()]
        for name in names:
            self.stop(name, reason)
        return names

    def _stop_owned(self, pool: Pool, reason: str, timeout: float = 60.0) -> None:
        """Stop an owned pool; a second caller (a stop request, a budget stop) waits for the first."""
        with self._lock:
            finished = self._stopping.get(pool.id)
            if finished is None:
                finished = self._stopping[pool.id] = threading.Event()
                self._forget(pool.name)  # no housekeeping, no second stop from now on
                first = True
            else:
                first = False
        if not first:
            if not finished.wait(timeout):
                log.warning("pool %s: still stopping after %.0f s (%s)", pool.name, timeout, reason)
            return
        try:
            self._stop_workers(pool, reason)
        finally:
            with self._lock:
                self._kept_alive.discard(pool.id)  # final now (or past saving): the beat lets it go
                del self._stopping[pool.id]
            finished.set()
        self._dispatch("stopped", pool, self.registry.pool_by_id(pool.id))

    def _stop_workers(self, pool: Pool, reason: str) -> None:
        # the liveness beat keeps renewing the pool meanwhile: a stop that checkpoints a job for a
        # minute must not see its pool marked lost
        if self.registry.pool_by_id(pool.id).status.is_live:
            self.registry.set_pool_status(pool.id, PoolStatus.STOPPING)
        self._dispatch("before_stop", pool, pool, reason)  # e.g. end the running job first
        try:
            pool.running.close()
            why = reason
        except Exception as e:
            why = f"{reason}; closing reported {type(e).__name__}: {e}"
            log.warning("pool %s: error while closing: %s", pool.name, e)
        if self.registry.pool_by_id(pool.id).status.is_live:
            self.registry.set_pool_status(pool.id, PoolStatus.STOPPED, reason=why)
        remove_pool_credentials(self.registry, pool.id)  # no process may reach the pool's address again
        remove_dashboard_socket(self.registry, pool.id)  # the scheduler removed it, unless it could not close

    def _stop_in_background(self, pool: Pool, reason: str) -> None:
        """Carry out a stop off the calling thread (the liveness beat must never wait on a pool)."""

        def stop() -> None:
            try:
                self._stop_owned(pool, reason)
            except Exception as e:
                log.warning("pool %s: could not stop (%s): %s: %s", pool.name, reason, type(e).__name__, e)

        with self._lock:
            running = self._stop_threads.get(pool.id)
            if running is not None and running.is_alive():
                return
            thread = self._stop_threads[pool.id] = threading.Thread(
                target=stop, name=f"gpugeek-stop-{pool.name}", daemon=True
            )
        thread.start()

    def _forget(self, name: str) -> None:
        with self._lock:
            self._pools.pop(name, None)
            self._trackers.pop(name, None)
            if self._current == name:
                self._current = None

    def shutdown(self) -> None:
        """Stop every pool this process owns (at interpreter exit)."""
        self._stop_event.set()
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)  # a task still running is bounded by its deadline
        for pool in self.pools():
            try:
                if pool.owned:
                    self._stop_owned(pool, "its owner exited")
                else:
                    pool.running.close(timeout=5)
            except Exception as e:
                log.warning("pool %s: could not stop cleanly at exit: %s", pool.name, e)
        with self._lock:
            in_flight = list(self._stop_threads.values())
        for thread in in_flight:  # stops requested by other processes just before exit: let them finish
            thread.join(timeout=60)

    # -- liveness ----------------------------------------------------------------------------------
    def _ensure_threads(self) -> None:
        with self._lock:
            if self._executor is None:  # first, so a launch right after a shutdown gets one too
                # distributed's executor, whose threads are daemons: a hook stuck past its deadline
                # never holds up the interpreter's exit (the standard one joins its threads at exit).
                # Lazy: distributed is heavy, and a manager that launches nothing never needs it.
                from distributed.threadpoolexecutor import ThreadPoolExecutor as DaemonThreadPoolExecutor

                self._executor = DaemonThreadPoolExecutor(
                    max_workers=HOUSEKEEPING_WORKERS, thread_name_prefix="gpugeek-housekeeping-task"
                )
            if self._threads and all(t.is_alive() for t in self._threads):
                return
            self._stop_event.clear()
            self._threads = [
                threading.Thread(
                    target=self._every_period,
                    args=(self.beat_once, "liveness beat"),
                    name="gpugeek-liveness",
                    daemon=True,
                ),
                threading.Thread(
                    target=self._every_period,
                    args=(self.schedule_housekeeping, "housekeeping"),
                    name="gpugeek-housekeeping",
                    daemon=True,
                ),
            ]
            for thread in self._threads:
                thread.start()

    def _every_period(self, step: Callable[[], None], what: str) -> None:
        period = self.heartbeat_seconds
        next_at = time.monotonic() + period
        # at a fixed rate: a slow step shortens the next wait instead of stretching the period
        while not self._stop_event.wait(max(0.0, next_at - time.monotonic())):
            next_at = max(next_at + period, time.monotonic())
            try:
                step()
            except Exception as e:  # keep going; one failed period is logged, not fatal
                log.warning("%s failed: %s: %s", what, type(e).__name__, e)

    def beat_once(self) -> None:
        """Renew the heartbeat of every pool this process keeps alive and hand over stop requests.

        One registry write, no dask: nothing a pool does can delay it.
        """
        with self._lock:
            kept = sorted(self._kept_alive)
            ready = {p.id: p for p in self._pools.values() if p.owned}
        if not kept:
            return
        stop_requested = self.registry.heartbeat(kept)
        for pool_id, requested in stop_requested.items():
            if requested and pool_id in ready:  # a starting pool stops once it is ready (see launch)
                self._stop_in_background(ready[pool_id], "stop requested from another process")

    # -- housekeeping ------------------------------------------------------------------------------
    def housekeeping_time_left(self) -> float:
        """Seconds left to the housekeeping task running on this thread (for ``heartbeat`` hooks,
        to bound their calls); :attr:`housekeeping_timeout` when called from anywhere else."""
        deadline = getattr(self._task, "deadline", None)
        return self.housekeeping_timeout if deadline is None else max(0.0, deadline - time.monotonic())

    def schedule_housekeeping(self) -> None:
        """Submit one housekeeping task per ready owned pool, skipping pools whose last one has not
        finished (queued or running), so at most one task per pool is ever waiting: a pool stuck in a
        hook holds one of the :data:`HOUSEKEEPING_WORKERS` threads and never another pool's task."""
        now = time.monotonic()
        with self._lock:
            owned = [p for p in self._pools.values() if p.owned]
            for gone in set(self._housekeeping) - {p.id for p in owned}:
                del self._housekeeping[gone]
        for pool in owned:
            previous = self._housekeeping.get(pool.id)
            if previous is not None and not previous[0].done():
                if pool.id not in self._overdue:  # a busy machine: the pool's lease is kept all the same
                    self._overdue.add(pool.id)
                    log.info(
                        "pool %s: housekeeping still running after %.1f s; skipping it until it ends",
                        pool.name,
                        now - previous[1],
                    )
                continue
            with self._lock:
                executor = self._executor
            if executor is None:
                return  # shut down meanwhile
            task = executor.submit(self._housekeep, pool, now + self.housekeeping_timeout)
            task.add_done_callback(functools.partial(_log_failed_housekeeping, pool.name))
            self._housekeeping[pool.id] = (task, now)

    def _housekeep(self, pool: Pool, deadline: float) -> None:
        """Worker intervals, then every plugin's ``heartbeat`` hook, for one pool, until ``deadline``."""
        self._task.deadline = deadline
        started = time.monotonic()
        try:
            self._sync_workers(pool.name, timeout=self.housekeeping_time_left())
            for name, plugin in self.plugins_for(pool.spec.backend).items():
                if not self._still_housekept(pool):
                    return  # stopped meanwhile (e.g. by the budget guard of an earlier plugin)
                if self.housekeeping_time_left() <= 0:
                    if pool.id not in self._overdue:
                        self._overdue.add(pool.id)
                        log.warning(
                            "pool %s: housekeeping passed its %.0f s deadline; plugin %r and later ones "
                            "wait for the next period",
                            pool.name,
                            self.housekeeping_timeout,
                            name,
                        )
                    return
                self._call_hook(name, plugin, "heartbeat", pool, pool_name=pool.name)
            took = time.monotonic() - started
            if pool.id in self._overdue and took < self.heartbeat_seconds:  # back to one task per period
                self._overdue.discard(pool.id)
                log.info("pool %s: housekeeping caught up (%.1f s this period)", pool.name, took)
        finally:
            self._task.deadline = None

    def _still_housekept(self, pool: Pool) -> bool:
        with self._lock:
            return self._pools.get(pool.name) is pool

    def _sync_workers(self, name: str, timeout: float) -> None:
        """Open and close worker intervals to match the scheduler's workers (dask calls bounded by ``timeout``)."""
        with self._lock:
            tracker = self._trackers.get(name)
        if tracker is None:
            return
        client = tracker.pool.client
        started = time.monotonic()
        try:
            workers = connected_workers(client, timeout=max(0.1, timeout))
        except Exception as e:
            log.info("pool %s: scheduler did not answer within %.1f s (%s: %s)", name, timeout, type(e).__name__, e)
            return
        new = [a for a in workers if a not in tracker.open_intervals]
        pids: dict[str, int] = {}
        if new:
            try:
                pids = client.run(
                    os.getpid,
                    workers=new,
                    on_error="ignore",
                    callback_timeout=max(0.1, timeout - (time.monotonic() - started)),
                )
            except Exception as e:  # the intervals open all the same, without a pid
                log.debug("pool %s: could not read worker pids: %s", name, e)
        with self._lock:
            if self._trackers.get(name) is not tracker:
                return  # stopped while we asked: its intervals are closed for good
        tracker.sync(workers, pids)


def _log_failed_housekeeping(pool_name: str, task: Future[None]) -> None:
    """A housekeeping task's unexpected error, which its future would otherwise keep to itself."""
    error = None if task.cancelled() else task.exception()
    if error is not None:
        log.warning("pool %s: housekeeping failed: %s: %s", pool_name, type(error).__name__, error)


def _refuse_inside_a_reimported_main() -> None:
    """A child process that multiprocessing is preparing re-runs its parent's ``__main__``; a launch
    there would start a pool per child. Local pools never get there (their workers skip that step,
    see :mod:`.worker_origin`); a program's own spawn-started children, or a platform without the
    forkserver method (Windows), still can: fail at once, naming the fix."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise PoolStartError(
            "a pool cannot be launched while multiprocessing re-runs the main script in a child process; "
            'put the launch under `if __name__ == "__main__":`'
        )


def _start_failure(error: BaseException) -> str:
    """How a launch that did not finish is recorded."""
    if isinstance(error, KeyboardInterrupt):
        return "interrupted while starting"
    return str(error) if isinstance(error, GpugeekError) else f"{type(error).__name__}: {error}"
