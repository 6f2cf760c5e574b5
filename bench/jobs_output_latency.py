"""Output latency at 8 ranks: from a rank's print to the line shown, per output mode.

A cpu pool of 8 workers runs a cell in which every rank prints the same line ``tick i`` at the
same wall-clock moments (every 50 ms, from a start time rank 0 broadcasts), as a training loop
prints a step's loss on every rank. Measured in the same run, the time from that moment to:

- the baseline: the line reaching the driver's output callback (what any display receives);
- ``--output all``: the labelled line written out (``[rank N] tick i``, eight of them);
- ``--output grouped``: the one grouped line written out (``[ranks 0-7] tick i``), which waits
  for the eight ranks' copies, or at most its window (0.1 s).

    PYTHONPATH=. .venv/bin/python bench/jobs_output_latency.py [--ranks 8] [--lines 40]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import threading
import time

CELL = """
import time
import torch
start = torch.tensor([time.time() + 1.0], dtype=torch.float64)
dist.broadcast(start, 0)
for i in range({lines}):
    delay = start.item() + i * 0.05 - time.time()
    if delay > 0:
        time.sleep(delay)
    print(f"tick {{i}}", flush=True)
start.item()
"""


class TimedStream(io.TextIOBase):
    """A stream that notes when each line was written."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        now = time.time()
        with self._lock:
            self.lines.extend((now, line) for line in text.splitlines() if line)
        return len(text)


def latencies(start: float, stamped: list[tuple[float, str]]) -> list[float]:
    """Seconds from each ``tick i``'s moment to when its line was seen."""
    found = []
    for seen, line in stamped:
        i = int(line.rsplit("tick ", 1)[1])
        found.append(seen - (start + i * 0.05))
    return found


def measure(ranks: int, lines: int) -> list[tuple[str, list[float], int]]:
    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell
    from gpugeek_jupyter.jobs.output import GroupedWriter, LabelledWriter

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=ranks, name=f"bench-latency-{os.getpid()}")
    rows = []
    try:
        assert run_cell(pool, "dist.barrier()", {}).ok
        for mode in ("all", "grouped"):
            shown, callback = TimedStream(), TimedStream()
            writer = (
                GroupedWriter(ranks, stdout=shown, stderr=shown)
                if mode == "grouped"
                else LabelledWriter(stdout=shown, stderr=shown)
            )

            def on_output(rank: int, stream: str, text: str, writer=writer, callback=callback) -> None:
                callback.write(text)
                writer(rank, stream, text)

            result = run_cell(pool, CELL.format(lines=lines), {}, on_output=on_output).raise_for_status()
            writer.close()
            start = float(result.values[0])
            if mode == "all":
                rows.append(("callback (baseline)", latencies(start, callback.lines), len(callback.lines)))
            rows.append((f"--output {mode}", latencies(start, shown.lines), len(shown.lines)))
    finally:
        pool.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--lines", type=int, default=40)
    options = parser.parse_args()
    os.environ.setdefault("GPUGEEK_REGISTRY", os.path.join(tempfile.mkdtemp(), "bench.sqlite"))
    rows = measure(options.ranks, options.lines)
    baseline = statistics.median(rows[0][1])
    print(f"{options.ranks} ranks, {options.lines} lines printed alike by every rank, 50 ms apart")
    print()
    print("| shown by | lines shown | median latency | p95 latency | median vs baseline |")
    print("|---|---:|---:|---:|---:|")
    for name, found, count in rows:
        median = statistics.median(found)
        p95 = sorted(found)[int(0.95 * (len(found) - 1))]
        print(f"| {name} | {count} | {median * 1000:.1f} ms | {p95 * 1000:.1f} ms | {median / baseline:.2f}x |")


if __name__ == "__main__":
    main()
