"""From a lost worker to training again: restart at the same size (the worker replaced) against
restart at a smaller size (the worker gone for good, ``min_ranks``), in one run.

A 4-worker cpu pool runs a loop that checkpoints its step; mid-run one worker is lost:
- baseline: its process is SIGKILLed and its nanny starts a fresh one; the job restarts on 4 ranks;
- elastic: it is retired for good; after ``elastic_wait_seconds`` the job restarts on 3 ranks.
Measured: seconds from the loss to the first step of the restarted attempt (its print reaching the
driver). The elastic figure includes the wait, set here to 2 s (30 s by default).

    PYTHONPATH=. .venv/bin/python bench/jobs_elastic.py
"""

from __future__ import annotations

import os
import signal
import statistics
import tempfile
import threading
import time
from typing import Any

from gpugeek_jupyter.pools.scheduler_workers import connected_workers

ELASTIC_WAIT_S = 2.0

CELL = """\
import os, time
start = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
for step in range(start, 40):
    t = torch.ones(1)
    dist.all_reduce(t)
    if rank == 0:
        open(ckpt, "w").write(str(step + 1))
        print(f"step {step} world {world_size} attempt {os.environ['TORCHELASTIC_RESTART_COUNT']}", flush=True)
    time.sleep(0.1)
"""


def one_loss(pool: Any, for_good: bool) -> float:
    import torch

    from gpugeek_jupyter.jobs import run_cell

    ckpt = os.path.join(tempfile.mkdtemp(), "step")
    seen: list[tuple[float, str]] = []
    results: list[Any] = []
    job = threading.Thread(
        target=lambda: results.append(
            run_cell(
                pool,
                CELL,
                {"torch": torch, "ckpt": ckpt},
                max_restarts=2,
                min_ranks=3 if for_good else None,
                on_output=lambda r, s, text: seen.append((time.monotonic(), text)),
            )
        ),
        daemon=True,
    )
    job.start()
    while not any("step 5 " in text for _, text in seen):
        time.sleep(0.01)
    workers = connected_workers(pool.client)
    victim = sorted(workers)[-1]
    lost_at = time.monotonic()
    if for_good:
        pool.client.retire_workers(workers=[victim], close_workers=True, remove=True)
    else:
        pid = pool.client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
    job.join(300)
    assert results and results[0].ok, results
    again = next(at for at, text in seen if at > lost_at and "attempt 1" in text)
    return again - lost_at


def main() -> None:
    os.environ.setdefault("GPUGEEK_REGISTRY", os.path.join(tempfile.mkdtemp(), "bench.sqlite"))
    os.environ["GPUGEEK_ELASTIC_WAIT"] = str(ELASTIC_WAIT_S)
    import gpugeek_jupyter

    rows = []
    for for_good in (False, True):
        samples = []
        for attempt in range(2):
            pool = gpugeek_jupyter.launch(
                gpu_type="cpu", count=4, name=f"bench-elastic-{os.getpid()}-{int(for_good)}-{attempt}"
            )
            try:
                samples.append(one_loss(pool, for_good))
            finally:
                pool.stop()
        rows.append((for_good, statistics.median(samples)))
    baseline = rows[0][1]
    print(f"4-worker cpu pool, one worker lost mid-run; elastic wait {ELASTIC_WAIT_S:g} s; median of 2")
    print()
    print("| the lost worker | training again after | vs replaced |")
    print("|---|---:|---:|")
    for for_good, seconds in rows:
        name = (
            "gone for good, restart on 3 ranks (min_ranks=3)"
            if for_good
            else "replaced by its nanny, restart on 4 ranks (baseline)"
        )
        print(f"| {name} | {seconds:.2f} s | {seconds / baseline:.2f}x |")


if __name__ == "__main__":
    main()
