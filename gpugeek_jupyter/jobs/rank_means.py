"""The mean over ranks of each ``gg.log`` value, step by step: what a tracked job logs to MLflow
when ``GpugeekConfig.mlflow_metrics`` is ``mean`` (one series per name, as a reduced metric reads,
instead of rank 0's).

A step's mean is given once every rank of the attempt has logged the name at that step; NaNs are
left out of it (all NaN: NaN). Steps some rank never logs (a subset, a rank that died) are given,
the mean of those that came, once more than :data:`HELD` steps wait, and at the end.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

from .logs import Row

HELD = 10_000  # (attempt, step, name) waiting for the other ranks at most


class RankMeans:
    """Fed each rank's rows; :meth:`add` answers the rows of steps every rank has now logged.

    >>> means = RankMeans(2)
    >>> means.add(0, 0, [(1, 10.0, "loss", 1.0)])
    []
    >>> means.add(0, 1, [(1, 10.5, "loss", 3.0)])
    [(1, 10.5, 'loss', 2.0)]
    """

    def __init__(self, ranks: int) -> None:
        self.ranks = max(1, ranks)
        self._lock = threading.Lock()
        self._waiting: OrderedDict[tuple[int, int, str], tuple[float, list[float]]] = OrderedDict()

    def add(self, attempt: int, rank: int, rows: list[Row]) -> list[Row]:
        done: list[Row] = []
        with self._lock:
            for step, at, name, value in rows:
                key = (attempt, step, name)
                latest, values = self._waiting.get(key, (at, []))
                values.append(value)
                if len(values) >= self.ranks:
                    self._waiting.pop(key, None)
                    done.append((step, max(latest, at), name, _mean(values)))
                else:
                    self._waiting[key] = (max(latest, at), values)
            while len(self._waiting) > HELD:
                (_, step, name), (at, values) = self._waiting.popitem(last=False)
                done.append((step, at, name, _mean(values)))
        return done

    def rest(self) -> list[Row]:
        """The steps still waiting, as the mean of the ranks that logged them."""
        with self._lock:
            rest = [(step, at, name, _mean(values)) for (_, step, name), (at, values) in self._waiting.items()]
            self._waiting.clear()
        return rest


def _mean(values: list[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return sum(known) / len(known) if known else math.nan
