"""torch.compile in a cell: the first run against a re-run and a run after the workers were recycled.

A 2-rank pool runs a cell that compiles a small MLP with ``torch.compile`` and takes one training
step. Timed, each from the notebook's side:

- first run: a pool whose compile cache is empty (a new pool name, a fresh cache root);
- re-run: the same cell again on the same warm workers (the cell's code objects are new, so dynamo
  traces again; inductor's artefacts come from the pool's cache);
- after recycling: the same cell after a script job, which gives the pool fresh worker processes.

    PYTHONPATH=. .venv/bin/python bench/jobs_compile_cache.py
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

CELL = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
step = torch.compile(lambda x: model(x).square().mean())
loss = step(torch.randn(32, 64))
loss.backward()
float(loss)
"""


def main() -> None:
    work = Path(tempfile.mkdtemp())
    os.environ["XDG_CACHE_HOME"] = str(work / "cache")  # an empty cache root: the first run is cold
    os.environ.setdefault("GPUGEEK_REGISTRY", str(work / "registry.sqlite"))
    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell, run_script

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name=f"compile-{os.getpid()}")
    try:
        timings = {}
        for label in ("first run (empty cache)", "re-run, same workers"):
            start = time.perf_counter()
            result = run_cell(pool, CELL, {})
            timings[label] = time.perf_counter() - start
            result.raise_for_status()
        noop = work / "noop.py"
        noop.write_text("")
        run_script(pool, str(noop)).raise_for_status()  # the pool's workers are recycled after a script
        start = time.perf_counter()
        run_cell(pool, CELL, {}).raise_for_status()
        timings["after the workers were recycled"] = time.perf_counter() - start
    finally:
        pool.stop()
    baseline = timings["first run (empty cache)"]
    print("\ntorch.compile in a cell (2 cpu ranks, MLP 64-256-10, one step)\n")
    print("| run | s | vs first run |")
    print("|---|---:|---:|")
    for label, seconds in timings.items():
        print(f"| {label} | {seconds:.2f} | {seconds / baseline:.2f}x |")
    print(f"\ncache: $XDG_CACHE_HOME/gpugeek-jupyter/compile/<pool>/ (here {work / 'cache'})")


if __name__ == "__main__":
    main()
