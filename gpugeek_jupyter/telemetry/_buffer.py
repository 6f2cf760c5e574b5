"""The notebook-side ring buffer of one pool: column batches, trimmed by age and by row count."""

from __future__ import annotations

import collections
import threading

import numpy as np

from ._schema import Columns, concat_columns, empty_columns, select


class RingBuffer:
    """Keeps the last ``retention_seconds`` of samples (at most ``max_rows`` rows).

    Each :meth:`append` is one batch with a sequence number, so readers (the live widget) can ask
    for what is new since their last look without copying the whole history.
    """

    def __init__(self, retention_seconds: float = 3600.0, max_rows: int = 1_000_000) -> None:
        self.retention_seconds = retention_seconds
        self.max_rows = max_rows
        self._batches: collections.deque[tuple[int, float, Columns]] = collections.deque()  # (seq, newest time, cols)
        self._rows = 0
        self._seq = 0
        self._changed = threading.Condition()
        self._wakes = 0  # bumped by wake(): ends every wait in progress

    def __len__(self) -> int:
        return self._rows

    @property
    def seq(self) -> int:
        """Sequence number of the newest batch (0 before any)."""
        return self._seq

    def append(self, columns: Columns) -> None:
        n = len(columns["time"])
        if n == 0:
            return
        newest = float(np.max(columns["time"]))
        with self._changed:
            self._seq += 1
            self._batches.append((self._seq, newest, columns))
            self._rows += n
            self._trim(newest)
            self._changed.notify_all()

    def _trim(self, newest: float) -> None:
        cutoff = newest - self.retention_seconds
        while len(self._batches) > 1 and (
            self._batches[0][1] < cutoff or self._rows - len(self._batches[0][2]["time"]) >= self.max_rows
        ):
            _, _, old = self._batches.popleft()
            self._rows -= len(old["time"])

    def wait_newer(self, seq: int, timeout: float) -> bool:
        """Block until a batch newer than ``seq`` is there (True), :meth:`wake` was called or
        ``timeout`` passed (False)."""
        with self._changed:
            wakes = self._wakes
            self._changed.wait_for(lambda: self._seq > seq or self._wakes != wakes, timeout=timeout)
            return self._seq > seq

    def wake(self) -> None:
        """Wake every waiter (e.g. a closing widget) without new data."""
        with self._changed:
            self._wakes += 1  # a waiter's predicate sees it: notify alone would put it back to sleep
            self._changed.notify_all()

    def since(self, seq: int) -> tuple[int, Columns]:
        """(newest sequence number, rows of the batches after ``seq``)."""
        with self._changed:
            batches = [cols for s, _, cols in self._batches if s > seq]
            newest = self._seq
        return newest, concat_columns(batches)

    def columns(self, start: float | None = None, end: float | None = None) -> Columns:
        """Every kept row, or those with ``start <= time <= end``."""
        with self._changed:
            batches = list(self._batches)
        if start is not None:
            # batches are in arrival order; skip whole batches that end before ``start``
            batches = [b for b in batches if b[1] >= start]
        columns = concat_columns([cols for _, _, cols in batches]) if batches else empty_columns()
        if start is None and end is None:
            return columns
        times = columns["time"]
        mask = np.ones(len(times), dtype=bool)
        if start is not None:
            mask &= times >= start
        if end is not None:
            mask &= times <= end
        return select(columns, mask)
