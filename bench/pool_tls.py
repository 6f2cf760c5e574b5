"""What TLS with per-pool credentials costs: local pools with ``GpugeekConfig.pool_tls`` on and off.

In one run, interleaved (a TLS pool, then a plain one, each round), on fresh 2-worker cpu pools:

- pool start: ``launch()`` until both workers are up (with TLS: the CA, the certificate and the
  key made and written first, and every connection's handshake);
- of it, making the credentials alone (``create_pool_credentials``, median of 50);
- warm dispatch: ``run_cell(pool, "dist.barrier()")`` on the warm process group (dask messages
  over TLS or TCP; the barrier itself is gloo's either way);
- raw ``client.run`` of a no-op on both workers (one dask round trip, no job machinery);
- DDP throughput: a cell that trains an MLP (784-1024-1024-10, batch 64 per rank, SGD) with
  DDP; gradients go over gloo, not dask, so this only shows that TLS costs the training nothing.

    PYTHONPATH=. .venv/bin/python bench/pool_tls.py [--rounds 3] [--repeat 200] [--steps 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _common import median_seconds

DDP_CELL = """
import time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))
for step in range(STEPS + 5):
    if step == 5:
        dist.barrier(); started = time.perf_counter()
    opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
dist.barrier()
steps_per_s = STEPS / (time.perf_counter() - started)
steps_per_s
"""


def _noop() -> None:
    return None


def _configure(tls: bool) -> None:
    from gpugeek_jupyter import config

    os.environ["GPUGEEK_POOL_TLS"] = "1" if tls else "0"
    config.set_config(None)


def one_round(tls: bool, repeat: int, steps: int) -> dict[str, float]:
    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell

    _configure(tls)
    started = time.perf_counter()
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name=f"bench-tls-{'on' if tls else 'off'}-{os.getpid()}")
    start_s = time.perf_counter() - started
    try:
        assert pool.scheduler_address.startswith("tls://" if tls else "tcp://"), pool.scheduler_address
        assert run_cell(pool, "dist.barrier()", {}).ok  # builds the warm process group

        def barrier() -> None:
            assert run_cell(pool, "dist.barrier()", {}, stream=False).ok

        dispatch_ms = median_seconds(barrier, repeat, warmup=10) * 1e3
        raw_ms = median_seconds(lambda: pool.client.run(_noop), repeat, warmup=10) * 1e3
        names: dict[str, Any] = {}
        result = run_cell(pool, DDP_CELL.replace("STEPS", str(steps)), names, stream=False)
        assert result.ok, result
        throughput = float(result.values[0])
    finally:
        pool.stop()
    return {"start_s": start_s, "dispatch_ms": dispatch_ms, "raw_ms": raw_ms, "steps_per_s": throughput}


def credentials_ms(samples: int = 50) -> float:
    from gpugeek_jupyter.pools.credentials import create_pool_credentials, remove_pool_credentials
    from gpugeek_jupyter.store import get_registry

    registry = get_registry()

    def make() -> None:
        create_pool_credentials(registry, 999_999, "bench")

    try:
        return median_seconds(make, samples, warmup=3) * 1e3
    finally:
        remove_pool_credentials(registry, 999_999)


def _row(label: str, tls: float, plain: float, unit: str, digits: int = 2) -> str:
    return f"| {label} | {plain:.{digits}f} {unit} | {tls:.{digits}f} {unit} | {tls / plain:.2f}x |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    os.environ.setdefault("GPUGEEK_REGISTRY", os.path.join(tempfile.mkdtemp(), "bench.sqlite"))

    import gpugeek_jupyter

    _configure(False)
    gpugeek_jupyter.launch(gpu_type="cpu", count=2, name=f"bench-tls-warmup-{os.getpid()}").stop()  # forkserver
    rounds: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(args.rounds):
        for tls in (True, False):
            rounds[tls].append(one_round(tls, args.repeat, args.steps))
    median: Callable[[bool, str], float] = lambda tls, key: statistics.median(r[key] for r in rounds[tls])  # noqa: E731

    print(f"\nLocal pools, TLS with per-pool credentials vs plain TCP (median of {args.rounds} interleaved rounds)\n")
    print("| what | plain TCP (baseline) | TLS | vs baseline |")
    print("|---|---:|---:|---:|")
    print(_row("pool start: `launch()`, 2 cpu workers", median(True, "start_s"), median(False, "start_s"), "s"))
    print(f"| of which making the credentials | - | {credentials_ms():.2f} ms | |")
    print(
        _row(
            "warm dispatch: `run_cell(pool, 'dist.barrier()')`",
            median(True, "dispatch_ms"),
            median(False, "dispatch_ms"),
            "ms",
        )
    )
    print(_row("raw `client.run` no-op on both workers", median(True, "raw_ms"), median(False, "raw_ms"), "ms"))
    print(_row("DDP throughput in a cell", median(True, "steps_per_s"), median(False, "steps_per_s"), "steps/s", 1))


if __name__ == "__main__":
    main()
