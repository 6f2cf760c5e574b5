"""Where every rank is, live: asked from a second process while a job runs (as a second kernel would)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from gpugeek_jupyter.jobs import run_cell
from gpugeek_jupyter.jobs.result import JobResult
from gpugeek_jupyter.jobs.where import WhereReport, group_where

# A second process: imports first, says "ready", then asks once per line read and prints the report.
ASKER = """
import json, sys, time
from gpugeek_jupyter.jobs.where import where_report
print("ready", flush=True)
for line in sys.stdin:
    started = time.monotonic()
    report = where_report(sys.argv[1], timeout=float(sys.argv[2]))
    print(json.dumps({**report.to_json(), "took_s": time.monotonic() - started}), flush=True)
"""


class Asker:
    """A fresh Python process that calls ``where_report`` for a pool when told to."""

    def __init__(self, pool_name: str, timeout: float = 5.0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", ASKER, pool_name, str(timeout)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "ready"

    def ask(self) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, f"the asking process ended (status {self.process.poll()})"
        reply: dict[str, Any] = json.loads(answer)
        return reply

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def asker(pool: Any) -> Iterator[Asker]:
    process = Asker(pool.name)
    yield process
    process.close()


class JobInBackground:
    """``run_cell`` on a thread, as a busy kernel runs it; output lines collected."""

    def __init__(self, pool: Any, cell: str, namespace: dict[str, Any]) -> None:
        self.lines: list[str] = []
        self.result: JobResult | None = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = run_cell(pool, cell, namespace, timeout=120, on_output=self._output)
            except BaseException as e:  # the test reads it
                self.error = e

        self.thread = threading.Thread(target=run, name="job-under-test", daemon=True)
        self.thread.start()

    def _output(self, rank: int, stream: str, text: str) -> None:
        self.lines.append(text)

    def wait_for_output(self, *marks: str, seconds: float = 60.0) -> None:
        deadline = time.monotonic() + seconds
        while not all(any(mark in line for line in self.lines) for mark in marks):
            assert self.thread.is_alive(), f"the job ended early: {self.error or self.result}"
            assert time.monotonic() < deadline, f"no {marks} in the job's output within {seconds} s: {self.lines}"
            time.sleep(0.05)

    def join(self, seconds: float) -> JobResult:
        self.thread.join(seconds)
        assert not self.thread.is_alive(), f"the job did not end within {seconds} s"
        assert self.error is None and self.result is not None, self.error
        return self.result


# rank 1 waits for a file on line 5, so every sample of its stack lands there; rank 0 reduces on line 6
WAIT_CELL = """\
import os, time
t = torch.ones(1)
print(f"rank {rank} ready", flush=True)
if rank == 1:
    while not os.path.exists(release): time.sleep(0.05)
dist.all_reduce(t)
t.item()
"""


@pytest.mark.timeout(180)
def test_a_second_process_sees_rank_0_in_all_reduce_and_rank_1_at_its_sleeping_line(
    pool: Any, asker: Asker, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    job = JobInBackground(pool, WAIT_CELL, {"torch": torch, "release": str(release)})
    try:
        job.wait_for_output("rank 0 ready", "rank 1 ready")
        reply = asker.ask()
    finally:
        release.touch()
    assert job.join(60).values == [2.0, 2.0]

    summary = reply["summary"]
    assert summary.startswith(f"job {reply['job_id']} on pool 'jobs', 2 ranks: "), summary
    assert "rank 0 waiting in dist.all_reduce at cell:6" in summary
    assert "rank 1 at cell:5" in summary
    ranks = {entry["rank"]: entry for entry in reply["ranks"]}
    assert ranks[0]["collective"] == "dist.all_reduce()" and ranks[1]["collective"] is None
    innermost_user = next(f for f in ranks[1]["frames"] if f["user"])
    assert innermost_user["code"] == "while not os.path.exists(release): time.sleep(0.05)"
    text = reply["text"]
    assert "    cell:6 in <module>: dist.all_reduce(t)" in text  # user frames first, with their code
    assert "-> torch/distributed/" in text  # the library frames it is calling, on one line
    assert "library frames not shown" in text  # the runner's frames are only counted


# rank 1 freezes its whole worker (event loop included) with the GIL held for FREEZE_S
FREEZE_S = 14
FROZEN_CELL = f"""\
import ctypes, time
t = torch.ones(1)
print(f"rank {{rank}} ready", flush=True)
if rank == 1:
    time.sleep(0.5)
    ctypes.PyDLL(None).sleep({FREEZE_S})
dist.all_reduce(t)
t.item()
"""


@pytest.mark.timeout(180)
def test_a_worker_frozen_with_the_gil_held_is_not_responding_and_the_report_does_not_wait(
    pool: Any, asker: Asker
) -> None:
    job = JobInBackground(pool, FROZEN_CELL, {"torch": torch})
    job.wait_for_output("rank 0 ready", "rank 1 ready")
    time.sleep(1.0)  # rank 1 is frozen from 0.5 s after its line
    asked = time.monotonic()
    reply = asker.ask()
    took = time.monotonic() - asked
    assert job.join(FREEZE_S + 60).values == [2.0, 2.0]  # it thawed and the job finished

    assert reply["took_s"] < 6.5 and took < 7.0, (reply["took_s"], took)
    summary = reply["summary"]
    assert "rank 0 waiting in dist.all_reduce at cell:7" in summary and "rank 1 not responding" in summary, summary
    frozen = next(entry for entry in reply["ranks"] if entry["rank"] == 1)
    assert frozen["responding"] is False and "no answer within 5 s" in frozen["reason"]
    assert "rank 1: not responding (no answer within 5 s" in reply["text"]


def test_no_job_running_is_one_line(pool: Any, asker: Asker) -> None:
    reply = asker.ask()
    assert reply["running"] is False and reply["ranks"] == []
    assert reply["text"] == "no job is running on pool 'jobs'"


# -- the grouping on its own (what the driver calls with where_rank's answers) ---------------------
def _frame(name: str, line: int, function: str = "<module>", code: str = "", user: bool = True) -> dict[str, Any]:
    return {"file": f"/src/{name}", "name": name, "line": line, "function": function, "code": code, "user": user}


def test_ranks_at_the_same_line_in_the_same_collective_are_one_group_largest_first() -> None:
    reduce = [
        _frame("torch/distributed/distributed_c10d.py", 2806, "all_reduce", user=False),
        _frame("train.py", 42, "step", "dist.all_reduce(loss)"),
        _frame("train.py", 80, "<module>", "step(batch)"),
    ]
    entries: dict[int, Any] = {
        r: {"running": True, "collective": "dist.all_reduce()", "frames": reduce} for r in range(1, 8)
    }
    entries[0] = {
        "running": True,
        "collective": None,
        "frames": [_frame("data.py", 17, "__getitem__", "time.sleep(1)")],
    }
    assert group_where(entries, detail=False) == (
        "ranks 1-7 waiting in dist.all_reduce at train.py:42; rank 0 at data.py:17 in __getitem__"
    )


def test_where_rank_answers_group_as_the_driver_has_them() -> None:
    entries = {
        0: {"running": True, "collective": "dist.barrier()", "at": "line 4: dist.barrier()"},
        1: {"running": True, "collective": None, "at": "/home/me/data.py, line 17: time.sleep(1)"},
        2: {"running": True, "collective": "dist.barrier()", "at": "line 4: dist.barrier()"},
        3: {"running": False},
        4: None,
    }
    text = group_where(entries)
    assert text.splitlines()[0] == (
        "ranks 0,2 waiting in dist.barrier at line 4; rank 1 at data.py:17; rank 3 finished; rank 4 not responding"
    )
    assert "rank 1:\n    /home/me/data.py, line 17: time.sleep(1)" in text


def test_a_report_without_a_job_is_one_line() -> None:
    assert WhereReport("dev", None).format() == "no job is running on pool 'dev'"
