"""Autoscaling per worker group, on dask's adaptive machinery (``distributed.deploy.Adaptive``).

The rule, the same on every backend:

- **pending work** is the tasks that wait for a worker plus the ranks of the pool's queued jobs
  (each needs the pool's size in ranks, or as many as it names with ``--ranks``: the registry's
  ``ranks`` column of its ``queued`` row);
- **up**: when more than ``pending_threshold`` (10) are pending, add ``step`` (2) workers to the
  group, up to ``maximum``; not again until the workers asked for have arrived. While a job runs on
  a local or Slurm pool with fewer workers than its ``--count`` (a ``minimum`` below it), the pool
  grows back to that at once (the job waits for them);
- **busy**: while one of the pool's jobs runs (a ``running`` row) every worker of the pool is busy,
  whatever dask thinks (ranks run through the workers' ``run`` handlers, not as tasks), and its
  idle clock starts again: scaling down never retires a worker under a running job's rank;
- **down**: a worker of the group that has run nothing for ``idle_cooldown`` seconds, with nothing
  pending, no job running and no scale-up in the last ``idle_cooldown`` seconds, is retired
  (gracefully: its data moves first), down to ``minimum``.

Each group gets its own :class:`GroupAdaptive`, so a pool's spot and on-demand groups scale
separately (the operator's own ``DaskAutoscaler`` only scales a cluster's default group). A group is
anything with the :class:`WorkerGroup` methods: :class:`SpecClusterWorkers` (every worker of a local
or Slurm pool: dask's ``SpecCluster`` family, dask-jobqueue's ``SLURMCluster`` included),
:class:`SpecClusterGroup` for named groups inside one, ``KubernetesWorkerGroup`` in
:mod:`.kubernetes` for the operator. :func:`autoscale` picks the pool's groups by its backend:

>>> from gpugeek_jupyter.pools.autoscale import AutoscalePolicy, autoscale        # doctest: +SKIP
>>> scaling = autoscale(pool, AutoscalePolicy(minimum=1, maximum=8, pending_threshold=2))  # doctest: +SKIP
>>> scaling.stop()                                                              # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from distributed.deploy.adaptive import Adaptive
from distributed.protocol.pickle import dumps

from ..errors import GpugeekError
from ..store import JobStatus, PoolRecord, PoolStatus
from ._plugin import PoolLifecyclePlugin

if TYPE_CHECKING:
    from ._manager import PoolManager
    from ._pool import Pool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AutoscalePolicy:
    """The autoscaling rule's numbers, for one worker group."""

    pending_threshold: int = 10  # scale up when MORE than this many tasks wait for a worker
    step: int = 2  # workers added per scale-up
    idle_cooldown: float = 60.0  # seconds: idle time before a worker goes, and quiet time after a scale-up
    minimum: int = 0
    maximum: int = 8
    interval: float = 1.0  # seconds between checks

    def __post_init__(self) -> None:
        if self.step < 1 or self.minimum < 0 or self.maximum < self.minimum or self.pending_threshold < 0:
            raise ValueError(
                f"autoscale policy needs step >= 1 and 0 <= minimum <= maximum, got step={self.step}, "
                f"minimum={self.minimum}, maximum={self.maximum} (e.g. AutoscalePolicy(minimum=0, maximum=8))"
            )


@dataclass(frozen=True)
class QueueLoad:
    """What a pool's job queue holds, as the rule counts it (read from the registry's job rows)."""

    queued_ranks: int = 0  # ranks the pool's queued jobs need
    running: bool = False  # one of the pool's jobs runs: every worker of the pool is busy
    needed: int = 0  # workers the running job waits for in this group (its pool's --count; 0: unknown)


@dataclass(frozen=True)
class Decision:
    """What the rule wants: a group size, and which idle workers to retire to get there."""

    target: int
    close: tuple[str, ...] = ()
    reason: str = "steady"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def describe_pending(tasks: int, queued_ranks: int) -> str:
    """``3 pending: 1 task, 2 ranks of queued jobs``."""
    parts = [_plural(tasks, "task")] if tasks else []
    parts += [_plural(queued_ranks, "rank") + " of queued jobs"] if queued_ranks else []
    return f"{tasks + queued_ranks} pending" + (f": {', '.join(parts)}" if parts else "")


def decide(
    policy: AutoscalePolicy,
    *,
    now: float,
    pending: int,
    planned: int,
    arriving: int,
    idle_since: dict[str, float],
    last_scale_up: float | None,
    queued_ranks: int = 0,
    busy: bool = False,
    needed: int = 0,
) -> Decision:
    """The rule as a pure function of what the scheduler, the group and the pool's queue report.

    ``pending``: tasks waiting for a worker; ``planned``: workers the group has asked for;
    ``arriving``: of those, not yet connected; ``idle_since``: connected workers of the group that
    run nothing, and since when; ``queued_ranks``: ranks the pool's queued jobs need; ``busy``: a job
    of the pool runs (no worker is idle); ``needed``: workers that running job waits for.

    >>> decide(AutoscalePolicy(pending_threshold=1), now=0.0, pending=0, planned=1, arriving=0,
    ...        idle_since={}, last_scale_up=None, queued_ranks=2, busy=True).target
    3
    """
    floor = max(policy.minimum, min(needed, policy.maximum)) if busy else policy.minimum
    if planned < floor:
        why = (
            f"below the minimum of {policy.minimum}"
            if floor == policy.minimum
            else f"a running job waits for {_plural(floor, 'worker')}"
        )
        return Decision(floor, reason=why)
    waiting = pending + queued_ranks
    if waiting > policy.pending_threshold and planned < policy.maximum and arriving == 0:
        return Decision(min(policy.maximum, planned + policy.step), reason=describe_pending(pending, queued_ranks))
    if busy:
        return Decision(planned, reason="a job runs: every worker is busy")
    recently_scaled = last_scale_up is not None and now - last_scale_up < policy.idle_cooldown
    if waiting or recently_scaled:
        return Decision(planned)
    ready = sorted((since, name) for name, since in idle_since.items() if now - since >= policy.idle_cooldown)
    removable = max(0, planned - policy.minimum)
    close = tuple(name for _, name in ready[:removable])
    if close:
        return Decision(planned - len(close), close, reason=f"{len(close)} workers idle for {policy.idle_cooldown:g} s")
    return Decision(planned)


class WorkerGroup(Protocol):
    """One group of a cluster's workers, as the autoscaler sees it (names are dask worker names)."""

    name: str

    def owns(self, worker_name: str) -> bool: ...

    def requested(self) -> set[str]:
        """The workers asked for, connected or not (as of the last :meth:`refresh`)."""
        ...

    async def refresh(self) -> None:
        """Re-read what the group has asked for (called before each decision)."""
        ...

    async def scale_up(self, n: int) -> None:
        """Bring the group to ``n`` workers."""
        ...

    async def scale_down(self, worker_names: list[str]) -> None:
        """Remove these (already retired) workers for good."""
        ...


def _scheduler_probe() -> Callable[[Any], dict[str, Any]]:
    # Built in a closure so cloudpickle sends it by value: the scheduler (e.g. a stock dask image on
    # Kubernetes) need not have this package installed.
    def probe(dask_scheduler: Any) -> dict[str, Any]:
        pending = len(dask_scheduler.queued) + len(dask_scheduler.unrunnable)
        processing = []
        for ws in dask_scheduler.workers.values():
            pending += max(0, len(ws.processing) - ws.nthreads)
            processing.append([str(ws.name), len(ws.processing)])
        return {"pending": pending, "processing": processing}

    return probe


# reads the pool's queue (registry rows: blocking), on a thread of the adaptive's own
QueueReader = Callable[[], QueueLoad]


class GroupAdaptive(Adaptive):
    """dask's ``Adaptive`` narrowed to one worker group and driven by :func:`decide`.

    ``queue`` reads the pool's job queue (without it, only dask's tasks count and no job is seen).
    """

    def __init__(
        self,
        cluster: Any,
        group: WorkerGroup,
        policy: AutoscalePolicy,
        clock: Callable[[], float] = time.monotonic,
        queue: QueueReader | None = None,
    ) -> None:
        self.group = group
        self.policy = policy
        self.clock = clock
        self.queue = queue
        self.idle_since: dict[str, float] = {}
        self.last_scale_up: float | None = None
        self.last_decision = Decision(0)
        self.last_change: tuple[float, int, Decision] | None = None  # (when, size before, decision)
        self.last_pending = (0, 0)  # (tasks, queued ranks) at the last check
        self._probe = dumps(_scheduler_probe())
        self._to_close: tuple[str, ...] = ()
        # one thread: the registry's connections are per thread, so at most one is opened
        self._reader = (
            concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"gpugeek-autoscale-{group.name}")
            if queue is not None
            else None
        )
        super().__init__(
            cluster,
            interval=policy.interval,
            minimum=policy.minimum,
            maximum=policy.maximum,
            wait_count=1,  # the idle cooldown already debounces scale-down
        )

    # -- what AdaptiveCore reads --------------------------------------------------------------
    @property
    def plan(self) -> set[str]:  # type: ignore[override]
        return set(self.group.requested())

    @property
    def requested(self) -> set[str]:  # type: ignore[override]
        return set(self.group.requested())

    @property
    def observed(self) -> set[str]:  # type: ignore[override]
        workers = self.cluster.scheduler_info.get("workers", {}).values()
        return {str(w["name"]) for w in workers if self.group.owns(str(w["name"]))}

    async def read_queue(self) -> QueueLoad:
        """The pool's queue now; when it cannot be read, a job is taken to run (nothing is retired)."""
        if self.queue is None or self._reader is None:
            return QueueLoad()
        if self.state == "stopped":
            return QueueLoad(running=True)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._reader, self.queue)
        except Exception as e:
            log.warning("autoscale %s: could not read the pool's queue, holding its size: %s", self.group.name, e)
            return QueueLoad(running=True)

    async def target(self) -> int:
        await self.group.refresh()
        response = await self.scheduler.run_function(function=self._probe, args=dumps(()), kwargs=dumps({}), wait=True)
        if response.get("status") != "OK":
            raise RuntimeError(f"autoscaler probe failed on the scheduler: {response.get('exception')!r}")
        snapshot = response["result"]
        load = await self.read_queue()
        now = self.clock()
        mine = {name: n for name, n in snapshot["processing"] if self.group.owns(name)}
        for name, n in mine.items():
            if n or load.running:  # a rank is not a dask task: the scheduler sees its worker idle
                self.idle_since.pop(name, None)
            else:
                self.idle_since.setdefault(name, now)
        for name in set(self.idle_since) - set(mine):
            del self.idle_since[name]
        planned = self.plan
        pending = int(snapshot["pending"])
        decision = decide(
            self.policy,
            now=now,
            pending=pending,
            planned=len(planned),
            arriving=len(planned - set(mine)),
            idle_since=self.idle_since,
            last_scale_up=self.last_scale_up,
            queued_ranks=load.queued_ranks,
            busy=load.running,
            needed=load.needed,
        )
        if decision.target != len(planned):
            log.info(
                "autoscale %s: %d -> %d workers (%s)", self.group.name, len(planned), decision.target, decision.reason
            )
            self.last_change = (time.time(), len(planned), decision)
        self.last_pending = (pending, load.queued_ranks)
        self.last_decision = decision
        self._to_close = decision.close
        return decision.target

    async def workers_to_close(self, target: int) -> list[str]:
        return list(self._to_close)

    async def scale_up(self, n: int) -> None:  # type: ignore[override]  # dask annotates it oddly
        self.last_scale_up = self.clock()
        await self.group.scale_up(n)

    async def scale_down(self, workers: Iterable[str]) -> None:  # type: ignore[override]
        names = [str(w) for w in workers]
        if not names:
            return
        load = await self.read_queue()  # a job may have started since the decision
        if load.running or load.queued_ranks:
            log.info("autoscale %s: kept %s: a job runs or waits now", self.group.name, sorted(names))
            self.idle_since.clear()
            return
        # The scheduler refuses to retire a worker whose results no other worker can take; only the
        # workers it did retire are removed, so scaling down never loses a result a client holds.
        retired = await self.scheduler.retire_workers(names=names, remove=True, close_workers=True)
        gone = [str(info.get("name", address)) for address, info in (retired or {}).items()]
        if gone:
            await self.group.scale_down(gone)
        kept = sorted(set(names) - set(gone))
        if kept:
            log.info("autoscale %s: kept %s: they hold results no other worker can take", self.group.name, kept)
        for name in gone:
            self.idle_since.pop(name, None)

    def stop(self, reason: str = "unknown") -> None:
        super().stop(reason=reason)
        if self._reader is not None:
            self._reader.shutdown(wait=False)


class SpecClusterWorkers:
    """Every worker of a dask ``SpecCluster`` as one group (a local pool's ``LocalCluster``, a Slurm
    pool's ``SLURMCluster``), new ones named as the cluster names them (``3``; ``dev-3`` on Slurm),
    so that they take ranks and prices as the pool's first workers do.

    ``creating``: the context its new workers must be made in (a local pool's worker environment).
    """

    def __init__(
        self,
        cluster: Any,
        name: str = "workers",
        creating: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.cluster = cluster
        self.name = name
        self.creating = creating or contextlib.nullcontext

    def owns(self, worker_name: str) -> bool:
        return True

    def requested(self) -> set[str]:
        return {str(k) for k in self.cluster.worker_spec}

    async def refresh(self) -> None:
        """Nothing to do: ``worker_spec`` is always current."""

    async def scale_up(self, n: int) -> None:
        with self.creating():
            while len(self.cluster.worker_spec) < n:
                self.cluster.worker_spec.update(self.cluster.new_worker_spec())
            await self.cluster  # SpecCluster starts (or, on Slurm, submits) what its worker_spec lists

    async def scale_down(self, worker_names: list[str]) -> None:
        keys = {str(k): k for k in self.cluster.worker_spec}  # a LocalCluster's are ints, dask names strings
        for name in worker_names:
            if name in keys:
                del self.cluster.worker_spec[keys[name]]
        await self.cluster  # closes the workers (Slurm: cancels their jobs) no longer listed


class SpecClusterGroup:
    """A worker group inside a dask ``SpecCluster`` (``LocalCluster`` is one): workers ``<name>-<i>``.

    New workers copy ``worker_spec`` (default: the cluster's ``new_spec``).
    """

    def __init__(self, cluster: Any, name: str, worker_spec: dict[str, Any] | None = None) -> None:
        self.cluster = cluster
        self.name = name
        self.worker_spec = worker_spec or cluster.new_spec
        self._counter = 0

    def owns(self, worker_name: str) -> bool:
        return str(worker_name).startswith(f"{self.name}-")

    def requested(self) -> set[str]:
        return {str(k) for k in self.cluster.worker_spec if self.owns(str(k))}

    async def refresh(self) -> None:
        """Nothing to do: ``worker_spec`` is always current."""

    async def scale_up(self, n: int) -> None:
        while len(self.requested()) < n:
            self.cluster.worker_spec[f"{self.name}-{self._counter}"] = copy.deepcopy(self.worker_spec)
            self._counter += 1
        await self.cluster  # SpecCluster starts what its worker_spec lists

    async def scale_down(self, worker_names: list[str]) -> None:
        await self.cluster.scale_down([n for n in worker_names if self.owns(n)])


@dataclass
class GroupPolicies:
    """Policies by group name, with one for the groups not named."""

    default: AutoscalePolicy = field(default_factory=AutoscalePolicy)
    by_group: dict[str, AutoscalePolicy] = field(default_factory=dict)

    def for_group(self, name: str) -> AutoscalePolicy:
        return self.by_group.get(name, self.default)


def adapt_groups(
    cluster: Any,
    groups: Iterable[WorkerGroup],
    policy: AutoscalePolicy | GroupPolicies | None = None,
    queue: QueueReader | None = None,
) -> list[GroupAdaptive]:
    """Start one :class:`GroupAdaptive` per group; stop them with ``adaptive.stop()``. ``queue``
    reads the pool's job queue (:func:`pool_queue_reader`)."""
    policies = policy if isinstance(policy, GroupPolicies) else GroupPolicies(policy or AutoscalePolicy())
    return [GroupAdaptive(cluster, group, policies.for_group(group.name), queue=queue) for group in groups]


def pool_queue_reader(pool: Pool, needed: int = 0) -> QueueReader:
    """Reads ``pool``'s queue from its registry rows: the ranks of its queued jobs, whether one runs,
    and then that it waits for ``needed`` workers (a single-group pool: its ``--count``)."""
    registry, pool_id = pool.registry, pool.id

    def read() -> QueueLoad:
        jobs = registry.open_jobs(pool_id)
        running = any(job.status is JobStatus.RUNNING for job in jobs)
        queued = sum(max(1, job.ranks) for job in jobs if job.status is JobStatus.QUEUED)
        return QueueLoad(queued_ranks=queued, running=running, needed=needed if running else 0)

    return read


# -- a pool's autoscaling, by backend -----------------------------------------------------------------
class Autoscaling:
    """The autoscaling of one pool in this process: one :class:`GroupAdaptive` per worker group."""

    def __init__(self, pool_name: str, key: tuple[str, int], adaptives: list[GroupAdaptive]) -> None:
        self.pool_name = pool_name
        self.key = key
        self.adaptives = adaptives

    def __repr__(self) -> str:
        state = "on" if self.active else "stopped"
        return f"<Autoscaling of pool {self.pool_name!r} {state}: {'; '.join(self.rules())}>"

    @property
    def active(self) -> bool:
        return any(a.state in ("starting", "running") for a in self.adaptives)

    def stop(self, reason: str = "stopped by the user") -> None:
        """Stop scaling; the pool keeps the workers it has."""
        for adaptive in self.adaptives:
            adaptive.stop(reason=reason)
        with _active_lock:
            if _active.get(self.key) is self:
                del _active[self.key]

    def _labelled(self, texts: list[str]) -> list[str]:
        if len(self.adaptives) == 1:
            return texts
        return [f"{a.group.name}: {text}" for a, text in zip(self.adaptives, texts)]

    def rules(self) -> list[str]:
        """``> 10 pending adds 2, min 0, max 8, idle 60 s``, per group."""
        return self._labelled(
            [
                f"> {p.pending_threshold} pending adds {p.step}, min {p.minimum}, max {p.maximum}, idle {p.idle_cooldown:g} s"
                for p in (a.policy for a in self.adaptives)
            ]
        )

    def pending(self) -> list[str]:
        """``3 pending: 1 task, 2 ranks of queued jobs`` as of the last check, per group."""
        return self._labelled([describe_pending(*a.last_pending) for a in self.adaptives])

    def decisions(self, now: float | None = None) -> list[str]:
        """The last decision and the last change of size, per group."""
        now = time.time() if now is None else now
        texts = []
        for adaptive in self.adaptives:
            last = adaptive.last_decision  # its target: the group's size as of the last check
            text = _plural(last.target, "worker") + (f", {last.reason}" if last.reason != "steady" else "")
            if adaptive.last_change is not None:
                at, before, change = adaptive.last_change
                text += f"; last change {before} -> {change.target} ({change.reason}) {now - at:.0f} s ago"
            texts.append(text)
        return self._labelled(texts)


_active: dict[tuple[str, int], Autoscaling] = {}
_active_lock = threading.Lock()
PLUGIN_NAME = "gpugeek-autoscale"


def _key(registry_path: Any, pool_id: int) -> tuple[str, int]:
    return (str(registry_path), int(pool_id))


def autoscaling_of(record: PoolRecord | Pool, registry_path: Any) -> Autoscaling | None:
    """The autoscaling this process runs for the pool ``record`` of the registry at ``registry_path``
    (None: it runs none, or the pool is another process's)."""
    with _active_lock:
        found = _active.get(_key(registry_path, record.id))
    return found if found is not None and found.active else None


class _StopWithThePool(PoolLifecyclePlugin):
    """Stops a pool's autoscaling before its workers go (a scale-up during a stop would start new ones)."""

    name = PLUGIN_NAME

    def before_stop(self, manager: PoolManager, pool: Pool, reason: str) -> None:
        self._stop(manager, pool.id)

    def stopped(self, manager: PoolManager, record: PoolRecord) -> None:
        self._stop(manager, record.id)

    def _stop(self, manager: PoolManager, pool_id: int) -> None:
        with _active_lock:
            scaling = _active.get(_key(manager.registry.path, pool_id))
        if scaling is not None:
            scaling.stop(reason="the pool stops")


def _groups_of(pool: Pool) -> tuple[list[WorkerGroup], int]:
    """The worker groups of a local or Slurm pool (all its workers, one group), and the workers its
    jobs wait for."""
    spec = pool.spec
    if spec.backend == "local":
        from ..catalog import CPU
        from .local import worker_environment

        if spec.gpu_type != CPU:
            raise GpugeekError(
                f"pool '{pool.name}' is a local GPU pool: it has one worker per GPU it was given, and a new "
                f"worker would need a GPU of its own; autoscale local cpu pools, Slurm or Kubernetes pools"
            )
        return [SpecClusterWorkers(pool.cluster, creating=worker_environment)], spec.count
    return [SpecClusterWorkers(pool.cluster)], spec.count


def autoscale(pool: Pool, policy: AutoscalePolicy | GroupPolicies | None = None) -> Autoscaling:
    """Autoscale ``pool`` (launched by this process) by the rule of this module until it stops or
    ``.stop()`` is called; autoscaling it again replaces the policy.

    Local (cpu) and Slurm pools scale all their workers as one group (Slurm: one job per worker,
    submitted and cancelled); Kubernetes pools scale each worker group (``GroupPolicies`` by group
    name: ``default``, ``spot``). The pool's queued jobs count as pending work and its running job
    keeps every worker busy. ``%gpugeek_pools --detail`` shows the rule and its last decision.

    >>> scaling = autoscale(pool, AutoscalePolicy(minimum=1, maximum=8, pending_threshold=2,
    ...                                           step=2, idle_cooldown=120))       # doctest: +SKIP
    >>> scaling                                                                     # doctest: +SKIP
    <Autoscaling of pool 'dev' on: > 2 pending adds 2, min 1, max 8, idle 120 s>
    """
    backend = pool.spec.backend
    if not pool.owned or pool.cluster is None or backend == "address":
        raise GpugeekError(
            f"pool '{pool.name}' has no workers this process can add or remove "
            + (
                "(--backend address: a scheduler someone else runs)"
                if backend == "address"
                else "(another process launched it): autoscale it where it was launched"
            )
        )
    status = pool.status
    if status is not PoolStatus.READY:
        raise GpugeekError(f"pool '{pool.name}' is {status.value}: only a ready pool can be autoscaled")
    groups, needed = _groups_of(pool) if backend != "kubernetes" else ([], 0)  # refuses what cannot scale
    key = _key(pool.registry.path, pool.id)
    with _active_lock:
        previous = _active.pop(key, None)
    if previous is not None:
        previous.stop(reason="replaced by a new policy")
    pool._manager.register_plugin(_StopWithThePool())  # idempotent: one per manager, by name
    if backend == "kubernetes":  # its worker groups scale by the backend's own rule (KubernetesBackend.autoscale)
        adaptives = pool._manager.backend(backend).autoscale(pool, policy)  # type: ignore[attr-defined]
    else:
        adaptives = adapt_groups(pool.cluster, groups, policy, queue=pool_queue_reader(pool, needed=needed))
    scaling = Autoscaling(pool.name, key, adaptives)
    with _active_lock:
        _active[key] = scaling
    return scaling
