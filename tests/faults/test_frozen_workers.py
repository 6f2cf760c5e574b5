"""Frozen workers must not make a live kernel's pools look dead.

One real IPython kernel owns five 1-worker ``cpu`` pools. Every worker process is frozen with
SIGSTOP while this test process, playing the Jupyter server or another kernel, sweeps the registry
(``Registry.mark_lost_pools``) and reads the pools. The kernel is alive the whole time, so its
liveness beat must keep every pool's heartbeat fresh, however long each pool's housekeeping (worker
sync, utilization samples over ``Client.run``) waits on its frozen worker.

The freeze lasts 20 s with ``lost_after`` 5 s and a 0.5 s heartbeat: four lost_after periods, and
four times the 5 s timeout of a utilization sample, so every pool's housekeeping times out several
times over while the sweeper runs some 80 times. The 60 s of the original report tests nothing more
of ours (dask drops a silent worker only after its 5 min ``worker-ttl``) and would make the suite a
minute longer; ``GPUGEEK_FREEZE_SECONDS=60`` runs it that way.

When one heartbeat thread also ran each pool's housekeeping in line, this failed twice over: the
first pool, whose start waited for the forkserver longer than lost_after, was marked lost by the
next launch's sweep (starting pools were not beaten), and with the start warmed up, all five pools
were marked lost about 5 s into the freeze, their worker intervals closed.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpugeek_jupyter.store import PoolStatus, Registry
from support.kernel import KernelSession
from support.processes import alive, kill, wait_until_gone
from support.waiting import wait_for

pytestmark = pytest.mark.slow

POOLS = [f"frozen-{i}" for i in range(5)]
HEARTBEAT_S = 0.5
LOST_AFTER_S = 5.0
FREEZE_S = float(os.environ.get("GPUGEEK_FREEZE_SECONDS", "20"))


@pytest.fixture
def kernel(isolated_registry: Path) -> Iterator[KernelSession]:
    session = KernelSession(
        env={
            "GPUGEEK_REGISTRY": str(isolated_registry),
            "GPUGEEK_HEARTBEAT": str(HEARTBEAT_S),
            "GPUGEEK_LOST_AFTER": str(LOST_AFTER_S),
        }
    )
    kernel_pid = session.pid  # the provisioner forgets it once the test has shut the kernel down
    descendants: set[int] = set()
    try:
        assert session.run("%load_ext gpugeek_jupyter").error is None
        yield session
    finally:
        try:
            descendants = {p.pid for p in psutil.Process(kernel_pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            pass
        for pid in alive(descendants):  # a failed test must not leave a worker stopped forever
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        session.shutdown()
        kill(wait_until_gone(descendants, 30))


def _open_intervals(registry: Registry, pool_id: int) -> dict[int, int]:
    """Interval id -> worker pid of the pool's workers that are still counted as running."""
    return {w.id: w.pid for w in registry.worker_intervals(pool_id) if w.stopped_at is None and w.pid}


def _sweep_while_frozen(
    registry: Registry, pool_ids: dict[str, int], intervals: dict[str, dict[int, int]], seconds: float
) -> tuple[list[str], float, int]:
    """Sweep and read the registry as another process would, for ``seconds``.

    Returns what went wrong (pools marked lost or not ready, intervals closed), the oldest
    heartbeat seen (s) and the number of sweeps.
    """
    problems: list[str] = []
    oldest_beat, sweeps = 0.0, 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        problems += [f"{p.name} marked lost: {p.reason}" for p in registry.mark_lost_pools(LOST_AFTER_S)]
        sweeps += 1
        now = registry.clock()
        for record in registry.list_pools():
            if record.id not in pool_ids.values():
                continue
            oldest_beat = max(oldest_beat, now - record.heartbeat_at)
            if record.status is not PoolStatus.READY:
                problems.append(f"{record.name} is {record.status.value}: {record.reason}")
            closed = set(intervals[record.name]) - set(_open_intervals(registry, record.id))
            if closed:
                problems.append(f"{record.name}: worker interval(s) {sorted(closed)} closed while frozen")
        if problems:
            break  # the first sighting says it all; the worker must not stay frozen for nothing
        time.sleep(0.25)
    return problems, oldest_beat, sweeps


@pytest.mark.timeout(600)
def test_sigstopped_workers_never_make_a_live_kernels_pools_lost(
    kernel: KernelSession, isolated_registry: Path, scenario
) -> None:  # type: ignore[no-untyped-def]
    """SIGSTOP the workers of 5 pools of one kernel: no pool lost, all usable"""
    registry = Registry(isolated_registry)
    for name in POOLS:
        launched = kernel.run(f"%gpugeek_launch --gpu-type cpu --count 1 --name {name} --quiet", timeout=180)
        assert launched.error is None and not launched.stderr, launched.text
    launched_records = {name: registry.latest_pool(name) for name in POOLS}
    # a start can take longer than lost_after (the first one waits for the forkserver): starting
    # pools are beaten too, or the next launch's sweep finds them silent
    not_ready = {
        n: f"{r.status.value}: {r.reason}" for n, r in launched_records.items() if r.status is not PoolStatus.READY
    }
    if not_ready:
        scenario.record(survived=False, data_lost=len(not_ready))
    assert not_ready == {}
    pool_ids = {name: record.id for name, record in launched_records.items()}
    intervals = {name: _open_intervals(registry, pool_ids[name]) for name in POOLS}
    workers = [pid for by_interval in intervals.values() for pid in by_interval.values()]
    kernel_descendants = {p.pid for p in psutil.Process(kernel.pid).children(recursive=True)}
    assert len(workers) == len(POOLS) and set(workers) <= kernel_descendants, (intervals, kernel_descendants)

    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    try:
        # a signal is delivered asynchronously: wait until the kernel has stopped them all
        wait_for(
            lambda: all(psutil.Process(pid).status() == psutil.STATUS_STOPPED for pid in workers),
            10,
            "every worker stopping",
        )
        problems, oldest_beat, sweeps = _sweep_while_frozen(registry, pool_ids, intervals, FREEZE_S)
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGCONT)

    ran, stopped = {}, {}
    for name in POOLS:
        ran[name] = kernel.run(f"%%gpugeek_run --pool {name}\nprint('thawed', rank)", timeout=180).text
        stopped[name] = kernel.run(f"%gpugeek_stop {name}", timeout=120).text
    unusable = {name: text for name, text in ran.items() if "[rank 0] thawed 0" not in text}
    gone = wait_until_gone(workers, 30) == []
    records = {name: registry.pool_by_id(pool_ids[name]) for name in POOLS}
    stopped_cleanly = all((r.status, r.reason) == (PoolStatus.STOPPED, "stopped by the user") for r in records.values())
    intervals_closed_by_the_stop = all(
        w.stop_reason == "pool stopped"
        for name in POOLS
        for w in registry.worker_intervals(pool_ids[name])
        if w.id in intervals[name]
    )
    # what is left (the pool forkserver, multiprocessing's resource tracker) goes with the kernel
    descendants = {p.pid for p in psutil.Process(kernel.pid).children(recursive=True)} | set(workers)
    kernel_pid = kernel.pid
    kernel.shutdown()
    left = wait_until_gone(descendants | {kernel_pid}, 30)
    lost = sum(1 for r in records.values() if r.status is PoolStatus.LOST)
    scenario.record(survived=not problems and not unusable and stopped_cleanly and gone and not left, data_lost=lost)

    assert problems == [], f"after {sweeps} sweeps (oldest heartbeat {oldest_beat:.1f} s): {problems}"
    assert oldest_beat < LOST_AFTER_S, oldest_beat
    assert unusable == {}
    assert all(f"stopped pool '{name}' (stopped)" in stopped[name] for name in POOLS), stopped
    assert stopped_cleanly, {n: (r.status.value, r.reason) for n, r in records.items()}
    assert intervals_closed_by_the_stop
    assert gone and left == [], left
