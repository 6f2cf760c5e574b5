"""The ranks' ``gg.log`` metrics drawn live: one figure per name, a line per rank or a band past 4.

The charts are real bokeh figures in a real ``BokehModel``; ``show`` keeps the widget instead of
displaying it. The later tests run cells on a real 2-worker pool, and in a real kernel through
``%%gpugeek_run``, where the chart must appear only for a cell that logs.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_progress_kernel import run_recording  # this folder is on the path (no package)

from gpugeek_jupyter.jobs import run_cell
from gpugeek_jupyter.widgets.metrics_chart import DRAW_INTERVAL_S, LazyMetricsCharts, MetricsCharts
from support.kernel import KernelSession


def test_nothing_is_imported_nor_shown_before_a_rank_logs() -> None:
    probe = (
        "import sys\nfrom gpugeek_jupyter.widgets.metrics_chart import metrics_display\n"
        "shown = []\non_metrics = metrics_display(8, show=shown.append)\n"
        "print('bokeh' in sys.modules, shown)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False []"


def test_each_name_has_a_figure_and_each_rank_a_line_in_rank_order() -> None:
    shown: list[Any] = []
    charts = MetricsCharts(world_size=2, show=shown.append)
    charts.add(0, 1, [(0, 1.0, "loss", 2.0), (0, 1.0, "lr", 0.1), (1, 2.0, "loss", 1.5)])
    charts.add(0, 0, [(0, 1.0, "loss", 3.0), (1, 2.0, "loss", float("nan"))])
    assert shown == [charts.widget]
    assert list(charts.figures) == ["loss", "lr"]
    assert [plot.title.text for plot in charts.layout.children] == ["loss", "lr"]
    loss = charts.figures["loss"]
    assert loss.sources[1].data["value"] == [2.0, 1.5] and loss.sources[1].data["step"] == [0, 1]
    assert loss.sources[0].data["value"][0] == 3.0 and math.isnan(loss.sources[0].data["value"][1])  # a gap
    from bokeh.models.annotations import Legend

    legend = [item.label.value for item in loss.plot.select_one({"type": Legend}).items]
    assert legend == ["rank 0", "rank 1"]


def test_past_four_ranks_a_figure_shows_the_mean_and_the_min_max_band() -> None:
    charts = MetricsCharts(world_size=8, show=lambda widget: None)
    for rank in range(8):
        charts.add(0, rank, [(0, 1.0, "loss", float(rank)), (1, 2.0, "loss", float("nan") if rank == 7 else 10.0)])
    charts.close()
    band = charts.figures["loss"].band.data
    assert band["step"] == [0, 1]
    assert (band["low"], band["high"]) == ([0.0, 10.0], [7.0, 10.0])
    assert band["value"] == [3.5, 10.0]  # a NaN is left out of the mean
    assert charts.figures["loss"].sources == {}  # no line per rank


def test_a_band_is_redrawn_after_the_interval_with_what_came_meanwhile() -> None:
    charts = MetricsCharts(world_size=8, show=lambda widget: None)
    charts.add(0, 0, [(0, 1.0, "loss", 1.0)])  # drawn at once
    charts.add(0, 1, [(0, 1.0, "loss", 3.0)])  # held back for up to DRAW_INTERVAL_S
    deadline = time.monotonic() + 10 * DRAW_INTERVAL_S
    while charts.figures["loss"].band.data["high"] != [3.0] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert charts.figures["loss"].band.data["high"] == [3.0]


def test_a_restart_starts_the_charts_again_saying_the_attempt() -> None:
    charts = MetricsCharts(world_size=2, show=lambda widget: None)
    charts.add(0, 0, [(5, 1.0, "loss", 1.0)])
    charts.add(1, 0, [(0, 9.0, "loss", 4.0)])
    loss = charts.figures["loss"]
    assert loss.sources[0].data["step"] == [0] and loss.plot.title.text == "loss (attempt 2)"


TRAINING = """
import time
for step in range(30):
    gg.log(step=step, loss=1.0 / (step + 1) + rank, step_s=0.001 * (rank + 1))
    time.sleep(0.01)
"""


def test_a_two_rank_cell_draws_both_ranks_of_each_metric(pool: Any) -> None:
    shown: list[Any] = []
    charts = LazyMetricsCharts(2, show=shown.append)
    result = run_cell(pool, TRAINING, {}, on_metrics=charts, timeout=120)
    assert result.ok, result.failure
    assert charts.charts is not None and shown == [charts.charts.widget]
    figures = charts.charts.figures
    assert list(figures) == ["loss", "step_s"]
    for rank in (0, 1):
        assert figures["loss"].sources[rank].data["step"] == list(range(30))
        assert figures["loss"].sources[rank].data["value"] == pytest.approx([1.0 / (s + 1) + rank for s in range(30)])


def test_a_cell_that_logs_nothing_makes_no_chart(pool: Any) -> None:
    charts = LazyMetricsCharts(2, show=lambda widget: pytest.fail("a chart was shown"))
    assert run_cell(pool, "1 + 1", {}, on_metrics=charts, timeout=120).ok
    assert charts.charts is None


# -- in a real kernel, through the magic --------------------------------------------------------------
@pytest.fixture
def kernel(isolated_registry: Path) -> Iterator[KernelSession]:
    session = KernelSession(env={"GPUGEEK_REGISTRY": str(isolated_registry)})
    try:
        launched = session.run("%load_ext gpugeek_jupyter\n%gpugeek_launch --gpu-type cpu --count 2 --name charts")
        assert launched.error is None, launched.text
        yield session
    finally:
        session.run("%gpugeek_stop charts", timeout=60)
        session.shutdown()


def _bokeh_messages(messages: list[dict[str, Any]]) -> dict[str, str]:
    """Per BokehModel: everything it sent (its state, then the document's patches), as text."""
    sent: dict[str, str] = {}
    for msg in messages:
        content = msg["content"]
        if msg["msg_type"] == "comm_open" and content["data"].get("state", {}).get("_model_name") == "BokehModel":
            sent[content["comm_id"]] = str(content["data"])
        elif msg["msg_type"] == "comm_msg" and content["comm_id"] in sent:
            sent[content["comm_id"]] += str(content["data"])
    return sent


@pytest.mark.slow
def test_gpugeek_run_shows_a_live_chart_under_a_cell_that_logs_and_none_under_one_that_does_not(
    kernel: KernelSession,
) -> None:
    _, quiet = run_recording(kernel, "%%gpugeek_run\nx = rank * 2")
    assert _bokeh_messages(quiet) == {}
    _, logged = run_recording(kernel, "%%gpugeek_run\n" + TRAINING)
    charts = list(_bokeh_messages(logged).values())
    assert len(charts) == 1
    for text in ("loss", "step_s", "rank 0", "rank 1"):
        assert text in charts[0], text
