"""Why a slow rank is slow, as far as the pool's telemetry can tell (:mod:`.slow_ranks` asks).

The slow rank's worker is compared with the others over the steps that made it slow, from the
telemetry samples of that time (SM clock, SM %, the worker process's CPU %), in this order:

- its GPU's SM clock is under ``CLOCK_SHARE`` (90 %) of the others' median: the GPU is throttled
  (power or heat);
- its GPU's SM % is ``UTIL_GAP_PCT`` (15 points) under the others' while its process keeps a core
  busy (``BUSY_CPU_PCT``): the GPU waits on the CPU (data loading, Python);
- its process used ``CPU_RATIO`` (1.5x) the CPU of the others' median: more work on this rank
  (uneven data, a different code path);
- its process used under 1 / ``CPU_RATIO`` of it: it waits (I/O, a lock, a sleep) or its host is
  busy with other work.

Nothing is said when no sample covers the time, or when nothing differs enough.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..telemetry import Columns

CLOCK_SHARE = 0.9
UTIL_GAP_PCT = 15.0
BUSY_CPU_PCT = 90.0
CPU_RATIO = 1.5
MIN_CPU_PCT = 10.0  # CPU figures under this on every rank are noise, not a cause


def likely_cause(columns: Columns, slow: str, others: Iterable[str]) -> str | None:
    """The likely cause of worker ``slow`` being slower than workers ``others`` (dask addresses),
    from telemetry ``columns``; None when the samples do not tell.

    >>> import numpy as np
    >>> def rows(worker, cpu): return {"worker": np.array([worker] * 2, dtype=object), "gpu": np.array([-1, -1]),
    ...     "cpu_pct": np.array([cpu, cpu]), "sm_clock_mhz": np.array([np.nan] * 2), "sm_util_pct": np.array([np.nan] * 2)}
    >>> both = {k: np.concatenate([rows("a", 100.0)[k], rows("b", 20.0)[k]]) for k in rows("a", 0.0)}
    >>> likely_cause(both, "a", ["b"])
    'its process used more CPU (100% of a core, the others 20%): more work on this rank (uneven data, another code path)'
    """
    others = [o for o in others if o != slow]
    mine = _means(columns, slow)
    theirs = [_means(columns, other) for other in others]
    if mine is None or not theirs or any(t is None for t in theirs):
        return None
    clock, util, cpu = mine
    their_clock = _median(t[0] for t in theirs if t is not None)
    their_util = _median(t[1] for t in theirs if t is not None)
    their_cpu = _median(t[2] for t in theirs if t is not None)
    if clock is not None and their_clock is not None and clock < CLOCK_SHARE * their_clock:
        return (
            f"its GPU's SM clock is lower ({clock:.0f} MHz, the others {their_clock:.0f} MHz): "
            "throttled (power or heat)"
        )
    if (
        util is not None
        and their_util is not None
        and cpu is not None
        and util < their_util - UTIL_GAP_PCT
        and cpu >= BUSY_CPU_PCT
    ):
        return (
            f"its GPU is less busy ({util:.0f}% SM, the others {their_util:.0f}%) while its process keeps "
            f"{cpu:.0f}% of a core busy: the GPU waits on the CPU (data loading, Python)"
        )
    if cpu is None or their_cpu is None or max(cpu, their_cpu) < MIN_CPU_PCT:
        return None
    if cpu > CPU_RATIO * their_cpu:
        return (
            f"its process used more CPU ({cpu:.0f}% of a core, the others {their_cpu:.0f}%): "
            "more work on this rank (uneven data, another code path)"
        )
    if cpu * CPU_RATIO < their_cpu:
        return (
            f"its process used less CPU ({cpu:.0f}% of a core, the others {their_cpu:.0f}%): "
            "it waits (I/O, a lock, a sleep) or its host is busy with other work"
        )
    return None


def _means(columns: Columns, worker: str) -> tuple[float | None, float | None, float | None] | None:
    """Mean SM clock, SM % (its GPUs' rows) and process CPU % of ``worker``; None without samples."""
    mine = columns["worker"] == worker
    if not mine.any():
        return None
    gpu_rows = mine & (columns["gpu"] >= 0)
    return (
        _mean(columns["sm_clock_mhz"][gpu_rows]),
        _mean(columns["sm_util_pct"][gpu_rows]),
        _mean(columns["cpu_pct"][mine]),
    )


def _mean(values: np.ndarray) -> float | None:
    finite = values[~np.isnan(values.astype(np.float64))]
    return float(np.mean(finite)) if len(finite) else None


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None
