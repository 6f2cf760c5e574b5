"""CPU % and resident memory of a worker process and its children (e.g. torchrun ranks), via psutil."""

from __future__ import annotations

import logging
import math
import os

import psutil

log = logging.getLogger(__name__)


class ProcessReader:
    """Sums over the worker process and its descendants; the children list is refreshed every
    ``children_every`` reads because walking the process table is the costliest part of a sample."""

    def __init__(self, pid: int | None = None, children_every: int = 5) -> None:
        self.pid = pid if pid is not None else os.getpid()
        self.children_every = max(1, children_every)
        self._root = psutil.Process(self.pid)
        self._processes: dict[int, psutil.Process] = {self.pid: self._root}  # kept for cpu_percent's deltas
        self._reads = 0
        self._root.cpu_percent(None)  # the first call only starts the measurement

    def pids(self) -> set[int]:
        return set(self._processes)

    def read(self) -> tuple[float, float]:
        """(cpu %, rss bytes); NaN for what cannot be read. 100 % = one core busy."""
        if self._reads % self.children_every == 0:
            self._refresh_children()
        self._reads += 1
        cpu = rss = 0.0
        for pid, process in list(self._processes.items()):
            try:
                with process.oneshot():
                    cpu += process.cpu_percent(None)
                    rss += process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                self._processes.pop(pid, None)
            except psutil.Error as e:
                if pid == self.pid:
                    log.debug("cannot read process %s: %s", pid, e)
                    return math.nan, math.nan
        return cpu, rss

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
