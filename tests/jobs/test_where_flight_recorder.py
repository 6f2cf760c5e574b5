"""``%gpugeek_where`` adds torch's flight recorder (the newest collectives of each rank) when it is on."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.jobs.where import flight_recorder_lines

pytestmark = pytest.mark.slow

# rank 1 waits for a file after one all_reduce; rank 0 is then in its second all_reduce
CELL = """\
import os, time
t = torch.ones(1, device=device)
dist.all_reduce(t)
print(f"rank {rank} ready", flush=True)
if rank == 1:
    while not os.path.exists(release): time.sleep(0.05)
dist.all_reduce(t)
t.item()
"""


def test_ranks_with_the_same_record_are_one_line_and_none_without_it() -> None:
    record = [
        {"seq": 1, "op": "gloo:all_reduce", "state": "completed"},
        {"seq": 2, "op": "gloo:all_reduce", "state": "scheduled"},
    ]
    lines = flight_recorder_lines({0: {"flight_recorder": record}, 1: {"flight_recorder": record[:1]}, 2: None})
    assert lines == [
        "flight recorder, rank 0: #1 gloo:all_reduce completed, #2 gloo:all_reduce scheduled",
        "flight recorder, rank 1: #1 gloo:all_reduce completed",
    ]
    assert flight_recorder_lines({0: {"running": True}}) == []


def _report_while_waiting(pool: Any, tmp_path: Path, collective: str) -> str:
    import torch

    from gpugeek_jupyter.jobs import run_cell
    from gpugeek_jupyter.jobs.where import where_report

    release = tmp_path / "release"
    seen: list[str] = []
    results: list[Any] = []
    job = threading.Thread(
        target=lambda: results.append(
            run_cell(
                pool,
                CELL,
                {"torch": torch, "release": str(release)},
                timeout=120,
                on_output=lambda r, s, t: seen.append(t),
            )
        ),
        daemon=True,
    )
    job.start()
    try:
        deadline = time.monotonic() + 60
        while sum("ready" in line for line in seen) < 2:
            assert time.monotonic() < deadline and job.is_alive(), seen
            time.sleep(0.05)
        time.sleep(0.3)
        text = where_report(pool.name, timeout=5.0).format()
    finally:
        release.touch()
        job.join(60)
    assert results and results[0].ok, results
    assert f"{collective}:all_reduce" in text, text
    return text


@pytest.fixture
def recorded_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import gpugeek_jupyter

    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "64")  # workers get the launching process's environment
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="flight-recorder")
    yield pool
    pool.stop()


def test_a_where_report_shows_each_ranks_newest_collectives_when_the_recorder_is_on(
    recorded_pool: Any, tmp_path: Path
) -> None:
    text = _report_while_waiting(recorded_pool, tmp_path, "gloo")
    recorded = {line.split(":", 1)[0]: line for line in text.splitlines() if line.startswith("flight recorder, rank")}
    # after the group's own barrier (each build ends with one): rank 0 is in its second all_reduce,
    # rank 1 waits after its first
    line = recorded["flight recorder, rank 0"]
    assert line.count("gloo:all_reduce") == 2 and line.index("gloo:barrier") < line.index("gloo:all_reduce"), text
    assert recorded["flight recorder, rank 1"].count("gloo:all_reduce") == 1, text


@pytest.mark.gpu
def test_the_nccl_flight_recorder_is_in_the_report_on_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.catalog import load_catalog
    from gpugeek_jupyter.nvml import discover_gpus

    found = discover_gpus().devices
    catalog = load_catalog()
    gpu_type = next(g.name for g in catalog.gpus.values() if not g.is_cpu and g.matches_nvml_name(found[0].name))
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "64")
    pool = gpugeek_jupyter.launch(gpu_type=gpu_type, count=len(found), name="flight-recorder-gpu")
    try:
        if len(found) < 2:
            pytest.skip("the NCCL flight recorder test needs 2 GPUs (one rank waits while the other reduces)")
        text = _report_while_waiting(pool, tmp_path, "nccl")
    finally:
        pool.stop()
    recorded = {line.split(":", 1)[0]: line for line in text.splitlines() if line.startswith("flight recorder, rank")}
    # rank 0 is in its second all_reduce, rank 1 finished its first: each has its own line
    assert recorded["flight recorder, rank 0"].count("nccl:all_reduce") >= 2, text
    assert "nccl:all_reduce" in recorded["flight recorder, rank 1"], text
