"""Budget and idle stops against work that ignores signals: the pool still stops, nothing is left.

The stubborn code runs on real pool workers: it sets SIGTERM and SIGINT to "ignore" for the whole
worker process (through libc, as a C extension or a careless library could) and swallows every
exception, including the job's cancellation. Stopping the pool must still end every worker process.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

import gpugeek_jupyter
from gpugeek_jupyter.jobs import run_cell
from gpugeek_jupyter.runtime import get_pool_manager
from gpugeek_jupyter.store import JobStatus, PoolStatus
from support.processes import wait_until_gone
from support.waiting import poll

pytestmark = pytest.mark.slow

IGNORE_SIGNALS = (
    "import ctypes, signal\n"
    "libc = ctypes.CDLL(None)\n"
    "libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]\n"
    "libc.signal(int(signal.SIGTERM), 1)  # SIG_IGN, process-wide\n"
    "libc.signal(int(signal.SIGINT), 1)\n"
)
STUBBORN_CELL = IGNORE_SIGNALS + (
    "import time\n"
    "print('stubborn', flush=True)\n"
    "while True:\n"
    "    try:\n"
    "        time.sleep(0.05)\n"
    "    except BaseException:\n"
    "        pass\n"
)


def _stray_task_ignoring_signals(seconds: float) -> None:
    """A plain dask task (no gpugeek job) that makes its worker ignore SIGTERM and sleeps."""
    namespace: dict[str, Any] = {}
    exec(IGNORE_SIGNALS, namespace)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            time.sleep(0.05)
        except BaseException:
            pass


@pytest.mark.timeout(180)
def test_budget_stop_ends_a_job_that_ignores_signals_and_swallows_cancellation(scenario) -> None:  # type: ignore[no-untyped-def]
    """Budget and idle stop under a job that ignores signals"""
    import torch

    manager = get_pool_manager()
    # 2 workers at USD 720/h each: USD 0.40 a second; USD 4 lasts about 10 s
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="stubborn-budget", price=720, budget=4.0)
    pids = list(pool.client.run(os.getpid).values())
    started = threading.Event()
    outcome: list[Any] = []

    def on_output(rank: int, stream: str, text: str) -> None:
        if "stubborn" in text:
            started.set()

    runner = threading.Thread(
        target=lambda: outcome.append(run_cell(pool, STUBBORN_CELL, {"torch": torch}, on_output=on_output)), daemon=True
    )
    runner.start()
    job_started = started.wait(30)
    stopped = poll(lambda: not pool.record.status.is_live, 60)
    runner.join(60)
    left = wait_until_gone(pids, 30)
    record = pool.record
    job = manager.registry.list_jobs(pool_id=pool.id)
    survived = bool(
        job_started
        and stopped
        and not runner.is_alive()
        and not left
        and outcome
        and not outcome[0].ok
        and job
        and job[0].status is JobStatus.CANCELLED
    )
    scenario.record(survived=survived)

    assert job_started, "the stubborn job never started"
    assert stopped and record.status is PoolStatus.STOPPED, record
    assert record.reason.startswith("pool 'stubborn-budget' spent its budget"), record.reason
    assert not runner.is_alive(), "run_cell did not return after the pool was stopped under it"
    assert left == [], f"worker processes still alive after the budget stop: {left}"
    result = outcome[0]
    assert not result.ok and "spent its budget" in result.failure, result.failure
    assert job[0].status is JobStatus.CANCELLED and "spent its budget" in (job[0].failure_reason or ""), job[0]


@pytest.mark.timeout(180)
def test_idle_stop_ends_workers_that_ignore_signals(scenario) -> None:  # type: ignore[no-untyped-def]
    """Budget and idle stop under a job that ignores signals"""
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="stubborn-idle", idle_timeout=0.05)  # 3 s
    pids = list(pool.client.run(os.getpid).values())
    strays = pool.client.map(_stray_task_ignoring_signals, [600.0, 600.0], pure=False)  # asleep: 0 % busy
    stopped = poll(lambda: not pool.record.status.is_live, 60)
    left = wait_until_gone(pids, 30)
    record = pool.record
    del strays
    scenario.record(survived=bool(stopped and not left))

    assert stopped and record.status is PoolStatus.STOPPED, record
    assert record.reason.startswith("pool 'stubborn-idle' stopped itself: no job"), record.reason
    assert left == [], f"worker processes still alive after the idle stop: {left}"
