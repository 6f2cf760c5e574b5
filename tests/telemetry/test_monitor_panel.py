"""The live panel over a feed of simulated workers (real sampler rows over FakeNvml, no pool)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from bokeh.models import ColumnDataSource, FactorRange

from gpugeek_jupyter.telemetry import TelemetryFeed
from gpugeek_jupyter.widgets.monitor import MonitorPanel


def _feed(period: float = 1.0) -> TelemetryFeed:
    return TelemetryFeed(client=None, pool_name="sim", period=period)


def _wait(condition, seconds: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_up_to_eight_gpus_get_a_line_each_and_new_samples_are_streamed_into_the_same_sources(simulated) -> None:
    workers = simulated(workers=2, gpus=2)
    feed = _feed()
    feed.ingest(workers.answers())
    panel = MonitorPanel(feed, "sim")
    sources = list(panel._sources)
    plots = list(panel._plots.children)
    assert panel._mode == "lines" and panel.source_lengths() == {"0:0": 1, "0:1": 1, "1:0": 1, "1:1": 1}

    for _ in range(3):
        feed.ingest(workers.answers())
    assert panel.update() == 12
    assert panel.source_lengths() == {"0:0": 4, "0:1": 4, "1:0": 4, "1:1": 4}
    assert panel._sources == sources and list(panel._plots.children) == plots  # streamed, not redrawn
    assert all(isinstance(s, ColumnDataSource) for s in sources)


def test_rollover_bounds_the_points_each_source_holds(simulated) -> None:
    workers = simulated(workers=1, gpus=1)
    feed = _feed(period=1.0)
    panel = MonitorPanel(feed, "sim", window_seconds=5.0)  # keeps max(10, 5 / 1 + 1) points
    for _ in range(25):
        feed.ingest(workers.answers())
        panel.update()
    assert panel.source_lengths() == {"0:0": 10}


def test_more_than_eight_gpus_become_a_heatmap_that_is_readable_at_64(simulated) -> None:
    workers = simulated(workers=8, gpus=8)
    feed = _feed()
    feed.ingest(workers.answers())
    panel = MonitorPanel(feed, "sim")
    assert panel._mode == "heatmap"
    y_range = panel._heat_range
    assert isinstance(y_range, FactorRange) and len(y_range.factors) == 64
    assert y_range.factors[:3] == ["0:0", "0:1", "0:2"] and y_range.factors[-1] == "7:7"
    heat = panel._plots.children[0]
    assert heat.height >= 12 * 64  # a row of at least 12 px per GPU
    assert panel.source_lengths() == {"heatmap": 64, "mean": 1}
    feed.ingest(workers.answers())
    panel.update()
    assert panel.source_lengths() == {"heatmap": 128, "mean": 2}


def test_a_pool_that_grows_past_eight_gpus_switches_to_the_heatmap(simulated) -> None:
    workers = simulated(workers=2, gpus=8)
    feed = _feed()
    answers = workers.answers()
    feed.ingest({workers.address(0): answers[workers.address(0)]})
    panel = MonitorPanel(feed, "sim")
    assert panel._mode == "lines"
    feed.ingest(workers.answers())
    panel.update()
    assert panel._mode == "heatmap" and len(panel._heat_range.factors) == 16


def test_headline_shows_mean_sm_memory_used_of_total_and_power(simulated) -> None:
    workers = simulated(workers=2, gpus=2)
    feed = _feed()
    feed.ingest(workers.answers())
    panel = MonitorPanel(feed, "sim")
    text = panel.headline.text
    # FakeNvml: GPU i uses (i + 1) GiB of 80 and draws 150 + i W
    assert "4 GPUs on 2 workers" in text
    assert "memory <b>6.0 / 320.0 GiB</b>" in text
    assert "power <b>602 W</b>" in text
    assert "SM <b>" in text and "%</b> (mean)" in text


def test_without_gpus_the_panel_shows_cpu_and_rss_per_worker_and_the_reason(simulated) -> None:
    workers = simulated(workers=2, library_missing=True)
    feed = _feed()
    feed.ingest(workers.answers())
    feed.ingest(workers.answers())
    panel = MonitorPanel(feed, "sim")
    assert panel._mode == "lines" and panel.source_lengths() == {"worker 0": 2, "worker 1": 2}
    text = panel.headline.text
    assert "2 CPU workers" in text and "CPU <b>" in text and "RSS <b>" in text
    assert "no GPU: NVML library not found" in text
    assert panel._util_plot.title.text.startswith("CPU %")


def test_sample_errors_and_silent_workers_are_shown_under_the_headline(simulated) -> None:
    workers = simulated(workers=2, gpus=1, fail_after=0)
    feed = _feed()
    answers = workers.answers()
    answers[workers.address(1)] = TimeoutError("worker busy")
    feed.ingest(answers)
    panel = MonitorPanel(feed, "sim")
    text = panel.headline.text
    assert "0:0: utilization: NVML failed: GPU is lost" in text
    assert "worker tcp://10.0.0.1:40000: no answer: TimeoutError: worker busy" in text


def test_the_update_thread_moves_the_panel_by_itself_and_stops_when_closed(simulated) -> None:
    workers = simulated(workers=1, gpus=1)
    feed = _feed(period=0.05)
    feed.ingest(workers.answers())
    panel = MonitorPanel(feed, "sim").start()
    try:
        for expected in (2, 3):
            feed.ingest(workers.answers())
            assert _wait(lambda expected=expected: panel.source_lengths()["0:0"] == expected), panel.source_lengths()
    finally:
        panel.close()
    panel._thread.join(timeout=5)
    assert not panel._thread.is_alive()
    feed.ingest(workers.answers())
    assert panel.source_lengths()["0:0"] == 3  # nothing moves once closed


def test_pause_holds_the_panel_and_resume_catches_up(simulated) -> None:
    workers = simulated(workers=1, gpus=1)
    feed = _feed(period=0.05)
    feed.ingest(workers.answers())
    panel = MonitorPanel(feed, "sim").start()
    try:
        panel.pause()
        panel._thread.join(timeout=5)
        feed.ingest(workers.answers())
        feed.ingest(workers.answers())
        assert panel.source_lengths()["0:0"] == 1 and "paused" in panel.headline_html()
        panel.resume()
        assert _wait(lambda: panel.source_lengths()["0:0"] == 3)
    finally:
        panel.close()


def test_a_widget_closed_from_the_frontend_stops_its_thread(simulated) -> None:
    workers = simulated(workers=1, gpus=1)
    feed = _feed(period=0.05)
    feed.ingest(workers.answers())
    panel = MonitorPanel(feed, "sim").start()
    panel.widget.close()  # what closing the output does to the widget model
    feed.ingest(workers.answers())
    assert _wait(lambda: not panel.running)


def test_a_stopped_feed_ends_the_panel_with_a_note(simulated) -> None:
    workers = simulated(workers=1, gpus=1)
    feed = _feed(period=0.05)
    feed.ingest(workers.answers())
    panel = MonitorPanel(feed, "sim").start()
    assert "SM <b>" in panel.headline.text
    started = time.monotonic()
    feed.close()
    assert _wait(lambda: not panel.running)
    assert time.monotonic() - started < 1.0  # woken by the close, not at its next wait's end
    text = panel.headline.text
    assert "stopped" in text and "collection stopped" in text
    assert "SM <b>" not in text and "memory <b>" not in text  # no last numbers that read as now


@pytest.mark.parametrize("feed", [None])
def test_a_pool_with_telemetry_off_gets_a_panel_that_says_so(feed: None) -> None:
    panel = MonitorPanel(feed, "quiet")
    assert "telemetry is off" in panel.headline.text and not panel.start().running


def test_the_legend_and_the_drawing_follow_worker_order_whatever_order_workers_came_in(simulated) -> None:
    workers = simulated(workers=3, gpus=1)
    feed = _feed()
    answers = workers.answers()
    feed.ingest(dict(reversed(list(answers.items()))))  # worker 2 answers first
    panel = MonitorPanel(feed, "sim")
    for plot in (panel._util_plot, panel._memory_plot):
        legend = [item.label.value for item in plot.legend[0].items]
        assert legend == ["0:0", "1:0", "2:0"], legend
        drawn = [r for r in plot.renderers if any(r in item.renderers for item in plot.legend[0].items)]
        assert drawn == [item.renderers[0] for item in plot.legend[0].items]  # worker 0 first, at the bottom


def test_the_axes_start_at_zero_and_the_time_axis_shows_the_busy_part_of_the_window(simulated) -> None:
    from gpugeek_jupyter.widgets.monitor import busy_window

    workers = simulated(workers=1, gpus=1)
    feed = _feed()
    for _ in range(5):
        feed.ingest(workers.answers())
    panel = MonitorPanel(feed, "sim")
    assert panel._memory_plot.y_range.start == 0 and panel._util_plot.y_range.start == 0
    columns = feed.buffer.columns()
    start, end = busy_window(columns["time"], columns["sm_util_pct"], float(columns["time"].max()), 300.0)
    assert (panel._x_range.start, panel._x_range.end) == (start * 1000.0, end * 1000.0)
    # a pool idle for four minutes, then busy for 20 s: the axis shows the job, not the idle minutes
    times = np.arange(0.0, 261.0)
    util = np.where(times >= 240, 95.0, 0.0)
    assert busy_window(times, util, 260.0, 300.0) == (230.0, 260.0)
    # a pool 10 s old that works from its first sample: no empty lead-in before its data
    assert busy_window(np.arange(100.0, 111.0), np.full(11, 80.0), 110.0, 300.0) == (100.0, 110.0)


def test_the_headline_shows_the_slow_rank_the_pools_job_named_asking_every_few_seconds(simulated) -> None:
    workers = simulated(workers=2, gpus=1)
    feed = _feed()
    feed.ingest(workers.answers())
    asked: list[float] = []
    said = "job job-1: rank 1 (host b) is slower than the others: 61.3 ms a step; likely cause: its GPU waits"

    def slow_rank() -> str | None:
        asked.append(time.monotonic())
        return said if len(asked) > 1 else None

    panel = MonitorPanel(feed, "sim", slow_rank=slow_rank)
    assert "slower than the others" not in panel.headline_html() and len(asked) == 1
    panel.update()
    assert len(asked) == 1  # not asked again within SLOW_RANK_PERIOD_S
    panel._slow_asked_at -= 10.0
    panel.update()
    assert "rank 1 (host b) is slower than the others" in panel.headline_html() and len(asked) == 2
