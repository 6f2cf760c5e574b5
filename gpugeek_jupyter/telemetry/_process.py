"""CPU % and resident memory of a worker process and its children (e.g. torchrun ranks), via psutil.

CPU % also comes split: the part spent by the worker's own machinery (``overhead_cpu_pct``: the
threads a :class:`ProcessReader` is told about, e.g. dask's event loop and this sampler) is reported
apart, so that what is left is the work the pool was asked to do. The cost's idle shutdown and idle
share read that (:mod:`gpugeek_jupyter.cost.usage`).

The sampler reads its own process, so the process's and those threads' CPU time come from the
kernel's per-process and per-thread CPU clocks (nanoseconds): psutil's figures move in clock ticks
(10 ms), and a sample taken just after the sampler started (the first one, at once) would read one
tick as hundreds of percent. Children are read through psutil.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Collection
from typing import NamedTuple

import psutil

log = logging.getLogger(__name__)

# per-thread CPU clocks need pthreads (Linux, macOS); elsewhere the overhead is not measured
_THREAD_CLOCKS = hasattr(time, "pthread_getcpuclockid")


class ProcessReading(NamedTuple):
    """One read: percentages since the previous read (100 = one core), resident bytes now; NaN when unreadable."""

    cpu_pct: float
    overhead_cpu_pct: float
    rss_bytes: float


def _thread_seconds(ident: int) -> float | None:
    """CPU seconds of this process's thread ``ident`` (a ``threading`` ident); None once it ended."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, OverflowError, ValueError):
        return None


class ProcessReader:
    """Sums over the worker process and its descendants; the children list is refreshed every
    ``children_every`` reads because walking the process table is the costliest part of a sample.

    ``overhead_threads`` names, by ``threading`` ident, the threads of this process whose CPU time
    is the worker's machinery rather than its work; it is asked on every read, since threads come and
    go, and counted only when ``pid`` is this process. Without it ``overhead_cpu_pct`` is 0. A child
    found by a refresh counts from the next read on, so that its first figure covers a whole period.
    """

    def __init__(
        self,
        pid: int | None = None,
        children_every: int = 5,
        overhead_threads: Callable[[], Collection[int]] | None = None,
    ) -> None:
        self.pid = pid if pid is not None else os.getpid()
        self.children_every = max(1, children_every)
        self._own = self.pid == os.getpid()
        self.overhead_threads = overhead_threads if self._own and _THREAD_CLOCKS else None
        self._root = psutil.Process(self.pid)
        self._processes: dict[int, psutil.Process] = {self.pid: self._root}  # kept for cpu_percent's deltas
        self._reads = 0
        self._root.cpu_percent(None)  # the first call only starts the measurement (other processes)
        self._read_at = time.monotonic()
        self._own_cpu = time.process_time()
        self._thread_cpu: dict[int, float] = {}  # overhead thread ident -> its CPU seconds at the previous read
        if self.overhead_threads is not None:
            self._overhead_seconds()  # the baselines

    def pids(self) -> set[int]:
        return set(self._processes)

    def read(self) -> ProcessReading:
        """CPU % and overhead % since the previous read, resident bytes; NaN for what cannot be read."""
        now, own_cpu = time.monotonic(), time.process_time()
        elapsed = now - self._read_at
        cpu = rss = 0.0
        for pid, process in list(self._processes.items()):
            try:
                with process.oneshot():
                    if pid != self.pid or not self._own:
                        cpu += process.cpu_percent(None)
                    rss += process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                self._processes.pop(pid, None)
            except psutil.Error as e:
                if pid == self.pid:
                    log.debug("cannot read process %s: %s", pid, e)
                    return ProcessReading(math.nan, math.nan, math.nan)
        overhead = 0.0
        if elapsed > 0:
            if self._own:
                cpu += 100.0 * (own_cpu - self._own_cpu) / elapsed
            if self.overhead_threads is not None:
                overhead = 100.0 * self._overhead_seconds() / elapsed
        self._read_at, self._own_cpu = now, own_cpu
        if self._reads % self.children_every == 0:
            self._refresh_children()
        self._reads += 1
        return ProcessReading(cpu, overhead, rss)

    def _overhead_seconds(self) -> float:
        """CPU seconds of the overhead threads since the previous call (a thread new to the set counts from now)."""
        assert self.overhead_threads is not None
        times = {ident: t for ident in set(self.overhead_threads()) if (t := _thread_seconds(ident)) is not None}
        seconds = sum(max(0.0, t - self._thread_cpu[ident]) for ident, t in times.items() if ident in self._thread_cpu)
        self._thread_cpu = times  # ended threads are forgotten: idents get reused
        return seconds

    def _refresh_children(self) -> None:
        try:
            children = self._root.children(recursive=True)
        except psutil.Error as e:
            log.debug("cannot list children of %s: %s", self.pid, e)
            return
        current = {child.pid: child for child in children}
        for pid in list(self._processes):
            if pid != self.pid and pid not in current:
                del self._processes[pid]
        for pid, child in current.items():
            if pid not in self._processes:
                try:
                    child.cpu_percent(None)
                except psutil.Error:
                    continue
                self._processes[pid] = child
