"""One pool, many notebooks: jobs from several real kernels wait their turn in the pool's queue.

The pool is this test's (as another notebook's or the server's would be); the kernels attach to it
with ``%gpugeek_use`` and run cells on it, as users sharing a pool do.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.kernel import KernelSession, magics_kernel

pytestmark = pytest.mark.slow

SLOW_CELL = "%%gpugeek_run\nimport time\ntime.sleep({seconds})\nprint('{name} done on', rank)"


def _attached(registry: Path, notebook: str) -> Any:
    env = {"GPUGEEK_REGISTRY": str(registry), "GPUGEEK_HEARTBEAT": "0.5", "JPY_SESSION_NAME": f"/work/{notebook}"}
    return magics_kernel(env)


@pytest.fixture
def kernels(isolated_registry: Path, cpu_pool: Any) -> Iterator[list[KernelSession]]:
    """Three kernels (notebooks a.ipynb, b.ipynb, c.ipynb), each using the test's pool."""
    with (
        _attached(isolated_registry, "a.ipynb") as a,
        _attached(isolated_registry, "b.ipynb") as b,
        _attached(isolated_registry, "c.ipynb") as c,
    ):
        for session in (a, b, c):
            used = session.run("%gpugeek_use test-pool")
            assert used.error is None, used.text
        yield [a, b, c]


def _jobs(pool: Any) -> list[Any]:
    return sorted(pool.registry.list_jobs(pool_id=pool.id), key=lambda j: j.queued_at or 0)


def _jobs_once_ended(pool: Any, count: int, timeout: float = 10.0) -> list[Any]:
    """The pool's jobs once ``count`` of them have ended: a brief job's end is written behind, by its
    kernel's next write or within a moment (``store._behind.WRITE_WITHIN_S``)."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = _jobs(pool)
        if sum(j.status.is_final for j in jobs) >= count or time.monotonic() > deadline:
            return jobs
        time.sleep(0.02)


def _wait_for_running(pool: Any, count: int = 1, timeout: float = 60.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [j for j in _jobs(pool) if j.status.value == "running"]
        if len(running) >= count:
            return running
        time.sleep(0.05)
    raise AssertionError(f"no running job after {timeout} s: {_jobs(pool)}")


def _wait_for_queued(pool: Any, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(j.status.value == "queued" for j in _jobs(pool)) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"not {count} queued jobs after {timeout} s: {_jobs(pool)}")


def test_a_second_notebooks_cell_waits_for_the_running_one_and_both_results_are_intact(
    kernels: list[KernelSession], cpu_pool: Any
) -> None:
    a, b, _ = kernels
    first = a.execute(SLOW_CELL.format(seconds=5, name="A"))
    _wait_for_running(cpu_pool)
    second = b.execute("%%gpugeek_run\nprint('B ran on', rank)")
    a_result, b_result = a.collect(first, timeout=120), b.collect(second, timeout=120)

    assert a_result.error is None, a_result.text
    assert "A done on 0" in a_result.text and "A done on 1" in a_result.text, a_result.text
    assert b_result.error is None, b_result.text
    assert "B ran on 0" in b_result.text and "B ran on 1" in b_result.text, b_result.text
    job_a, job_b = _jobs_once_ended(cpu_pool, 2)
    waiting = [d["text/plain"] for d in b_result.displays if "is waiting for" in d.get("text/plain", "")]
    assert waiting, b_result.displays
    assert re.search(
        rf"pool 'test-pool' is busy: {job_b.id} is waiting for {job_a.id} \(notebook a\.ipynb, running \d+ s\); next in line",
        waiting[0],
    ), waiting
    # nobody's workers were taken: no restarts, no "stuck" workers, and B ran after A
    for text in (a_result.text, b_result.text):
        assert "stuck" not in text and "restarting" not in text and "died" not in text, text
    assert (job_a.status.value, job_b.status.value) == ("succeeded", "succeeded")
    assert job_b.started_at >= job_a.ended_at
    assert job_b.waited_s > 2.0 and job_a.waited_s < 1.0


def test_three_notebooks_run_in_the_order_they_arrived(kernels: list[KernelSession], cpu_pool: Any) -> None:
    a, b, c = kernels
    sent = [a.execute(SLOW_CELL.format(seconds=3, name="A"))]
    _wait_for_running(cpu_pool)
    sent.append(b.execute(SLOW_CELL.format(seconds=1, name="B")))
    _wait_for_queued(cpu_pool, 1)
    sent.append(c.execute(SLOW_CELL.format(seconds=1, name="C")))
    results = [session.collect(msg, timeout=120) for session, msg in zip(kernels, sent, strict=True)]

    for name, result in zip("ABC", results, strict=True):
        assert result.error is None and f"{name} done on 1" in result.text, result.text
    jobs = _jobs_once_ended(cpu_pool, 3)
    assert [j.submitter for j in jobs] == ["notebook a.ipynb", "notebook b.ipynb", "notebook c.ipynb"]
    assert jobs[0].ended_at <= jobs[1].started_at and jobs[1].ended_at <= jobs[2].started_at, jobs
    c_said = " ".join(d.get("text/plain", "") for d in results[2].displays)
    assert "1 more job ahead" in c_said, c_said  # while A ran, B was ahead of C too


def test_interrupting_a_waiting_cell_takes_it_out_of_the_queue_and_harms_nobody(
    kernels: list[KernelSession], cpu_pool: Any
) -> None:
    a, b, _ = kernels
    first = a.execute(SLOW_CELL.format(seconds=5, name="A"))
    _wait_for_running(cpu_pool)
    second = b.execute("%%gpugeek_run\nprint('B ran')")
    _wait_for_queued(cpu_pool, 1)
    b.manager.interrupt_kernel()
    b_result = b.collect(second, timeout=60)
    a_result = a.collect(first, timeout=120)

    assert a_result.error is None and "A done on 1" in a_result.text, a_result.text
    assert "B ran" not in b_result.text
    assert b_result.error is not None and b_result.error["ename"] == "JobInterrupted", b_result.text
    job_a, job_b = _jobs(cpu_pool)
    assert job_a.status.value == "succeeded"
    assert job_b.status.value == "cancelled"
    assert job_b.failure_reason.startswith(f"cancelled while queued (waiting for {job_a.id} (notebook a.ipynb")
    assert job_b.started_at == job_b.ended_at  # it never ran: its run (and its cost) is empty
    assert "cancelled while queued" in b_result.error["evalue"]


def test_a_killed_kernels_job_frees_the_pool_for_the_one_waiting(kernels: list[KernelSession], cpu_pool: Any) -> None:
    a, b, _ = kernels
    a.execute(SLOW_CELL.format(seconds=60, name="A"))
    _wait_for_running(cpu_pool)
    second = b.execute("%%gpugeek_run\nprint('B ran on', rank)")
    _wait_for_queued(cpu_pool, 1)
    killed_at = time.monotonic()
    a.kill()
    b_result = b.collect(second, timeout=90)

    assert b_result.error is None and "B ran on 1" in b_result.text, b_result.text
    job_a, job_b = _jobs_once_ended(cpu_pool, 2)
    assert job_a.status.value == "failed"
    assert job_a.failure_reason == "its submitter ended (the process that ran or queued it is gone)"
    assert job_b.status.value == "succeeded"
    # the liveness period: the dead submitter is seen at once, its ranks ended after the grace at most
    assert job_b.started_at - job_a.ended_at < 1.0
    assert time.monotonic() - killed_at < 30.0


KILLED_AFTER_TWO_JOBS = """
import os, signal, gpugeek_jupyter
from gpugeek_jupyter.jobs import run_cell
pool = gpugeek_jupyter.current_pool()
if run_cell(pool, "import time\\ntime.sleep(1.2)", {}).ok and run_cell(pool, "pass", {}).ok:
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_kernel_killed_right_after_its_jobs_keeps_the_end_of_the_one_that_ran_past_a_second(
    kernels: list[KernelSession], cpu_pool: Any
) -> None:
    """A job that ran ENDED_BEHIND_WITHIN_S or longer has its end written before its result returns;
    a briefer one's end is written behind, and a kill right after loses it: its row stays running
    until the next job to queue ends it as a dead submitter's."""
    a, b, _ = kernels
    a.execute(KILLED_AFTER_TWO_JOBS)
    assert a.wait_for_exit() == -signal.SIGKILL, "the cell did not get to kill its kernel: a job failed"
    long_job, brief_job = _jobs(cpu_pool)
    assert long_job.status.value == "succeeded"
    assert brief_job.status.value == "running"

    after = b.run("%%gpugeek_run\nprint('B ran on', rank)")

    assert after.error is None and "B ran on 1" in after.text, after.text
    long_job, brief_job, job_b = _jobs_once_ended(cpu_pool, 3)
    assert (long_job.status.value, job_b.status.value) == ("succeeded", "succeeded")
    assert brief_job.status.value == "failed"
    assert brief_job.failure_reason == "its submitter ended (the process that ran or queued it is gone)"


def test_no_wait_fails_at_once_naming_the_job_that_holds_the_pool(kernels: list[KernelSession], cpu_pool: Any) -> None:
    a, b, _ = kernels
    first = a.execute(SLOW_CELL.format(seconds=3, name="A"))
    [job_a] = _wait_for_running(cpu_pool)
    refused = b.run("%%gpugeek_run --no-wait\nprint('B ran')", timeout=30)
    a.collect(first, timeout=120)

    assert refused.error is None, refused.text  # a UsageError: one line, no traceback
    assert re.fullmatch(
        rf"UsageError: pool 'test-pool' is busy with {job_a.id} \(notebook a\.ipynb, running \d+ s\); "
        r"run again without --no-wait to wait your turn\n",
        refused.stderr,
    ), refused.stderr
    assert [j.id for j in _jobs(cpu_pool)] == [job_a.id]  # the refused job left no record


def test_a_running_job_and_a_queued_one_are_cancelled_from_other_processes(
    kernels: list[KernelSession], cpu_pool: Any
) -> None:
    """Notebook c cancels a's running job with %gpugeek_cancel; this test's own process cancels b's
    queued one with job(id).cancel(); both kernels hear it through the pool's scheduler."""
    import gpugeek_jupyter

    a, b, c = kernels
    first = a.execute(SLOW_CELL.format(seconds=120, name="A"))
    [job_a] = _wait_for_running(cpu_pool)
    second = b.execute("%%gpugeek_run\nprint('B ran on', rank)")
    _wait_for_queued(cpu_pool, 1)
    job_b = next(j for j in _jobs(cpu_pool) if j.status.value == "queued")

    assert gpugeek_jupyter.job(job_b.id).cancel("cancelled by the test").status() == "cancelled"
    b_result = b.collect(second, timeout=60)
    started = time.monotonic()
    said = c.run(f"%gpugeek_cancel {job_a.id}", timeout=60)
    a_result = a.collect(first, timeout=60)

    assert "B ran" not in b_result.text
    assert b_result.error is not None and "cancelled by the test" in b_result.error["evalue"], b_result.text
    assert said.error is None, said.text
    # time.sleep ignores the cancel: the ranks' workers are ended, as for an interrupt in a's own kernel
    assert said.stdout.startswith(
        f"[gpugeek] {job_a.id} cancelled: job {job_a.id} was cancelled from notebook c.ipynb;"
    )
    assert time.monotonic() - started < 20.0  # the rank's sleep is not waited out
    assert "A done" not in a_result.text
    assert a_result.error is not None and "cancelled from notebook c.ipynb" in a_result.error["evalue"], a_result.text
    rows = {j.id: j for j in _jobs(cpu_pool)}
    assert rows[job_a.id].status.value == "cancelled" and rows[job_b.id].status.value == "cancelled"
    assert rows[job_b.id].failure_reason.startswith("cancelled while queued: cancelled by the test (waiting for")
    # the pool serves the next cell as before
    again = a.run("%%gpugeek_run\nprint('A again on', rank)", timeout=120)
    assert again.error is None and "A again on 1" in again.text, again.text
    ended = c.run(f"%gpugeek_cancel {job_a.id}", timeout=30)
    assert ended.stdout.strip() == f"[gpugeek] {job_a.id} has already ended (cancelled)", ended.text
