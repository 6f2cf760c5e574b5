"""What telemetry costs: one sample on a worker, and one notebook-side update for 1,000 GPUs.

    PYTHONPATH=. python bench/telemetry_costs.py [--updates 60]

1. Sampler cost per sample, measured in a real pool worker (``client.run``): the real sampler over
   the real NVML (on a machine without a GPU: the CPU path), and over FakeNvml with 8 GPUs (our
   Python around the library; a real driver adds its own call times, see tests marked ``gpu``).
2. Kernel-side cost of one update for 1,000 simulated GPUs (125 workers x 8): unpickling the
   workers' answers, adding them to the ring buffer, and streaming them into the live panel
   (heatmap + headline). Budget: 20 ms. The same for 8 GPUs (line mode) for comparison.

Prints a table; ratios are against the budget or the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # FakeNvml lives with the tests

import numpy as np  # noqa: E402

BUDGET_MS = 20.0


def _time_samples(count: int, fake_gpus: int | None) -> float:
    """Runs in a worker: mean seconds per Sampler.sample()."""
    from gpugeek_jupyter.telemetry._worker import Sampler

    saved = sys.modules.get("pynvml")
    if fake_gpus is not None:
        from telemetry.fake_nvml import FakeNvml

        sys.modules["pynvml"] = FakeNvml(gpus=fake_gpus)
    try:
        sampler = Sampler()
        sampler.open()
        sampler.sample()
        started = time.perf_counter()
        for _ in range(count):
            sampler.sample()
        return (time.perf_counter() - started) / count
    finally:
        if saved is not None:
            sys.modules["pynvml"] = saved
        sampler.close()


def sampler_costs(samples: int) -> list[tuple[str, float]]:
    import gpugeek_jupyter

    os.environ.setdefault("GPUGEEK_PRELOAD_TORCH", "0")
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=1, name=f"bench-sampler-{os.getpid()}")
    try:
        real = list(pool.client.run(_time_samples, samples, None).values())[0]
        fake = list(pool.client.run(_time_samples, samples, 8).values())[0]
    finally:
        pool.stop()
    return [("sample, real NVML (no GPU here: CPU path)", real), ("sample, FakeNvml x 8 GPUs", fake)]


def _answers(workers: int, gpus: int, step: int, rows_of_one_worker: list[tuple[Any, ...]]) -> dict[str, Any]:
    rng = np.random.default_rng(step)
    now = 1_800_000_000.0 + step
    answers = {}
    for w in range(workers):
        utils = rng.uniform(0, 100, size=gpus)
        rows = [(now, *row[1:4], float(utils[g]), *row[5:]) for g, row in enumerate(rows_of_one_worker[:gpus])]
        answers[f"tcp://10.0.{w // 250}.{w % 250}:40000"] = {
            "name": str(w),
            "host": f"node-{w // 8}",
            "pid": 1,
            "token": f"t{w}",
            "seq": step,
            "lost": 0,
            "rows": rows,
            "period": 1.0,
            "reason": None,
        }
    return answers


def update_costs(workers: int, gpus: int, updates: int) -> tuple[float, float, float, str]:
    from telemetry.fake_nvml import FakeNvml

    from gpugeek_jupyter.telemetry import TelemetryFeed
    from gpugeek_jupyter.telemetry._worker import Sampler
    from gpugeek_jupyter.widgets.monitor import MonitorPanel

    sys.modules["pynvml"] = FakeNvml(gpus=gpus)
    sampler = Sampler()
    sampler.open()
    template = sampler.sample()
    payloads = [pickle.dumps(_answers(workers, gpus, step, template)) for step in range(updates + 1)]
    feed = TelemetryFeed(client=None, pool_name="bench", period=1.0)
    feed.ingest(pickle.loads(payloads[0]))
    panel = MonitorPanel(feed, "bench")  # built once, as when displayed
    ingest_ms, update_ms = [], []
    for payload in payloads[1:]:
        started = time.perf_counter()
        feed.ingest(pickle.loads(payload))
        middle = time.perf_counter()
        panel.update()
        ended = time.perf_counter()
        ingest_ms.append((middle - started) * 1000)
        update_ms.append((ended - middle) * 1000)
    total = [a + b for a, b in zip(ingest_ms, update_ms)]
    assert sum(panel.source_lengths().values()) > 0
    return (
        statistics.median(ingest_ms),
        statistics.median(update_ms),
        float(np.percentile(total, 95)),
        panel._mode or "",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()

    print(f"# telemetry costs, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    print("\n| sampler (in a pool worker) | ms per sample | share of a 1 s period |")
    print("| --- | ---: | ---: |")
    for label, seconds in sampler_costs(args.samples):
        print(f"| {label} | {seconds * 1000:.3f} | {seconds:.2%} |")

    print(
        "\n| notebook update | GPUs | mode | ingest ms (median) | panel ms (median) | total p95 ms | p95 / 20 ms budget |"
    )
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for workers, gpus in ((1, 8), (8, 8), (125, 8)):
        ingest, update, p95, mode = update_costs(workers, gpus, args.updates)
        print(
            f"| {workers} workers x {gpus} | {workers * gpus} | {mode} | {ingest:.2f} | {update:.2f} | {p95:.2f} | {p95 / BUDGET_MS:.2f} |"
        )


if __name__ == "__main__":
    main()
