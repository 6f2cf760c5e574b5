"""A job's ``gg.log`` values thinned for a chart, read as the job writes them.

A long run keeps up to ``METRICS_ROWS`` rows per rank and attempt (:mod:`.metrics`); a chart needs
a few hundred points per line and a job view asks again every few seconds. :func:`thinned_records`
gives each line (attempt, rank, metric) at most ``points`` rows: its first and its last, and for
each of ``(points - 2) // 2`` runs of steps between them the run's lowest and highest value, so a
spike stays in sight. The file is read from where the previous read of the same job stopped (it is
only appended to), so a poll costs what arrived since, not the whole course; what is kept between
reads is bounded by the lines times ``2 * points``.

>>> rows = [(step, 0.0, 9.0 if step == 50 else float(step % 7)) for step in range(100)]
>>> thinned = thin_line(rows, 10)
>>> len(thinned), thinned[0][0], thinned[-1][0], max(value for _, _, value in thinned)
(10, 0, 99, 9.0)
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from .logs import logs_root
from .metrics import METRICS_FILE, batch_rows, metric_record

MIN_POINTS, MAX_POINTS = 4, 100_000  # what ``points`` may be
KEPT_READERS = 16  # jobs whose reading position is kept (the views open at once)

Point = tuple[int, float, float]  # (step, time, value) of one line
LineKey = tuple[int, int, str]  # (attempt, rank, metric name)


def thin_line(rows: list[Point], points: int) -> list[Point]:
    """At most ``points`` of ``rows`` (one line, in step order): the first, the last, and each run's
    lowest and highest value between them, in step order; a run of NaN keeps its first row (a gap)."""
    if len(rows) <= points:
        return rows
    runs = max(1, (points - 2) // 2)
    inner = len(rows) - 2
    kept = [rows[0]]
    for run in range(runs):
        start, end = 1 + run * inner // runs, 1 + (run + 1) * inner // runs
        if start >= end:
            continue
        numbers = [i for i in range(start, end) if not math.isnan(rows[i][2])]
        if not numbers:
            kept.append(rows[start])
            continue
        low = min(numbers, key=lambda i: rows[i][2])
        high = max(numbers, key=lambda i: rows[i][2])
        kept.extend(rows[i] for i in sorted({low, high}))
    kept.append(rows[-1])
    return kept


class ThinnedMetrics:
    """One job's metrics file, read on from where the last read stopped, kept thinned per line."""

    def __init__(self, path: Path, points: int) -> None:
        self.path = path
        self.points = points
        self.file_id: tuple[int, int] | None = None  # (device, inode) of the file read so far
        self.offset = 0  # bytes read, up to the end of the last whole line
        self.lines: dict[LineKey, list[Point]] = {}
        self.lock = threading.Lock()

    def read(self) -> dict[LineKey, list[Point]]:
        """Every line, thinned to at most ``points`` rows, after reading what was appended since."""
        with self.lock:
            self._catch_up()
            return {key: thin_line(rows, self.points) for key, rows in sorted(self.lines.items())}

    def _catch_up(self) -> None:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            self.file_id, self.offset, self.lines = None, 0, {}
            return
        if (info.st_dev, info.st_ino) != self.file_id or info.st_size < self.offset:  # a new file
            self.file_id, self.offset, self.lines = (info.st_dev, info.st_ino), 0, {}
        if info.st_size == self.offset:
            return
        with self.path.open("rb") as file:
            file.seek(self.offset)
            data = file.read(info.st_size - self.offset)
        whole = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
        self.offset += len(whole)
        grown: set[LineKey] = set()
        for line in whole.decode("utf-8", errors="replace").splitlines():
            for attempt, rank, step, at, name, value in batch_rows(line, self.path):
                key = (attempt, rank, name)
                self.lines.setdefault(key, []).append((step, at, value))
                grown.add(key)
        for key in grown:
            if len(self.lines[key]) > 2 * self.points:  # kept bounded: thinned again as it grows
                self.lines[key] = thin_line(self.lines[key], self.points)


_readers: OrderedDict[tuple[str, int], ThinnedMetrics] = OrderedDict()
_readers_lock = threading.Lock()


def _reader(path: Path, points: int) -> ThinnedMetrics:
    key = (str(path), points)
    with _readers_lock:
        reader = _readers.pop(key, None) or ThinnedMetrics(path, points)
        _readers[key] = reader
        while len(_readers) > KEPT_READERS:
            _readers.popitem(last=False)
        return reader


def thinned_records(job_id: str, points: int) -> tuple[list[str], list[dict[str, Any]]]:
    """Job ``job_id``'s metric names, and its rows thinned to at most ``points`` per line as
    JSON-ready dicts (a NaN or an infinity is ``None``), line by line (attempt, rank, name)."""
    lines = _reader(logs_root() / job_id / METRICS_FILE, points).read()
    names = sorted({name for _, _, name in lines})
    records = [
        metric_record(attempt, rank, step, at, name, value)
        for (attempt, rank, name), rows in lines.items()
        for step, at, value in rows
    ]
    return names, records
