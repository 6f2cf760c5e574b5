"""Compare the ratios of a bench/run with those recorded in bench/expected.toml; exit 1 past a tolerance.

    .venv/bin/python bench/check.py bench/results/jobs_latency.md [...]   (bench/run --check runs it)

Each figure of ``expected.toml`` is a row of a benchmark's output: the ratio recorded, which way is
better, and the tolerance, relative to the recorded ratio, past which a worse figure fails. A
figure better than that is said too (record it again when the change meant it). Figures of
benchmarks that did not run are not looked at; a figure missing from a benchmark that ran fails.
Timings are checked here, by a program, never by the test suite.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from _results import BenchRun, read_run

EXPECTED = Path(__file__).resolve().parent / "expected.toml"


@dataclass(frozen=True)
class Figure:
    bench: str
    label: str
    recorded: float
    better: str  # "lower" or "higher"
    tolerance: float  # relative to recorded
    target: float | None = None

    @property
    def limit(self) -> float:
        """The worst ratio that still passes."""
        if self.better == "lower":
            return self.recorded * (1 + self.tolerance)
        return self.recorded * (1 - self.tolerance)

    def verdict(self, measured: float | None) -> str:
        if measured is None:
            return "FAIL (not in the output)"
        worse = measured > self.limit if self.better == "lower" else measured < self.limit
        if worse:
            return "FAIL"
        better_than = self.recorded * (1 - self.tolerance if self.better == "lower" else 1 + self.tolerance)
        much_better = measured < better_than if self.better == "lower" else measured > better_than
        return "ok (better than recorded: record it again if meant)" if much_better else "ok"


def read_expected(path: Path = EXPECTED) -> list[Figure]:
    """Every figure of ``expected.toml``; ValueError naming a malformed one."""
    figures = []
    for bench, rows in tomllib.loads(path.read_text(encoding="utf-8")).items():
        for label, row in rows.items():
            try:
                figure = Figure(
                    bench,
                    label,
                    float(row["recorded"]),
                    str(row["better"]),
                    float(row["tolerance"]),
                    float(row["target"]) if "target" in row else None,
                )
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(
                    f"{path}: [{bench}] {label!r} needs recorded, better and tolerance "
                    f'(e.g. {{ recorded = 1.2, better = "lower", tolerance = 0.25 }}): {e!r}'
                ) from e
            if figure.better not in ("lower", "higher"):
                raise ValueError(
                    f'{path}: [{bench}] {label!r}: better must be "lower" or "higher", got {figure.better!r}'
                )
            figures.append(figure)
    return figures


def check(runs: list[BenchRun], figures: list[Figure]) -> tuple[list[str], bool]:
    """The report's lines, and whether every figure of the benchmarks that ran passed."""
    by_name = {run.name: run for run in runs}
    lines = [
        "| benchmark | figure | recorded | limit | measured | target | verdict |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    passed = True
    for figure in figures:
        run = by_name.get(figure.bench)
        if run is None:
            continue
        measured = run.ratios.get(figure.label)
        verdict = figure.verdict(measured)
        passed = passed and not verdict.startswith("FAIL")
        shown = f"{measured:.2f}x" if measured is not None else "-"
        target = f"{figure.target:.2f}x" if figure.target is not None else ""
        lines.append(
            f"| {figure.bench} | {figure.label} | {figure.recorded:.2f}x | {figure.limit:.2f}x | {shown} | {target} | {verdict} |"
        )
    for run in runs:
        if not any(figure.bench == run.name for figure in figures):
            lines.append(f"| {run.name} | (no figures recorded in {EXPECTED.name}) | | | | | |")
    return lines, passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="bench/results/NAME.md files of one bench/run")
    parser.add_argument("--expected", type=Path, default=EXPECTED)
    args = parser.parse_args()
    runs = [read_run(path) for path in args.results]
    lines, passed = check(runs, read_expected(args.expected))
    print(f"\n## bench/check.py: the ratios against those recorded in {args.expected.name}\n")
    print("\n".join(lines))
    print("\nall figures within their tolerance" if passed else "\nsome figures are past their tolerance (FAIL above)")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
