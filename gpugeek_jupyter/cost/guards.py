"""Budget and idle-shutdown watchers, run as the pool manager's housekeeping.

``install_cost_hooks(manager)`` registers one :class:`CostWatch` plugin, named ``gpugeek-cost``
(``get_pool_manager()`` does it for every process). Each heartbeat period, for each pool this process
owns, on that pool's housekeeping thread (never on the manager's liveness beat):

1. :class:`~gpugeek_jupyter.cost.usage.UtilizationRecorder` writes a utilization sample from the
   telemetry this process has collected (no call to the workers; without telemetry, no samples);
2. :class:`BudgetGuard`: at 80 % of ``--budget`` it records a ``budget-warning`` event and posts
   one notice (the plugins' ``notice`` hook); at 100 % it records ``budget-stop`` and stops the pool.
   The stop runs the plugins' ``before_stop`` hook first (the jobs module ends the running job there, even
   one that ignores signals, and records it as cancelled with the reason). Spend can pass the
   budget by at most one heartbeat's worth (``GpugeekConfig.heartbeat_seconds`` x USD per hour);
3. :class:`IdleGuard`: a pool with no job pending or running whose utilization stayed under 5 %
   for ``--idle-timeout`` minutes (default ``GpugeekConfig.idle_timeout_minutes``; 0 = never)
   records ``idle-stop``, stops itself and posts a notice. It needs telemetry: with
   ``telemetry_period_seconds <= 0`` there are no samples and a pool is never seen idle.

State lives in the registry (events, samples), so a watcher decides the same way after a restart.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..config import get_config
from ..pools._plugin import PoolLifecyclePlugin
from .ledger import format_usd, idle_since, pool_cost
from .usage import UtilizationRecorder

if TYPE_CHECKING:
    from ..pools import Pool, PoolManager

log = logging.getLogger(__name__)

BUDGET_WARNING_FRACTION = 0.8
IDLE_UTILIZATION = 0.05  # under 5 % is idle


def stop_for(manager: PoolManager, pool: Pool, kind: str, message: str) -> None:
    """Stop an owned pool because of ``kind`` (budget-stop, idle-stop), recording why everywhere.

    The event is written first, so the reason is durable even if stopping fails half-way. The
    running job hears the reason through the pool's before-stop event and ends ``cancelled`` with it
    (its agent writes that); a job row still open when the pool ends is closed by the stop.
    """
    manager.registry.add_event(pool.id, kind, message)
    manager.stop(pool.name, reason=message)
    manager.post_notice(pool, kind, message)


class BudgetGuard:
    """Warns once at 80 % of a pool's budget and stops the pool at 100 %."""

    def __init__(self) -> None:
        self._warned: set[int] = set()

    def _already_warned(self, manager: PoolManager, pool_id: int) -> bool:
        if pool_id not in self._warned and any(e["kind"] == "budget-warning" for e in manager.registry.events(pool_id)):
            self._warned.add(pool_id)
        return pool_id in self._warned

    def __call__(self, manager: PoolManager, pool: Pool) -> bool:
        """Returns True when it stopped the pool."""
        budget = pool.spec.budget
        if not budget or budget <= 0:  # None or 0: no budget
            return False
        spent = pool_cost(manager.registry, pool.id, include_idle=False).total_usd
        if spent >= BUDGET_WARNING_FRACTION * budget and not self._already_warned(manager, pool.id):
            message = (
                f"pool '{pool.name}' has spent {format_usd(spent)} of its {format_usd(budget)} budget "
                f"({spent / budget:.0%}); it will be stopped at 100%"
            )
            manager.registry.add_event(pool.id, "budget-warning", message)
            self._warned.add(pool.id)
            manager.post_notice(pool, "budget-warning", message)
        if spent >= budget:
            stop_for(
                manager,
                pool,
                "budget-stop",
                f"pool '{pool.name}' spent its budget ({format_usd(spent)} of {format_usd(budget)}) and was stopped",
            )
            return True
        return False


class IdleGuard:
    """Stops a pool that had no job and low utilization for its idle timeout."""

    def __call__(self, manager: PoolManager, pool: Pool) -> bool:
        """Returns True when it stopped the pool."""
        config = get_config()
        minutes = pool.spec.idle_timeout if pool.spec.idle_timeout is not None else config.idle_timeout_minutes
        if not minutes or minutes <= 0:
            return False
        timeout = minutes * 60.0
        now = manager.registry.clock()
        stale_after = max(3 * config.heartbeat_seconds, 5.0)
        since = idle_since(manager.registry, pool.id, now, IDLE_UTILIZATION, timeout, stale_after)
        if since is None or now - since < timeout:
            return False
        what = "CPU" if pool.spec.gpu_type == "cpu" else "GPU"
        stop_for(
            manager,
            pool,
            "idle-stop",
            f"pool '{pool.name}' stopped itself: no job and {what} utilization under {IDLE_UTILIZATION:.0%} "
            f"for {_minutes(now - since)} (idle timeout {_minutes(timeout)})",
        )
        return True


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"


class CostWatch(PoolLifecyclePlugin):
    """The cost plugin's ``heartbeat`` hook: sample utilization, then check the budget, then idleness."""

    name = "gpugeek-cost"

    def __init__(self) -> None:
        self.recorder = UtilizationRecorder()
        self.budget = BudgetGuard()
        self.idle = IdleGuard()

    def heartbeat(self, manager: PoolManager, pool: Pool) -> None:
        """One period's cost housekeeping for ``pool``."""
        try:
            self.recorder(manager, pool)
        except Exception as e:  # no sample this beat; the budget must still be checked
            log.info("pool %s: no utilization sample this beat: %s", pool.name, e)
        if self.budget(manager, pool) or self.idle(manager, pool):
            self.recorder.forget(pool.id)


def install_cost_hooks(manager: PoolManager) -> CostWatch:
    """Register the cost watchers with ``manager`` as the ``gpugeek-cost`` plugin (replacing any
    earlier one, so they run once per pool whatever calls this); returns the :class:`CostWatch`."""
    watch = CostWatch()
    manager.register_plugin(watch, name=CostWatch.name)
    return watch
