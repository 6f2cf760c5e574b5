"""A job's metrics thinned for a chart: each line at most ``points`` rows, its ends and its spikes
kept; the file read on from where the previous read stopped, and afresh when it was replaced."""

from __future__ import annotations

import json
import math
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpugeek_jupyter.jobs.metrics_thinning import ThinnedMetrics, thin_line


def _write(path: Path, attempt: int, rank: int, rows: list[tuple[int, float, str, float]]) -> None:
    with path.open("a", encoding="utf-8") as file:  # as MetricsFile writes a batch
        file.write(json.dumps({"attempt": attempt, "rank": rank, "rows": [list(r) for r in rows]}) + "\n")


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.floats(allow_nan=True, allow_infinity=False), max_size=500), points=st.integers(4, 60))
def test_a_thinned_line_keeps_its_ends_and_its_extremes_within_points(values: list[float], points: int) -> None:
    rows = [(step, float(step), value) for step, value in enumerate(values)]
    thinned = thin_line(rows, points)
    assert len(thinned) <= points
    assert [r[0] for r in thinned] == sorted({r[0] for r in thinned})  # in step order, no row twice
    if rows:
        assert (thinned[0], thinned[-1]) == (rows[0], rows[-1])
        numbers = [v for v in values if not math.isnan(v)]
        kept = [v for _, _, v in thinned if not math.isnan(v)]
        if numbers:
            assert (min(kept), max(kept)) == (min(numbers), max(numbers))


def test_reads_go_on_from_the_last_and_a_half_written_line_waits(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    reader = ThinnedMetrics(path, points=8)
    assert reader.read() == {}  # no file yet
    _write(path, 0, 0, [(0, 1.0, "loss", 2.0), (0, 1.0, "lr", 0.1)])
    _write(path, 0, 1, [(0, 1.5, "loss", 2.2)])
    assert reader.read() == {
        (0, 0, "loss"): [(0, 1.0, 2.0)],
        (0, 0, "lr"): [(0, 1.0, 0.1)],
        (0, 1, "loss"): [(0, 1.5, 2.2)],
    }
    read_up_to = reader.offset
    with path.open("a", encoding="utf-8") as file:
        file.write('{"attempt": 0, "rank": 0, "rows": [[1, 2.0, "loss", 1.5]]}\n{"attempt": 0, "ra')
    assert reader.read()[(0, 0, "loss")] == [(0, 1.0, 2.0), (1, 2.0, 1.5)]
    assert reader.offset > read_up_to and reader.offset < path.stat().st_size  # the half line is not read
    with path.open("a", encoding="utf-8") as file:
        file.write('nk": 1, "rows": [[1, 2.5, "loss", 1.7]]}\n')
    assert reader.read()[(0, 1, "loss")] == [(0, 1.5, 2.2), (1, 2.5, 1.7)]


def test_a_long_line_stays_bounded_while_it_grows_and_a_replaced_file_is_read_afresh(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    reader = ThinnedMetrics(path, points=20)
    for batch in range(100):  # 10,000 steps, with one spike
        _write(
            path,
            0,
            0,
            [
                (s, float(s), "loss", 50.0 if s == 4321 else 1.0 / (1 + s))
                for s in range(batch * 100, (batch + 1) * 100)
            ],
        )
        shown = reader.read()[(0, 0, "loss")]
        assert len(shown) <= 20 and len(reader.lines[(0, 0, "loss")]) <= 40
    assert shown[0][0] == 0 and shown[-1][0] == 9999 and max(v for _, _, v in shown) == 50.0
    replaced = tmp_path / "new.jsonl"
    _write(replaced, 1, 0, [(0, 1.0, "acc", 0.5)])
    replaced.replace(path)  # another file under the same name (the job's folder made anew)
    assert reader.read() == {(1, 0, "acc"): [(0, 1.0, 0.5)]}
