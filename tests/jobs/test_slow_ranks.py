"""The slow rank named from the ranks' ``gg.log`` steps: the rule on made-up times, then real jobs.

The rule: a rank more than 20% (and 5 ms) slower than the median rank on average over 20 steps,
and slower in at least 15 of them, is named once, with its host. The real jobs run on a 2-worker pool, where one rank sleeps 50 ms more
a step (with and without an all-reduce each step) or the ranks are even.
"""

from __future__ import annotations

import random
from typing import Any

from gpugeek_jupyter.jobs import run_cell
from gpugeek_jupyter.jobs.slow_ranks import SLOW_STEPS, SlowRanks

HOSTS = {0: "h0", 1: "h1", 2: "h2", 3: "h3"}


def feed(finder: SlowRanks, step_times: dict[int, list[float]]) -> None:
    """Each rank logs a loss at the end of each step, its steps taking the times given."""
    clock = dict.fromkeys(step_times, 1000.0)
    for step in range(max(len(t) for t in step_times.values())):
        for rank, times in step_times.items():
            clock[rank] += times[step]
            finder.add(rank, [(step, clock[rank], "loss", 1.0)])


def test_a_rank_slower_than_the_median_over_twenty_steps_is_named_once_with_its_host() -> None:
    said: list[str] = []
    finder = SlowRanks("job-1", HOSTS, said.append)
    even, slow = [0.010] * 40, [0.030] * 40
    feed(finder, {0: even, 1: even, 2: slow, 3: even})
    assert said == [
        "job job-1: rank 2 (host h2) is slower than the others: 30.0 ms a step over the last 20 steps, the "
        "median rank 10.0 ms (the rule: over 20% and 5 ms slower than the median on average over 20 steps, "
        "and slower in at least 15 of them)"
    ]
    assert finder.named == 2


def test_the_rank_is_named_at_the_twentieth_slow_step() -> None:
    said: list[str] = []
    finder = SlowRanks("job-1", {0: "h0", 1: "h1"}, said.append)
    feed(finder, {0: [0.010] * SLOW_STEPS, 1: [0.060] * SLOW_STEPS})  # 19 intervals: the first step has none
    assert said == []
    feed_more = {0: [0.010] * 2, 1: [0.060] * 2}
    finder2 = SlowRanks("job-1", {0: "h0", 1: "h1"}, said.append)
    feed(finder2, {r: [0.010 if r == 0 else 0.060] * SLOW_STEPS + t for r, t in feed_more.items()})
    assert len(said) == 1 and "rank 1 (host h1)" in said[0]


def test_even_ranks_with_jitter_name_nobody() -> None:
    said: list[str] = []
    finder = SlowRanks("job-1", HOSTS, said.append)
    jitter = random.Random(3)
    feed(finder, {rank: [0.020 * jitter.uniform(0.9, 1.1) for _ in range(500)] for rank in HOSTS})
    assert said == []


def test_slow_spells_of_half_the_steps_name_nobody() -> None:
    said: list[str] = []
    finder = SlowRanks("job-1", {0: "h0", 1: "h1"}, said.append)
    feed(finder, {0: [0.010] * 200, 1: ([0.060] * 10 + [0.010] * 10) * 10})
    assert said == []


def test_a_few_hiccups_of_the_other_ranks_do_not_hide_the_slow_one() -> None:
    said: list[str] = []
    finder = SlowRanks("job-1", {0: "h0", 1: "h1"}, said.append)
    hiccups = [0.080 if step in (5, 12, 17) else 0.010 for step in range(25)]  # a loaded host, now and then
    feed(finder, {0: hiccups, 1: [0.060] * 25})
    assert len(said) == 1 and "rank 1 (host h1)" in said[0]


def test_a_logged_step_time_counts_instead_of_the_time_between_calls() -> None:
    said: list[str] = []
    finder = SlowRanks("job-1", {0: "h0", 1: "h1"}, said.append)
    for step in range(25):  # an all-reduce makes both ranks log at the same moments
        finder.add(0, [(step, float(step), "loss", 1.0), (step, float(step), "step_s", 0.010)])
        finder.add(1, [(step, float(step), "loss", 1.0), (step, float(step), "step_s", 0.050)])
    assert len(said) == 1 and "rank 1 (host h1)" in said[0] and "50.0 ms a step" in said[0]


def test_one_rank_is_never_slower_than_the_others() -> None:
    said: list[str] = []
    feed(SlowRanks("job-1", {0: "h0"}, said.append), {0: [0.010] * 10 + [1.0] * 50})
    assert said == []


# -- real jobs --------------------------------------------------------------------------------------------
SLEEPY_RANK_1 = """
import time
for step in range(30):
    time.sleep(0.005 + (0.050 if rank == 1 else 0.0))
    gg.log(step=step, loss=1.0)
"""

EVEN = """
import time
for step in range(30):
    time.sleep(0.020)
    gg.log(step=step, loss=1.0)
"""

ALL_REDUCE_EACH_STEP = """
import time, torch
for step in range(30):
    t0 = time.perf_counter()
    time.sleep(0.005 + (0.050 if rank == 1 else 0.0))
    step_s = time.perf_counter() - t0
    dist.all_reduce(torch.ones(4))
    gg.log(step=step, loss=1.0, step_s=step_s)
"""


def slow_notices(pool: Any, source: str) -> list[str]:
    notices: list[str] = []
    result = run_cell(pool, source, {}, on_notice=notices.append, timeout=120)
    assert result.ok, result.failure
    return [n for n in notices if "is slower than the others" in n]


def test_a_rank_that_sleeps_50_ms_more_a_step_is_named_within_30_steps(pool: Any) -> None:
    named = slow_notices(pool, SLEEPY_RANK_1)
    assert len(named) == 1 and ": rank 1 (host " in named[0], named


def test_even_ranks_of_a_real_job_name_nobody(pool: Any) -> None:
    assert slow_notices(pool, EVEN) == []


def test_behind_an_all_reduce_the_logged_step_time_names_the_slow_rank(pool: Any) -> None:
    named = slow_notices(pool, ALL_REDUCE_EACH_STEP)
    assert len(named) == 1 and ": rank 1 (host " in named[0], named


# -- the likely cause -------------------------------------------------------------------------------------
def columns(*workers: tuple[str, int, float, float, float]) -> dict[str, Any]:
    """Telemetry columns of (worker, gpu, SM clock MHz, SM %, process CPU %), two samples each."""
    import numpy as np

    rows = [w for w in workers for _ in range(2)]
    return {
        "worker": np.array([w[0] for w in rows], dtype=object),
        "gpu": np.array([w[1] for w in rows]),
        "sm_clock_mhz": np.array([w[2] for w in rows]),
        "sm_util_pct": np.array([w[3] for w in rows]),
        "cpu_pct": np.array([w[4] for w in rows]),
    }


NAN = float("nan")


def test_the_likely_cause_reads_the_clock_the_gpu_waiting_on_the_cpu_and_the_cpu() -> None:
    from gpugeek_jupyter.jobs.slow_cause import likely_cause

    throttled = columns(("a", 0, 1200.0, 95.0, 100.0), ("b", 0, 1980.0, 95.0, 100.0), ("c", 0, 1980.0, 96.0, 100.0))
    assert likely_cause(throttled, "a", ["b", "c"]) == (
        "its GPU's SM clock is lower (1200 MHz, the others 1980 MHz): throttled (power or heat)"
    )
    starved = columns(("a", 0, 1980.0, 40.0, 100.0), ("b", 0, 1980.0, 95.0, 60.0))
    assert likely_cause(starved, "a", ["b"]) == (
        "its GPU is less busy (40% SM, the others 95%) while its process keeps 100% of a core busy: "
        "the GPU waits on the CPU (data loading, Python)"
    )
    waiting = columns(("a", -1, NAN, NAN, 20.0), ("b", -1, NAN, NAN, 95.0))
    assert likely_cause(waiting, "a", ["b"]) == (
        "its process used less CPU (20% of a core, the others 95%): it waits (I/O, a lock, a sleep) "
        "or its host is busy with other work"
    )
    assert likely_cause(columns(("a", -1, NAN, NAN, 90.0), ("b", -1, NAN, NAN, 95.0)), "a", ["b"]) is None
    assert likely_cause(columns(("b", -1, NAN, NAN, 95.0)), "a", ["b"]) is None  # no sample of the slow one


BUSY_RANK_1 = """
import time
for step in range(40):
    time.sleep(0.005)
    if rank == 1:
        end = time.perf_counter() + 0.050
        while time.perf_counter() < end:
            pass
    gg.log(step=step, loss=1.0)
"""


def test_a_rank_with_more_work_is_named_with_its_cpu_as_the_likely_cause(pool: Any) -> None:
    from gpugeek_jupyter import telemetry

    telemetry.set_period(pool, 0.2)  # samples within these two seconds
    named = slow_notices(pool, BUSY_RANK_1)
    assert len(named) == 1 and ": rank 1 (host " in named[0], named
    assert "; likely cause: its process used more CPU (" in named[0], named
    from gpugeek_jupyter.jobs.slow_ranks import slow_rank_of_pool

    job = pool.registry.list_jobs(pool_id=pool.id, limit=1)[0]
    assert job.summary["slow_rank"] == named[0]  # kept with the job: the panel's job view shows it
    assert slow_rank_of_pool(pool.registry, pool.id, ended_within_s=300) == named[0]  # and the monitor
    assert slow_rank_of_pool(pool.registry, pool.id, ended_within_s=-1) is None  # not once the window passed
