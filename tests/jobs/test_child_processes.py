"""Ranks may start child processes as under torchrun (DataLoader workers, pools of processes), and
those children end with the job's purpose: no orphan is left after a cancel, a timeout, a script, or a
worker that is killed."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpugeek_jupyter.jobs import run_cell, run_script
from support.waiting import poll

DATALOADER_CELL = """
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
ds = TensorDataset(torch.arange(64.0).reshape(32, 2))
loader = DataLoader(ds, batch_size=4, num_workers=2, sampler=DistributedSampler(ds, shuffle=False),
                    persistent_workers=PERSISTENT)
total = torch.tensor([sum(float(b[0].sum()) for b in loader)])
pids = sorted(w.pid for w in getattr(loader._iterator, "_workers", [])) if PERSISTENT else []
dist.all_reduce(total)
(total.item(), len(pids))
"""


@pytest.mark.parametrize("persistent", [False, True])
def test_dataloader_with_worker_processes_runs_in_a_cell(pool: Any, persistent: bool) -> None:
    result = run_cell(pool, DATALOADER_CELL.replace("PERSISTENT", str(persistent)), {})
    assert result.ok, result.report()
    assert [total for total, _ in result.values] == [2016.0, 2016.0]
    assert [workers for _, workers in result.values] == ([2, 2] if persistent else [0, 0])


def test_process_pools_and_torch_multiprocessing_run_in_a_cell(pool: Any) -> None:
    cell = """
import multiprocessing, concurrent.futures, torch.multiprocessing as tmp
with multiprocessing.Pool(2) as p:
    squares = p.map(abs, [-1, -2, -3])
with concurrent.futures.ProcessPoolExecutor(2) as ex:
    negatives = list(ex.map(abs, [-4, -5]))
child = tmp.get_context("spawn").Process(target=abs, args=(-6,))
child.start(); child.join()
(squares, negatives, child.exitcode)
"""
    result = run_cell(pool, cell, {})
    assert result.ok, result.report()
    assert result.values == [([1, 2, 3], [4, 5], 0)] * 2


def test_gg_shard_with_num_workers_loads_this_ranks_shard(pool: Any) -> None:
    cell = (
        "import torch\nx = torch.arange(16.0)\n"
        "sorted(v for (b,) in gg.shard((x,), batch_size=2, shuffle=False, num_workers=2) for v in b.tolist())"
    )
    result = run_cell(pool, cell, {})
    assert result.ok, result.report()
    assert sorted(result.values[0] + result.values[1]) == [float(v) for v in range(16)]
    assert set(result.values[0]).isdisjoint(result.values[1])


SLEEPING_CHILDREN = """
import multiprocessing, os, time
kids = [multiprocessing.Process(target=time.sleep, args=(600,), daemon=daemon) for daemon in (True, False)]
for kid in kids:
    kid.start()
with open(os.path.join(OUT, f"pids-{rank}"), "w") as f:
    f.write(" ".join(str(kid.pid) for kid in kids))
time.sleep(600)
"""


def _child_pids(directory: Path) -> list[int]:
    return [int(pid) for path in directory.glob("pids-*") for pid in path.read_text().split()]


def _gone(pids: list[int]) -> bool:
    return all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE for pid in pids)


def test_a_timed_out_cell_ends_the_processes_it_started(pool: Any, tmp_path: Path) -> None:
    result = run_cell(pool, SLEEPING_CHILDREN.replace("OUT", repr(str(tmp_path))), {}, timeout=8)
    assert result.timed_out
    pids = _child_pids(tmp_path)
    assert len(pids) == 4
    assert poll(lambda: _gone(pids), 15), [p for p in pids if psutil.pid_exists(p)]
    assert run_cell(pool, "rank", {}).values == [0, 1]  # the pool goes on


def test_a_script_ends_the_processes_it_left_behind(pool: Any, tmp_path: Path) -> None:
    script = tmp_path / "leave_children.py"
    script.write_text(
        SLEEPING_CHILDREN.replace("OUT", repr(str(tmp_path)))
        .replace("time.sleep(600)\n", "")
        .replace("rank", "int(os.environ['RANK'])")
        .replace("daemon) for", "True) for")
    )
    result = run_script(pool, str(script))
    assert result.ok, result.report()
    pids = _child_pids(tmp_path)
    assert len(pids) == 4
    assert poll(lambda: _gone(pids), 15), [p for p in pids if psutil.pid_exists(p)]


def test_children_of_a_killed_worker_die_with_it(pool: Any, tmp_path: Path) -> None:
    cell = (
        "import multiprocessing, os, time\n"
        "kid = multiprocessing.get_context('fork').Process(target=time.sleep, args=(600,), daemon=True)\n"
        "kid.start()\n(os.getpid(), kid.pid)"
    )
    result = run_cell(pool, cell, {})
    assert result.ok, result.report()
    worker, kid = result.values[1]
    os.kill(worker, signal.SIGKILL)
    assert poll(lambda: _gone([kid]), 15)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the nanny starts a fresh worker; the pool heals
        healed = run_cell(pool, "rank", {})
        if healed.ok:
            break
    assert healed.values == [0, 1]
