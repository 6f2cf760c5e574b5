"""How long the ledger takes as a pool's utilization history grows.

A ticking cost meter and the budget check call ``pool_cost(..., include_idle=False)`` every few
seconds; the report calls it with idle spend, which reads every sample in the window. This prints,
for pools with more and more samples (one per 2 s heartbeat: 43,200 a day), the time of each call
and its ratio to the meter's call on a fresh pool, measured in the same run.

    PYTHONPATH=. .venv/bin/python bench/cost_ledger.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from gpugeek_jupyter.cost.ledger import pool_cost
from gpugeek_jupyter.pricing import prices_in_force
from gpugeek_jupyter.spec import PoolSpec
from gpugeek_jupyter.store import PoolStatus, Registry

T0 = 1_790_000_000.0
HEARTBEAT = 2.0
WORKERS = 8


def _pool(registry: Registry, samples: int) -> int:
    spec = PoolSpec.create(
        gpu_type="H100-80GB",
        count=WORKERS,
        spot_fraction=0.7,
        base_pricing="reserved",
        backend="local",
        name=f"bench-{samples}",
    )
    pool = registry.add_pool(spec.name, spec.backend, spec.to_dict(), prices_in_force(spec), owner="bench").id
    registry.set_pool_status(pool, PoolStatus.READY)
    for rank in range(WORKERS):
        registry.open_worker_interval(pool, str(rank), spec.pricing_of_worker(rank), started_at=T0)
    with registry._write() as db:  # bulk insert: one transaction
        db.executemany(
            "INSERT INTO utilization (pool_id, at, mean_util, gpus, net_bytes) VALUES (?,?,?,?,?)",
            [(pool, T0 + i * HEARTBEAT, (i % 10) / 10, WORKERS, 1000) for i in range(samples)],
        )
    return pool


def _best_of(fn, repeats: int = 5) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        clock_now = [T0]
        registry = Registry(Path(tmp) / "bench.sqlite", clock=lambda: clock_now[0])
        sizes = [0, 1_000, 10_000, 43_200, 302_400]  # up to a week of 2 s heartbeats
        pools = {n: _pool(registry, n) for n in sizes}
        clock_now[0] = T0 + max(sizes) * HEARTBEAT
        registry.heartbeat(list(pools.values()))
        baseline = _best_of(lambda: pool_cost(registry, pools[0], include_idle=False, lost_after_seconds=1e12))
        print(f"{'samples':>9} {'meter ms':>9} {'ratio':>7} {'report ms':>10} {'ratio':>7}")
        for n, pool in pools.items():
            meter = _best_of(lambda pool=pool: pool_cost(registry, pool, include_idle=False, lost_after_seconds=1e12))
            report = _best_of(
                lambda pool=pool: pool_cost(registry, pool, include_idle=True, lost_after_seconds=1e12), repeats=3
            )
            print(
                f"{n:>9,} {meter * 1e3:>9.2f} {meter / baseline:>7.1f} {report * 1e3:>10.1f} {report / baseline:>7.1f}"
            )


if __name__ == "__main__":
    main()
