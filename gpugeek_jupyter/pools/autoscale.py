"""Autoscaling per worker group, on dask's adaptive machinery (``distributed.deploy.Adaptive``).

The rule, the same on every backend:

- **up**: when more than ``pending_threshold`` (10) tasks wait for a worker, add ``step`` (2)
  workers to the group, up to ``maximum``; not again until the workers asked for have arrived;
- **down**: a worker of the group that has run nothing for ``idle_cooldown`` seconds, and no
  scale-up in the last ``idle_cooldown`` seconds, is retired (gracefully: its data moves first),
  down to ``minimum``.

Each group gets its own :class:`GroupAdaptive`, so a pool's spot and on-demand groups scale
separately (the operator's own ``DaskAutoscaler`` only scales a cluster's default group). A group is
anything with the :class:`WorkerGroup` methods: :class:`SpecClusterGroup` for dask's ``SpecCluster``
family (``LocalCluster``), ``KubernetesWorkerGroup`` in :mod:`.kubernetes` for the operator.

>>> from distributed import LocalCluster                              # doctest: +SKIP
>>> cluster = LocalCluster(n_workers=0, dashboard_address=":0")       # doctest: +SKIP
>>> [adaptive] = adapt_groups(cluster, [SpecClusterGroup(cluster, "burst")],
...                           AutoscalePolicy(maximum=8))               # doctest: +SKIP
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from distributed.deploy.adaptive import Adaptive
from distributed.protocol.pickle import dumps

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
class Decision:
    """What the rule wants: a group size, and which idle workers to retire to get there."""

    target: int
    close: tuple[str, ...] = ()
    reason: str = "steady"


def decide(
    policy: AutoscalePolicy,
    *,
    now: float,
    pending: int,
    planned: int,
    arriving: int,
    idle_since: dict[str, float],
    last_scale_up: float | None,
) -> Decision:
    """The rule as a pure function of what the scheduler and the group report.

    ``planned``: workers the group has asked for; ``arriving``: of those, not yet connected;
    ``idle_since``: connected workers of the group that run nothing, and since when.
    """
    if planned < policy.minimum:
        return Decision(policy.minimum, reason=f"below the minimum of {policy.minimum}")
    if pending > policy.pending_threshold and planned < policy.maximum and arriving == 0:
        return Decision(min(policy.maximum, planned + policy.step), reason=f"{pending} tasks pending")
    recently_scaled = last_scale_up is not None and now - last_scale_up < policy.idle_cooldown
    if pending or recently_scaled:
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


class GroupAdaptive(Adaptive):
    """dask's ``Adaptive`` narrowed to one worker group and driven by :func:`decide`."""

    def __init__(
        self,
        cluster: Any,
        group: WorkerGroup,
        policy: AutoscalePolicy,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.group = group
        self.policy = policy
        self.clock = clock
        self.idle_since: dict[str, float] = {}
        self.last_scale_up: float | None = None
        self.last_decision = Decision(0)
        self._probe = dumps(_scheduler_probe())
        self._to_close: tuple[str, ...] = ()
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

    async def target(self) -> int:
        await self.group.refresh()
        response = await self.scheduler.run_function(function=self._probe, args=dumps(()), kwargs=dumps({}), wait=True)
        if response.get("status") != "OK":
            raise RuntimeError(f"autoscaler probe failed on the scheduler: {response.get('exception')!r}")
        snapshot = response["result"]
        now = self.clock()
        mine = {name: n for name, n in snapshot["processing"] if self.group.owns(name)}
        for name, n in mine.items():
            if n:
                self.idle_since.pop(name, None)
            else:
                self.idle_since.setdefault(name, now)
        for name in set(self.idle_since) - set(mine):
            del self.idle_since[name]
        planned = self.plan
        decision = decide(
            self.policy,
            now=now,
            pending=int(snapshot["pending"]),
            planned=len(planned),
            arriving=len(planned - set(mine)),
            idle_since=self.idle_since,
            last_scale_up=self.last_scale_up,
        )
        if decision.target != len(planned):
            log.info(
                "autoscale %s: %d -> %d workers (%s)", self.group.name, len(planned), decision.target, decision.reason
            )
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
) -> list[GroupAdaptive]:
    """Start one :class:`GroupAdaptive` per group; stop them with ``adaptive.stop()``."""
    policies = policy if isinstance(policy, GroupPolicies) else GroupPolicies(policy or AutoscalePolicy())
    return [GroupAdaptive(cluster, group, policies.for_group(group.name)) for group in groups]
