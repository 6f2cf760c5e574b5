"""The slow rank named: from the ranks' ``gg.log`` steps, said once when one lags the others.

A rank's step time is the ``step_s`` value it logs at that step when it logs one (what it measured,
e.g. its forward and backward without the wait in the all-reduce, which a DDP step otherwise
hides), else the time between its ``gg.log`` calls of consecutive steps (per step, when it skips
some). Once every rank of the attempt has a time for a step, the step is judged against the median
rank's time there. A rank is named, once per attempt, when over its last ``SLOW_STEPS`` (20) judged
steps its mean step time is more than ``SLOW_FACTOR`` (1.2: 20 %) of the median rank's mean and at
least ``MIN_GAP_S`` (5 ms) longer, and it was slower than the median in at least ``SLOW_SHARE``
(3/4) of those steps (a few hiccups of a loaded host neither make nor break it):

    job job-3f2a9c7b8c19: rank 1 (host gpu-b) is slower than the others: 61.3 ms a step over the last
    20 steps, the median rank 11.2 ms (the rule: over 20% and 5 ms slower than the median on
    average over 20 steps, and slower in at least 15 of them)

With the pool's telemetry, the line ends with the likely cause it shows (:mod:`.slow_cause`: a
throttled GPU, a GPU waiting on its CPU, more work on that rank, or a rank that waits):
``...; likely cause: its process used more CPU (98% of a core, the others 31%): more work on this
rank (uneven data, another code path)``.

Nothing is said with one rank, nor when the ranks are even. Steps not yet judged are held per
rank, at most ``HELD_STEPS`` of them (a rank far ahead of another drops its oldest).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .logs import Row
from .slow_cause import likely_cause

if TYPE_CHECKING:
    from ..store import Registry
    from ..telemetry import Columns

    Samples = Callable[[float, float], Columns]  # the pool's telemetry between two epoch times

log = logging.getLogger(__name__)

SLOW_FACTOR = 1.2  # slower than the median rank by more than 20 %
MIN_GAP_S = 0.005  # ... and by at least this much (noise on steps of a millisecond is not a straggler)
SLOW_STEPS = 20  # judged over this many steps
SLOW_SHARE = 0.75  # ... slower than the median in at least this share of them
HELD_STEPS = 1000  # steps held per rank, waiting for the others
STEP_TIME_NAME = "step_s"  # a logged value of this name is the rank's own step time


class SlowRanks:
    """Fed every batch of ``gg.log`` rows of one attempt; calls ``say(message)`` when a rank has been
    slower than the others over its last ``SLOW_STEPS`` steps (once per attempt).

    >>> said = []
    >>> finder = SlowRanks("job-1", {0: "a", 1: "b"}, said.append)
    >>> for step in range(21):
    ...     finder.add(0, [(step, 0.0, "step_s", 0.010)])
    ...     finder.add(1, [(step, 0.0, "step_s", 0.060)])
    >>> said[0].split(":")[1]
    ' rank 1 (host b) is slower than the others'
    """

    def __init__(
        self,
        job_id: str,
        hosts: Mapping[int, str],
        say: Callable[[str], None],
        workers: Mapping[int, str] | None = None,
        samples: Samples | None = None,
    ) -> None:
        self.job_id = job_id
        self.hosts = dict(hosts)  # the attempt's ranks and their hosts
        self.say = say
        self.workers = dict(workers or {})  # the ranks' dask workers, as telemetry names them
        self.samples = samples
        self.named: int | None = None
        self._last_log: dict[int, tuple[int, float]] = {}  # rank -> (step, time) of its newest gg.log
        self._times: dict[int, dict[int, float]] = {r: {} for r in hosts}  # rank -> {step: step time}
        self._from_value: set[int] = set()  # ranks that log step_s: their values count, not intervals
        # (its time, the median's) of each rank's last SLOW_STEPS judged steps
        self._window: dict[int, deque[tuple[float, float]]] = {r: deque(maxlen=SLOW_STEPS) for r in hosts}

    def add(self, rank: int, rows: list[Row]) -> None:
        if self.named is not None or len(self.hosts) < 2 or rank not in self.hosts:
            return
        try:
            self._take(rank, rows)
            self._judge()
        except Exception as e:  # an aid: the job and its metrics must not depend on it
            log.info("job %s: the slow rank could not be judged: %s", self.job_id, e)
            self.named = -1

    def _take(self, rank: int, rows: list[Row]) -> None:
        times = self._times[rank]
        for step, at, name, value in rows:
            if name == STEP_TIME_NAME:
                if rank not in self._from_value:
                    self._from_value.add(rank)
                    times.clear()  # intervals held so far give way to what the rank measured
                times[step] = value
                continue
            last = self._last_log.get(rank)
            if last is None or step > last[0]:
                if last is not None and rank not in self._from_value:
                    times[step] = (at - last[1]) / (step - last[0])
                self._last_log[rank] = (step, at)
        if len(times) > HELD_STEPS:
            for old in sorted(times)[: len(times) - HELD_STEPS]:
                del times[old]

    def _judge(self) -> None:
        ready = set.intersection(*(set(times) for times in self._times.values()))
        for step in sorted(ready):
            durations = {rank: times.pop(step) for rank, times in self._times.items()}
            median = statistics.median(durations.values())
            for rank, duration in durations.items():
                window = self._window[rank]
                window.append((duration, median))
                if len(window) == SLOW_STEPS and self._is_slow(window):
                    self._name(rank, window)
                    return

    @staticmethod
    def _is_slow(window: deque[tuple[float, float]]) -> bool:
        own = statistics.fmean(d for d, _ in window)
        median = statistics.fmean(m for _, m in window)
        slower = sum(1 for d, m in window if d > m)
        return own > SLOW_FACTOR * median and own - median >= MIN_GAP_S and slower >= SLOW_SHARE * len(window)

    def _name(self, rank: int, window: deque[tuple[float, float]]) -> None:
        self.named = rank
        own = statistics.fmean(d for d, _ in window) * 1000
        median = statistics.fmean(m for _, m in window) * 1000
        cause = self._cause(rank, sum(d for d, _ in window))
        self.say(
            f"job {self.job_id}: rank {rank} (host {self.hosts[rank]}) is slower than the others: {own:.1f} ms "
            f"a step over the last {SLOW_STEPS} steps, the median rank {median:.1f} ms (the rule: over "
            f"{SLOW_FACTOR * 100 - 100:.0f}% and {MIN_GAP_S * 1000:.0f} ms slower than the median on average over "
            f"{SLOW_STEPS} steps, and slower in at least {SLOW_SHARE * SLOW_STEPS:.0f} of them)"
            + (f"; likely cause: {cause}" if cause else "")
        )

    def _cause(self, rank: int, seconds: float) -> str | None:
        """What the telemetry of the last ``seconds`` (the slow steps) says of why, if it says."""
        if self.samples is None or rank not in self.workers:
            return None
        now = time.time()
        try:
            columns = self.samples(now - seconds - 1.0, now)
            others = [worker for other, worker in self.workers.items() if other != rank]
            return likely_cause(columns, self.workers[rank], others)
        except Exception as e:  # an aid: naming the rank must not depend on it
            log.info("job %s: no likely cause for rank %d: %s", self.job_id, rank, e)
            return None


def slow_rank_of_pool(registry: Registry, pool_id: int, ended_within_s: float) -> str | None:
    """The slow-rank line of pool ``pool_id``'s newest job, while it runs or up to ``ended_within_s``
    after it ended (what the pool's monitor shows under its headline); None when it named none."""
    newest = registry.list_jobs(pool_id=pool_id, limit=1)
    if not newest:
        return None
    job = newest[0]
    if job.ended_at is not None and registry.clock() - job.ended_at > ended_within_s:
        return None
    line = job.summary.get("slow_rank")
    return str(line) if line else None
