"""Warm job latency: a trivial ``%%gpugeek_run`` cell with a barrier, against raw dask round trips.

On a warm 2-worker cpu pool (gloo), measured in one run:

- raw ``client.run(f)`` on both workers: f does nothing / a gloo ``barrier`` / a gloo ``all_reduce``
  on the same warm process group (the baseline of the target is the all_reduce one);
- ``%%gpugeek_run`` with ``dist.barrier()`` through IPython (magic parsing, cell shipping, job
  record in the registry, output channel, results), and the same through ``run_cell()``.

ipyparallel is not installed here; its ``%px`` execute on two engines measured 4.85 ms on this
machine kind before this code existed (cited, not measured).

    PYTHONPATH=. .venv/bin/python bench/jobs_latency.py [--repeat 700] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections.abc import Callable

from _common import median_seconds

IPYPARALLEL_EXECUTE_MS = 4.85  # measured before this code existed, same machine kind


def median_ms_of(call: Callable[[], object], repeat: int) -> float:
    return median_seconds(call, repeat, warmup=10) * 1e3


def _noop() -> None:
    return None


def _barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


def _all_reduce() -> None:
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=700)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    os.environ.setdefault("GPUGEEK_REGISTRY", os.path.join(tempfile.mkdtemp(), "bench.sqlite"))

    from IPython.core.interactiveshell import InteractiveShell

    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell

    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext gpugeek_jupyter", store_history=False)
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name=f"bench-latency-{os.getpid()}")
    try:
        assert run_cell(pool, "dist.barrier()", {}).ok  # builds the warm process group
        client = pool.client
        rows: list[tuple[str, float]] = []
        magic = "%%gpugeek_run\ndist.barrier()"

        def through_magic() -> None:
            result = shell.run_cell(magic, store_history=False)
            assert result.success, result.error_in_exec

        # interleave the baselines with ours so that drift on a shared machine hits both
        raw_noop, raw_barrier, raw_all_reduce, ours_magic, ours_api = [], [], [], [], []
        per_round = max(10, args.repeat // args.rounds)
        for _ in range(args.rounds):
            raw_noop.append(median_ms_of(lambda: client.run(_noop), per_round))
            raw_barrier.append(median_ms_of(lambda: client.run(_barrier), per_round))
            raw_all_reduce.append(median_ms_of(lambda: client.run(_all_reduce), per_round))
            ours_magic.append(median_ms_of(through_magic, per_round))
            ours_api.append(median_ms_of(lambda: run_cell(pool, "dist.barrier()", {}), per_round))
        baseline = statistics.median(raw_all_reduce)
        rows = [
            ("dask client.run, no-op", statistics.median(raw_noop)),
            ("dask client.run, gloo barrier", statistics.median(raw_barrier)),
            ("dask client.run, gloo all_reduce (baseline)", baseline),
            ("%%gpugeek_run: dist.barrier()", statistics.median(ours_magic)),
            ("run_cell(): dist.barrier()", statistics.median(ours_api)),
            ("ipyparallel %px execute (cited)", IPYPARALLEL_EXECUTE_MS),
        ]
        print(
            f"\nWarm job latency, 2 cpu workers (gloo): median over {args.rounds} interleaved rounds of "
            f"{per_round} calls each\n"
        )
        print("| what | ms | vs baseline |")
        print("|---|---:|---:|")
        for label, ms in rows:
            print(f"| {label} | {ms:.2f} | {ms / baseline:.2f}x |")
        print(f"\ntarget: %%gpugeek_run <= 1.5x baseline and < ipyparallel's {IPYPARALLEL_EXECUTE_MS} ms")
    finally:
        pool.stop()


if __name__ == "__main__":
    main()
