"""bench/check.py and bench/readme_tables.py read bench/run's kept outputs: how, without timing anything.

The benchmarks' figures are checked by ``bench/run --check``, a program, never by this suite; these
tests only pin how a kept output is read, judged against ``bench/expected.toml`` and written into
the README.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

KEPT = """# bench/jobs_latency.py: 2026-12-03, 2 cores, 23 GiB, no NVIDIA GPU

Warm job latency

| what | ms | vs baseline |
|---|---:|---:|
| dask client.run, gloo all_reduce (baseline) | 4.00 | 1.00x |
| %%gpugeek_run: dist.barrier() | 5.20 | 1.30x (target <= 1.25x) |
| run_cell(): dist.barrier() | 4.40 | 1.10x |
"""


@pytest.fixture
def bench() -> Iterator[dict[str, ModuleType]]:
    sys.path.insert(0, str(BENCH))
    try:
        import check
        import readme_tables

        yield {"check": check, "readme_tables": readme_tables}
    finally:
        sys.path.remove(str(BENCH))
        for name in ("check", "readme_tables", "_results"):
            sys.modules.pop(name, None)


def kept_run(tmp_path: Path, bench: dict[str, ModuleType]) -> object:
    path = tmp_path / "jobs_latency.md"
    path.write_text(KEPT)
    return bench["check"].read_run(path)


def test_a_rows_ratio_is_its_last_cell_that_reads_as_one(tmp_path: Path, bench: dict[str, ModuleType]) -> None:
    run = kept_run(tmp_path, bench)
    assert run.name == "jobs_latency" and run.run == "2026-12-03, 2 cores, 23 GiB, no NVIDIA GPU"  # type: ignore[attr-defined]
    assert run.ratios == {  # type: ignore[attr-defined]
        "dask client.run, gloo all_reduce (baseline)": 1.0,
        "%%gpugeek_run: dist.barrier()": 1.3,
        "run_cell(): dist.barrier()": 1.1,
    }


def test_a_figure_worse_than_recorded_past_its_tolerance_fails_and_one_within_passes(
    tmp_path: Path, bench: dict[str, ModuleType]
) -> None:
    check = bench["check"]
    expected = tmp_path / "expected.toml"
    expected.write_text(
        '[jobs_latency."%%gpugeek_run: dist.barrier()"]\nrecorded = 1.25\nbetter = "lower"\ntolerance = 0.10\n'
        '[jobs_latency."run_cell(): dist.barrier()"]\nrecorded = 1.20\nbetter = "lower"\ntolerance = 0.05\n'
        '[jobs_scale."8 ranks: warm grouped cell"]\nrecorded = 2.0\nbetter = "lower"\ntolerance = 0.1\n'
    )
    lines, passed = check.check([kept_run(tmp_path, bench)], check.read_expected(expected))
    assert passed  # 1.30 <= 1.25 * 1.10; 1.10 is better than 1.20 * 0.95: said, not failed; jobs_scale did not run
    assert any("better than recorded" in line and "run_cell()" in line for line in lines)
    expected.write_text(
        '[jobs_latency."%%gpugeek_run: dist.barrier()"]\nrecorded = 1.1\nbetter = "lower"\ntolerance = 0.1\n'
    )
    lines, passed = check.check([kept_run(tmp_path, bench)], check.read_expected(expected))
    assert not passed and any("| FAIL |" in line for line in lines)


def test_a_figure_missing_from_a_benchmark_that_ran_fails(tmp_path: Path, bench: dict[str, ModuleType]) -> None:
    check = bench["check"]
    expected = tmp_path / "expected.toml"
    expected.write_text(
        '[jobs_latency."a row it no longer prints"]\nrecorded = 1.0\nbetter = "higher"\ntolerance = 0.1\n'
    )
    lines, passed = check.check([kept_run(tmp_path, bench)], check.read_expected(expected))
    assert not passed and any("not in the output" in line for line in lines)


def test_the_readme_gets_the_kept_output_between_its_markers_only(tmp_path: Path, bench: dict[str, ModuleType]) -> None:
    readme = "intro\n<!-- bench:jobs_latency -->\nold table\n<!-- /bench:jobs_latency -->\nafter\n<!-- bench:jobs_scale -->\nkept\n<!-- /bench:jobs_scale -->\n"
    rendered, done = bench["readme_tables"].render(readme, {"jobs_latency": kept_run(tmp_path, bench)})
    assert done == ["jobs_latency"]
    assert rendered.startswith("intro\n<!-- bench:jobs_latency -->\n_`bench/jobs_latency.py`, 2026-12-03, 2 cores")
    assert (
        "| %%gpugeek_run: dist.barrier() | 5.20 | 1.30x (target <= 1.25x) |" in rendered and "old table" not in rendered
    )
    assert rendered.endswith("after\n<!-- bench:jobs_scale -->\nkept\n<!-- /bench:jobs_scale -->\n")
