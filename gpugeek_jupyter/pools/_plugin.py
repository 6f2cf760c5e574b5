"""``PoolLifecyclePlugin``: the one way to extend a :class:`~gpugeek_jupyter.pools.PoolManager`.

Modelled on dask's ``Client.register_plugin(plugin, name=...)``: an extension is an object with
named, optional hooks, registered under a name; registering the same name again replaces it, and
``unregister_plugin(name)`` removes it. A hook that raises is logged with the plugin's name and
never stops the manager or the other plugins.

>>> class PrintNotices(PoolLifecyclePlugin):               # doctest: +SKIP
...     def notice(self, manager, pool, kind, message):
...         print(message)
>>> get_pool_manager().register_plugin(PrintNotices(), name="print-notices")   # doctest: +SKIP

Hooks (each optional; the base class's do nothing), with the thread each runs on:

- ``ready(manager, pool)``: a pool this process launched has its workers and is about to be
  marked ready (telemetry starts its samplers here), on the launching thread.
- ``heartbeat(manager, pool)``: housekeeping of one owned, ready pool, once per
  ``GpugeekConfig.heartbeat_seconds``, on that pool's housekeeping thread (never on the
  liveness beat). It should finish within ``manager.housekeeping_time_left()`` seconds and pass
  that as the timeout of any dask or network call: the pool's next housekeeping is skipped while
  this one runs, and plugins after it are skipped once the deadline has passed.
- ``before_stop(manager, pool, reason)``: an owned pool is about to lose its workers, whoever
  stopped it (the user, budget, idle timeout, another process); the place to checkpoint and end
  the running job. It may block, bounded by its own timeout, on the thread doing the stop.
- ``stopped(manager, record)``: an owned pool has stopped; ``record`` is its final registry row.
- ``notice(manager, pool, kind, message)``: the core has something to tell the user (budget at
  80 %, budget spent, idle shutdown); adapters (magics, widgets) show it, the core never prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store import PoolRecord
    from ._manager import PoolManager
    from ._pool import Pool

HOOKS = ("ready", "heartbeat", "before_stop", "stopped", "notice")


class PoolLifecyclePlugin:
    """Base class of pool-manager plugins: override the hooks you need (see the module docstring).

    ``name`` is the name :meth:`PoolManager.register_plugin` uses when it is given none.
    """

    name: str | None = None

    def ready(self, manager: PoolManager, pool: Pool) -> None:
        """``pool``, launched by this process, has its workers; it is marked ready after this."""

    def heartbeat(self, manager: PoolManager, pool: Pool) -> None:
        """Housekeeping for ``pool``, once per heartbeat period, within the housekeeping deadline."""

    def before_stop(self, manager: PoolManager, pool: Pool, reason: str) -> None:
        """``pool``'s workers are about to be shut down because of ``reason``."""

    def stopped(self, manager: PoolManager, record: PoolRecord) -> None:
        """An owned pool has stopped; ``record`` is its final registry row."""

    def notice(self, manager: PoolManager, pool: Pool, kind: str, message: str) -> None:
        """Tell the user ``message`` (``kind``: budget-warning, budget-stop, idle-stop, ...)."""


def plugin_name(plugin: object, name: str | None) -> str:
    """The name ``plugin`` is registered under: ``name``, else its ``name`` attribute, else its class."""
    chosen = name or getattr(plugin, "name", None) or f"{type(plugin).__module__}.{type(plugin).__qualname__}"
    if not isinstance(chosen, str):
        raise TypeError(f"a plugin name must be a string, got {chosen!r} (e.g. name='budget-watch')")
    return chosen


def implemented_hooks(plugin: object) -> list[str]:
    """The hooks ``plugin`` has: those of :data:`HOOKS` it defines (a subclass or a duck-typed object)."""
    return [hook for hook in HOOKS if callable(getattr(plugin, hook, None))]
