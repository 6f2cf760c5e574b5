"""Jobs at 2, 4 and 8 ranks: warm dispatch, process-group (re)build and output throughput.

For each size a fresh local cpu pool of that many workers, and, measured in the same run:

- warm dispatch: ``run_cell(pool, "dist.barrier()")`` on the warm process group, against raw
  ``client.run`` of a gloo barrier on the same workers and group (the baseline);
- a warm cell as ``%%gpugeek_run`` shows it past 2 ranks (output grouped across ranks), against the
  same cell at the smallest size of the run (the target: 8 ranks within 1.5x of 2);
- process-group (re)build: a cell after a failed one (a failure drops the group, so the next cell
  builds a new one: a fresh rendezvous store, ``init_process_group``), against the cell on a warm
  group;
- output throughput: a cell where every rank prints 2,000 lines, lines per second reaching the
  notebook's callback, against the same printing through raw ``client.run`` (output stays on the
  workers there: the cost of printing itself).

On this 2-core machine 8 ranks share 2 cores; take the ratios at each size, not the absolutes.

    PYTHONPATH=. .venv/bin/python bench/jobs_scale.py [--sizes 2 4 8] [--repeat 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from _common import median_seconds

LINES = 2000


def _barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


def _print_lines() -> None:
    import io
    import sys

    buffer = io.StringIO()
    saved, sys.stdout = sys.stdout, buffer
    try:
        for i in range(LINES):
            print(f"line {i}")
    finally:
        sys.stdout = saved


def measure(size: int, repeat: int) -> tuple[list[tuple[str, float, float]], float, float]:
    """The rows of one size, its warm grouped cell's seconds and its raw barrier's."""
    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell
    from gpugeek_jupyter.jobs.output import output_writer

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=size, name=f"bench-scale-{size}-{os.getpid()}")
    try:
        assert run_cell(pool, "dist.barrier()", {}).ok
        client = pool.client
        raw = median_seconds(lambda: client.run(_barrier), repeat)
        warm = median_seconds(lambda: run_cell(pool, "dist.barrier()", {}).raise_for_status(), repeat)

        def grouped_cell() -> None:
            writer = output_writer("grouped", size)
            try:
                run_cell(pool, "dist.barrier()", {}, on_output=writer).raise_for_status()
            finally:
                writer.close()

        grouped = median_seconds(grouped_cell, repeat)

        def rebuild() -> None:
            run_cell(pool, "raise RuntimeError('drop the group')", {}, stream=False)
            start = time.perf_counter()
            run_cell(pool, "dist.barrier()", {}).raise_for_status()
            rebuilds.append(time.perf_counter() - start)

        rebuilds: list[float] = []
        for _ in range(max(3, repeat // 5)):
            rebuild()
        lines: list[int] = []
        cell = f"for i in range({LINES}):\n    print(f'line {{i}}')"
        start = time.perf_counter()
        run_cell(pool, cell, {}, on_output=lambda rank, stream, text: lines.append(text.count("\n"))).raise_for_status()
        ours_lps = sum(lines) / (time.perf_counter() - start)
        start = time.perf_counter()
        client.run(_print_lines)
        raw_lps = LINES * size / (time.perf_counter() - start)
    finally:
        pool.stop()
    rebuild_s = statistics.median(rebuilds)
    rows = [
        (f"{size} ranks: warm dispatch, ms (vs raw client.run barrier)", warm * 1e3, warm / raw),
        (f"{size} ranks: process-group rebuild + barrier, ms (vs warm cell)", rebuild_s * 1e3, rebuild_s / warm),
        (
            f"{size} ranks: output lines/s reaching the notebook (vs printing on the workers)",
            ours_lps,
            ours_lps / raw_lps,
        ),
    ]
    return rows, grouped, raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    os.environ.setdefault("GPUGEEK_REGISTRY", os.path.join(tempfile.mkdtemp(), "bench.sqlite"))
    rows: list[tuple[str, float, float]] = []
    grouped: dict[int, float] = {}
    raw: dict[int, float] = {}
    for size in args.sizes:
        size_rows, grouped[size], raw[size] = measure(size, args.repeat)
        rows += size_rows
    smallest = min(args.sizes)
    rows += [
        (
            f"{size} ranks: warm grouped cell, ms (vs the {smallest}-rank one)",
            seconds * 1e3,
            seconds / grouped[smallest],
        )
        for size, seconds in grouped.items()
    ]
    rows += [  # how the floor grows: more processes than cores
        (
            f"{size} ranks: raw client.run barrier, ms (vs the {smallest}-rank one)",
            seconds * 1e3,
            seconds / raw[smallest],
        )
        for size, seconds in raw.items()
    ]
    print("\nJobs at scale, cpu ranks (gloo), one fresh pool per size\n")
    print("| what | figure | vs baseline |")
    print("|---|---:|---:|")
    for label, figure, ratio in rows:
        print(f"| {label} | {figure:,.1f} | {ratio:.2f}x |")
    print(
        f"\ntarget: the warm grouped cell at 8 ranks <= 1.5x the {smallest}-rank one (8 ranks share {os.cpu_count()} cores here)"
    )


if __name__ == "__main__":
    main()
