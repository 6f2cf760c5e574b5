"""DDP training throughput with telemetry at 1 Hz (sampler on every worker, collection and a live
panel updating in this process) against the same training with telemetry off, in one run.

    PYTHONPATH=. python bench/telemetry_overhead.py [--rounds 4] [--seconds 6]

A 2-worker local pool; each round trains a small MLP with torch DistributedDataParallel (gloo),
one rank per worker, for a fixed number of steps, once with telemetry off and once on (the order
alternates to spread drift). Target: throughput ratio on / off >= 0.99.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from _common import free_port

PERIOD = 1.0


def train(rank: int, world: int, port: int, steps: int) -> float:
    """One DDP rank; returns steps per second over the timed steps."""
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        torch.manual_seed(rank)
        model = DistributedDataParallel(
            torch.nn.Sequential(
                torch.nn.Linear(256, 512),
                torch.nn.ReLU(),
                torch.nn.Linear(512, 256),
                torch.nn.ReLU(),
                torch.nn.Linear(256, 10),
            )
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
        loss_fn = torch.nn.CrossEntropyLoss()
        for step in range(steps + 10):
            if step == 10:  # warm-up excluded
                dist.barrier()
                started = time.perf_counter()
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        dist.barrier()
        return steps / (time.perf_counter() - started)
    finally:
        dist.destroy_process_group()


def run_ddp(pool: Any, steps: int) -> float:
    addresses = pool.worker_addresses()
    port = free_port()
    futures = [
        pool.client.submit(
            train, rank, len(addresses), port, steps, workers=[address], allow_other_workers=False, pure=False
        )
        for rank, address in enumerate(addresses)
    ]
    return min(pool.client.gather(futures))  # the job runs at the pace of its slowest rank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=6.0, help="rough length of one training run")
    args = parser.parse_args()
    os.environ.setdefault("GPUGEEK_PRELOAD_TORCH", "0")
    os.environ["GPUGEEK_TELEMETRY_PERIOD"] = str(PERIOD)

    import gpugeek_jupyter
    from gpugeek_jupyter import telemetry
    from gpugeek_jupyter.widgets.monitor import MonitorPanel

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name=f"bench-ddp-{os.getpid()}")
    try:
        probe = run_ddp(pool, 50)
        steps = max(100, int(probe * args.seconds))
        print(f"probe: {probe:.1f} steps/s -> {steps} steps per run", file=sys.stderr, flush=True)
        results: dict[str, list[float]] = {"off": [], "on": []}
        panel = None
        for round_ in range(args.rounds):
            for mode in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
                if mode == "on":
                    feed = telemetry.install(pool, PERIOD)
                    panel = MonitorPanel(feed, pool.name).start()  # a live panel, as in a notebook
                else:
                    if panel is not None:
                        panel.close()
                    telemetry.uninstall(pool)
                results[mode].append(run_ddp(pool, steps))
                print(f"round {round_} {mode}: {results[mode][-1]:.1f} steps/s", file=sys.stderr, flush=True)
        rows_seen = len(telemetry.feed_for(pool, start=False).buffer) if telemetry.feed_for(pool, start=False) else 0
    finally:
        pool.stop()

    off, on = statistics.median(results["off"]), statistics.median(results["on"])
    print(
        f"# DDP throughput with telemetry at {PERIOD:g} Hz vs off, {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} CPUs, 2 gloo ranks, {steps} steps per run, python {sys.version.split()[0]}"
    )
    print("\n| telemetry | steps/s per run | median steps/s | ratio to off |")
    print("| --- | --- | ---: | ---: |")
    print(f"| off | {', '.join(f'{v:.1f}' for v in results['off'])} | {off:.1f} | 1.000 |")
    print(
        f"| on, {PERIOD:g} s period + live panel | {', '.join(f'{v:.1f}' for v in results['on'])} | {on:.1f} | {on / off:.3f} |"
    )
    paired = [a / b for a, b in zip(results["on"], results["off"])]  # same round: same machine load
    print(f"| per-round ratio on / off | {', '.join(f'{r:.3f}' for r in paired)} | | {statistics.median(paired):.3f} |")
    print(f"\n(rows collected while on: {rows_seen}; target ratio >= 0.99)")


if __name__ == "__main__":
    main()
