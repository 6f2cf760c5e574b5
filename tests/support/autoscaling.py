"""One autoscaling scenario for real pools of any backend, and the pool's size over time.

Three real jobs from threads of this process, as three notebooks would send them: A holds the pool
until released, B and C wait in its queue (one rank each in a pool of one worker: 2 ranks pending).
The pool grows while they wait; B and C then run on the workers it grew to; C holds the pool while
nothing else waits, longer than the cooldown, and no worker may go; once C is released and no job
runs, the extra workers go after the cooldown.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpugeek_jupyter.jobs.roster import LAYOUT_FRESH_S
from gpugeek_jupyter.pools.scheduler_workers import connected_workers
from support.waiting import wait_for

# a cell that runs until the file exists, then gives its world size
HOLD = """
import os, time
while not os.path.exists({path!r}):
    time.sleep(0.05)
int(os.environ["WORLD_SIZE"])
"""
QUICK = 'int(os.environ["WORLD_SIZE"])'


@dataclass
class Timeline:
    """The pool's connected workers, sampled every 0.1 s, and what happened when (monotonic seconds)."""

    started: float = field(default_factory=time.monotonic)
    sizes: list[tuple[float, int]] = field(default_factory=list)  # (t, workers) at each change
    events: list[tuple[float, str]] = field(default_factory=list)

    def mark(self, what: str) -> float:
        now = time.monotonic() - self.started
        self.events.append((now, what))
        return now

    def describe(self) -> str:
        """``0.0 s: 1 worker(s); 3.1 s: job A runs; ...`` in time order."""
        rows = [(t, f"{n} worker(s)") for t, n in self.sizes] + self.events
        return "; ".join(f"{t:.1f} s: {what}" for t, what in sorted(rows))


class SizeSampler(threading.Thread):
    """Samples how many workers ``pool``'s scheduler has, until stopped."""

    def __init__(self, pool: Any, timeline: Timeline) -> None:
        super().__init__(name="size-sampler", daemon=True)
        self.pool = pool
        self.timeline = timeline
        self.addresses: set[str] = set()
        self.done = threading.Event()
        self._lock = threading.Lock()  # the test's own thread samples too (see ``size``)

    def workers(self) -> set[str]:
        return set(connected_workers(self.pool.client))

    def sample(self) -> None:
        with self._lock:
            self.addresses = self.workers()
            if not self.timeline.sizes or self.timeline.sizes[-1][1] != len(self.addresses):
                self.timeline.sizes.append((time.monotonic() - self.timeline.started, len(self.addresses)))

    def size(self) -> int:
        """Sample now and give the size: a size a test waits for is in the timeline even when the
        sampler's thread, stalled on a loaded machine, missed the moment."""
        self.sample()
        return len(self.addresses)

    def run(self) -> None:
        while not self.done.wait(0.1):
            try:
                self.sample()
            except Exception:  # the pool is stopping
                return

    def stop(self) -> None:
        """Stop sampling, with one last sample (the size the test saw last)."""
        self.done.set()
        self.join(5)
        self.sample()


def _run_in_thread(pool: Any, source: str, results: dict[str, Any], name: str) -> threading.Thread:
    from gpugeek_jupyter.jobs import run_cell

    def run() -> None:
        results[name] = run_cell(pool, source, {"os": __import__("os")}, timeout=240)

    thread = threading.Thread(target=run, name=f"job-{name}", daemon=True)
    thread.start()
    return thread


def _statuses(pool: Any) -> list[str]:
    return [job.status.value for job in pool.registry.open_jobs(pool.id)]


def grows_for_the_queue_and_shrinks_after_the_jobs(
    pool: Any,
    scaling: Any,
    tmp_path: Path,
    cooldown: float,
    scale_timeout: float,
    while_grown: Callable[[], None] = lambda: None,
) -> Timeline:
    """Run the scenario on ``pool`` (1 worker, autoscaled by ``scaling``: min 1, max 3, threshold 1,
    step 2, cooldown ``cooldown``); assert each step; return the timeline. ``while_grown`` runs
    once the pool has grown, while B and C still wait."""
    timeline = Timeline()
    sampler = SizeSampler(pool, timeline)
    sampler.sample()
    sampler.start()
    results: dict[str, Any] = {}
    release_a, release_c = tmp_path / "release-a", tmp_path / "release-c"
    try:
        a = _run_in_thread(pool, HOLD.format(path=str(release_a)), results, "A")
        wait_for(lambda: _statuses(pool) == ["running"], 60, "job A running")
        a_worker = sampler.workers()
        a_started = time.monotonic()
        timeline.mark("job A runs")
        b = _run_in_thread(pool, QUICK, results, "B")
        wait_for(lambda: _statuses(pool) == ["running", "queued"], 10, "job B queued")
        c = _run_in_thread(pool, HOLD.format(path=str(release_c)), results, "C")
        wait_for(lambda: _statuses(pool) == ["running", "queued", "queued"], 10, "job C queued")
        timeline.mark("jobs B and C queued")

        wait_for(lambda: sampler.size() == 3, scale_timeout, "the pool growing to 3 workers")
        timeline.mark("3 workers")
        assert a_worker <= sampler.workers(), "job A's worker went while A ran"
        detail = scaling.pending()
        assert detail == ["2 pending: 2 ranks of queued jobs"], detail
        while_grown()

        # a job takes the layout its pool's previous job read when that is younger than LAYOUT_FRESH_S
        time.sleep(max(0.0, LAYOUT_FRESH_S + 0.5 - (time.monotonic() - a_started)))
        release_a.touch()
        a.join(60)
        timeline.mark("job A ended")
        b.join(120)
        timeline.mark("job B ended")
        wait_for(lambda: _statuses(pool) == ["running"], 30, "job C running")
        c_workers = sampler.workers()
        timeline.mark("job C runs, nothing queued")

        # C runs alone for twice the cooldown: every worker is busy, none may go
        hold_until = time.monotonic() + 2 * cooldown + 1
        while time.monotonic() < hold_until:
            assert sampler.workers() == c_workers, f"a worker went while job C ran: {timeline.describe()}"
            time.sleep(0.1)
        downs = [e for adaptive in scaling.adaptives for _, e in adaptive.log if e["status"] == "down"]
        assert not downs, f"{downs} while job C ran: {timeline.describe()}"

        release_c.touch()
        c.join(60)
        ended = timeline.mark("job C ended")
        wait_for(lambda: sampler.size() == 1, cooldown + scale_timeout, "the pool shrinking to 1 worker")
        shrunk = timeline.mark("1 worker")
    finally:
        release_a.touch()
        release_c.touch()
        sampler.stop()

    assert [r.ok for r in (results["A"], results["B"], results["C"])] == [True, True, True], results
    ran_on = [results[n].values for n in "ABC"]
    assert ran_on == [[1], [3, 3, 3], [3, 3, 3]], ran_on  # B and C ran on the workers the pool grew to
    assert shrunk - ended >= cooldown - 0.5, f"workers went before the cooldown: {timeline.describe()}"
    sizes = [n for _, n in timeline.sizes]
    assert (sizes[0], max(sizes), sizes[-1]) == (1, 3, 1), timeline.describe()
    grown = next(t for t, what in timeline.events if what == "3 workers")
    assert all(n == 3 for t, n in timeline.sizes if grown <= t <= ended), f"a worker went: {timeline.describe()}"
    return timeline
