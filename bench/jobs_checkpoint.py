"""Checkpoint save and load: sharded DCP (``sharded=True``) against the rank-0 ``torch.save`` one.

The same FSDP model (an MLP of 8 x Linear(1024, 1024), 8.4 M parameters) with its AdamW state, about
100 MB, at 2 and 4 cpu ranks, one fresh pool each. Timed from the first rank's start to the last
rank's end (a barrier before and after), median of ``--repeat`` saves and loads, in one cell:

- rank 0's checkpoint: the state gathered to rank 0, which writes one ``torch.save`` file; every
  rank reads the whole file back and keeps its shards (``gg.checkpoint(dir, ...)``);
- DCP: every rank writes and reads only its own shards (``gg.checkpoint(dir, ..., sharded=True)``);
- DCP asynchronous: training is held up by ``save`` only while the state is copied to memory; the
  files are written in the background (``asynchronous=True``) and are whole when ``wait()`` returns.

    PYTHONPATH=. .venv/bin/python bench/jobs_checkpoint.py [--repeat 3] [--ranks 2 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

CELL = """
import statistics, time
import torch
torch.manual_seed(0)
model = gg.fsdp(torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]))
optimizer = torch.optim.AdamW(model.parameters())
model(torch.randn(4, 1024)).sum().backward()
optimizer.step()  # the optimizer's state exists: it is saved too

def timed(call):
    dist.barrier()
    start = time.perf_counter()
    call()
    dist.barrier()
    return time.perf_counter() - start

times = {}
for kind, options in (("rank 0", {}), ("DCP", {"sharded": True}), ("DCP async", {"sharded": True, "asynchronous": True})):
    ckpt = gg.checkpoint(f"{base}/{world_size}/{kind}", model=model, optimizer=optimizer, keep=1, **options)
    saves, written, loads = [], [], []
    for step in range(1, REPEAT + 1):
        saves.append(timed(lambda: ckpt.save(step)))
        written.append(saves[-1] + timed(ckpt.wait))  # wait(): nothing pending unless asynchronous
        loads.append(timed(ckpt.load))
    times[kind] = (statistics.median(saves), statistics.median(written), statistics.median(loads))
size = sum(p.stat().st_size for p in Path(f"{base}/{world_size}/DCP").rglob("*") if p.is_file())
(times, size)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpugeek-bench-ckpt-"))
    os.environ.setdefault("GPUGEEK_REGISTRY", str(work / "registry.sqlite"))
    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell

    rows = []
    try:
        for ranks in args.ranks:
            pool = gpugeek_jupyter.launch(gpu_type="cpu", count=ranks, name=f"bench-ckpt-{ranks}-{os.getpid()}")
            try:
                namespace = {"base": str(work), "REPEAT": args.repeat, "Path": Path}
                result = run_cell(pool, CELL, namespace, rank0=True).raise_for_status()
                times, size = result.values[0]
                rows.append((ranks, times, size))
            finally:
                pool.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nCheckpoint save/load, FSDP MLP 8 x 1024^2 + AdamW state, median of {args.repeat}, cpu ranks\n")
    print("| ranks | checkpoint | MB | training held s | on disk after s | load s | held vs rank 0 | load vs rank 0 |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    names = {"rank 0": "rank 0 `torch.save`", "DCP": "DCP, sharded", "DCP async": "DCP, sharded, asynchronous"}
    for ranks, times, size in rows:
        base_save, _, base_load = times["rank 0"]
        for kind, (save, written, load) in times.items():
            print(
                f"| {ranks} | {names[kind]} | {size / 2**20:.0f} | {save:.3f} | {written:.3f} | {load:.3f} | "
                f"{save / base_save:.2f}x | {load / base_load:.2f}x |"
            )


if __name__ == "__main__":
    main()
