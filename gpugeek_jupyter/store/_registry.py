"""The registry object, and one per file per process."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from ._jobs import JobQueries
from ._lineage import LineageQueries
from ._migrations import migrate
from ._outbox import OutboxQueries
from ._pools import PoolQueries
from ._schedules import ScheduleQueries
from ._utilization import UtilizationQueries
from ._workers import WorkerQueries


class Registry(
    PoolQueries, WorkerQueries, JobQueries, UtilizationQueries, ScheduleQueries, OutboxQueries, LineageQueries
):
    """Durable state shared by every process on the machine (or on a shared filesystem).

    Opening a file brings its schema up to date (see :mod:`._migrations`) or refuses a file made by a
    newer release with a one-line :class:`~gpugeek_jupyter.errors.GpugeekError`.

    >>> registry = Registry("~/gpugeek.sqlite")                       # doctest: +SKIP
    >>> [p.name for p in registry.recent_pools(ended_since=time.time() - 86400)]  # doctest: +SKIP
    ['dev', 'sweep-3']
    """

    def __init__(self, path: str | os.PathLike[str], clock: Callable[[], float] = time.time) -> None:
        super().__init__(path, clock)
        migrate(self._connection(), self.path)

    def __repr__(self) -> str:
        return f"Registry({str(self.path)!r})"


_registries: dict[str, Registry] = {}
_registries_lock = threading.Lock()


def get_registry(path: str | None = None) -> Registry:
    """The registry at ``path`` (default: the configured one), one object per path per process."""
    if path is None:
        from ..config import get_config

        path = get_config().registry_path
    with _registries_lock:
        if path not in _registries:
            _registries[path] = Registry(path)
        return _registries[path]
