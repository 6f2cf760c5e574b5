"""What ``bench/run`` keeps of a benchmark's run, and how its ratios are read back.

``bench/run`` writes each benchmark's output to ``bench/results/<name>.md``, its first line saying
which run it was (``# bench/jobs_latency.py: 2026-12-03, 2 cores, 23 GiB, no NVIDIA GPU (...)``),
then the tables the benchmark printed. A table row's first cell is its label; its ratio is the
last cell that reads as one (``1.47x``, ``1.47x (target <= 1.5x)``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
_RATIO = re.compile(r"^\s*(\d[\d,]*(?:\.\d+)?)x\b")


@dataclass(frozen=True)
class BenchRun:
    """One benchmark's output as ``bench/run`` kept it."""

    name: str  # the benchmark's file stem: jobs_latency
    run: str  # the run's date and machine, as bench/run wrote them
    body: str  # what the benchmark printed

    @property
    def ratios(self) -> dict[str, float]:
        """``{row label: ratio}`` of every table row that has a ratio."""
        found: dict[str, float] = {}
        for line in self.body.splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
            if len(cells) < 2 or set(cells[0]) <= set("-: "):
                continue
            for cell in reversed(cells[1:]):
                match = _RATIO.match(cell)
                if match:
                    found[cells[0]] = float(match.group(1).replace(",", ""))
                    break
        return found


def read_run(path: Path) -> BenchRun:
    """The kept output at ``path``; ValueError when it is not one ``bench/run`` wrote."""
    text = path.read_text(encoding="utf-8")
    first, _, body = text.partition("\n")
    head = re.match(r"^# bench/(\w+)\.py: (.+)$", first)
    if head is None:
        raise ValueError(f"{path}: its first line is not bench/run's '# bench/NAME.py: DATE, MACHINE', got {first!r}")
    return BenchRun(name=head.group(1), run=head.group(2).strip(), body=body.strip("\n"))
