"""The ranks' ``gg.log`` metrics drawn live under the cell: one bokeh figure per metric name.

Up to ``MAX_RANK_LINES`` ranks, each rank is a line (``rank 0``, ``rank 1``, ...); past that, each
figure shows the mean over the ranks per step, with a band from the lowest to the highest rank's
value, which stays readable at 64 ranks. The look is the monitor's
(:mod:`gpugeek_jupyter.widgets.monitor`): JupyterLab's theme, the same tools, sizes and palette.
A NaN is a gap in a rank's line (and left out of the mean and band).

Nothing is made before a rank logs: :func:`metrics_display` returns a callback that imports bokeh
and shows the charts at the first batch of values, so a cell that logs nothing pays nothing
(``bench/run jobs_latency``). Batches arrive at most every 0.5 s per rank (see
:mod:`gpugeek_jupyter.jobs.metrics`); lines are streamed into their sources, the bands redrawn at
most every ``DRAW_INTERVAL_S``. A restarted job's charts start again at its new attempt.

>>> run_cell(pool, source, globals(), on_metrics=metrics_display(world_size=8))   # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from ..jobs.logs import Row

log = logging.getLogger(__name__)

MAX_RANK_LINES = 4  # more ranks than this: the mean with a min-max band
MAX_POINTS = 5000  # steps kept per line (older ones roll over)
DRAW_INTERVAL_S = 0.5  # a band is redrawn at most this often (and once more after the last batch)


def metrics_display(world_size: int = 1, show: Callable[[Any], Any] | None = None) -> LazyMetricsCharts | None:
    """The ``on_metrics`` callback for a job of ``world_size`` ranks: charts under the cell, made at
    the first values a rank logs; None outside a Jupyter kernel (nothing to draw on)."""
    if show is None:
        from .progress import in_kernel

        if not in_kernel():
            return None
    return LazyMetricsCharts(world_size, show)


class LazyMetricsCharts:
    """An ``on_metrics(attempt, rank, rows)`` callback that makes :class:`MetricsCharts` when it is
    first called (bokeh is imported then, not before)."""

    def __init__(self, world_size: int, show: Callable[[Any], Any] | None = None) -> None:
        self.world_size = world_size
        self._show = show
        self.charts: MetricsCharts | None = None
        self._lock = threading.Lock()

    def __call__(self, attempt: int, rank: int, rows: list[Row]) -> None:
        if self.charts is None:
            with self._lock:
                if self.charts is None:
                    self.charts = MetricsCharts(self.world_size, self._show)
        self.charts.add(attempt, rank, rows)


class MetricsCharts:
    """The figures of one job's metrics, one per name in the order the names first came, in one
    ``BokehModel`` (its ``widget``), shown when made."""

    def __init__(self, world_size: int, show: Callable[[Any], Any] | None = None) -> None:
        from bokeh.layouts import column

        from .monitor import _PanelModel, load_bokehjs
        from .theme import palette

        self.banded = world_size > MAX_RANK_LINES
        self.attempt = 0
        self._palette = palette()  # JupyterLab's theme when the charts are made, as the monitor
        self._lock = threading.RLock()
        self.figures: dict[str, _MetricFigure] = {}
        self.layout = column([], sizing_mode="stretch_width")
        self.widget = _PanelModel(self.layout)
        if show is None:
            from IPython.display import display

            load_bokehjs()
            show = display
        show(self.widget)

    def add(self, attempt: int, rank: int, rows: list[Row]) -> None:
        """Draw a batch of ``rank``'s values (``(step, time, name, value)`` rows)."""
        by_name: dict[str, tuple[list[int], list[float]]] = {}
        for step, _, name, value in rows:
            steps, values = by_name.setdefault(name, ([], []))
            steps.append(step)
            values.append(value)
        with self._lock:
            if attempt != self.attempt:  # a restart: its steps start again, so do the charts
                self.attempt = attempt
                for chart in self.figures.values():
                    chart.restart(attempt)
            for name, (steps, values) in by_name.items():
                if name not in self.figures:
                    self.figures[name] = _MetricFigure(name, self.banded, self._palette, attempt)
                    self.layout.children = [*self.layout.children, self.figures[name].plot]
                self.figures[name].add(rank, steps, values)

    def close(self) -> None:
        """Draw what a band still holds back; the charts stay as they are."""
        with self._lock:
            for chart in self.figures.values():
                chart.draw_band()


class _MetricFigure:
    """One metric's figure: a line per rank, or the mean and a min-max band."""

    def __init__(self, name: str, banded: bool, colours: Any, attempt: int) -> None:
        from bokeh.models import ColumnDataSource, HoverTool
        from bokeh.models.annotations import Legend, Title
        from bokeh.plotting import figure

        from .theme import apply_palette

        self.name = name
        self.banded = banded
        self.plot = figure(
            title=self._title(attempt),
            height=200,
            sizing_mode="stretch_width",
            tools="xpan,xwheel_zoom,reset,save",
            toolbar_location="right",
            x_axis_label="step",
        )
        if isinstance(self.plot.title, Title):
            self.plot.title.text_font_size = "10pt"  # the monitor's
        self.plot.add_tools(HoverTool(tooltips=[("step", "@step"), (name, "@value{0.[0000]}")]))
        self.sources: dict[int, Any] = {}  # rank -> its line's source
        self._legend = Legend(items=[], location="top_right")
        # banded: per step, [min, max, sum, count] over the ranks' finite values
        self._steps: dict[int, list[float]] = {}
        self._drawn_at = float("-inf")
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        if banded:
            self.band = ColumnDataSource({"step": [], "low": [], "high": [], "value": []})
            self.plot.varea(x="step", y1="low", y2="high", source=self.band, fill_alpha=0.25, color="#1f77b4")
            self.plot.line(x="step", y="value", source=self.band, line_width=2, color="#1f77b4", legend_label="mean")
            self.plot.legend.location = "top_right"
        else:
            self.plot.add_layout(self._legend, "right")
        apply_palette(self.plot, colours)

    def _title(self, attempt: int) -> str:
        return self.name + (f" (attempt {attempt + 1})" if attempt else "")

    def restart(self, attempt: int) -> None:
        from bokeh.models.annotations import Title

        if isinstance(self.plot.title, Title):
            self.plot.title.text = self._title(attempt)
        with self._lock:
            self._steps.clear()
        for source in self.sources.values():
            source.data = {"step": [], "value": []}
        if self.banded:
            self.band.data = {"step": [], "low": [], "high": [], "value": []}

    def add(self, rank: int, steps: list[int], values: list[float]) -> None:
        if self.banded:
            self._add_to_band(steps, values)
            return
        source = self.sources.get(rank)
        if source is None:
            source = self._line(rank)
        source.stream({"step": steps, "value": values}, rollover=MAX_POINTS)

    def _line(self, rank: int) -> Any:
        from bokeh.models import ColumnDataSource
        from bokeh.models.annotations import LegendItem
        from bokeh.palettes import Category10_10

        source = self.sources[rank] = ColumnDataSource({"step": [], "value": []})
        line: Any = self.plot.line(x="step", y="value", source=source, line_width=2, color=Category10_10[rank % 10])
        items = [*self._legend.items, LegendItem(label=f"rank {rank}", renderers=[line])]
        self._legend.items = sorted(items, key=lambda item: int(str(item.label.value).split()[-1]))
        return source

    def _add_to_band(self, steps: list[int], values: list[float]) -> None:
        with self._lock:
            for step, value in zip(steps, values):
                if not math.isfinite(value):
                    continue
                held = self._steps.get(step)
                if held is None:
                    self._steps[step] = [value, value, value, 1.0]
                else:
                    held[0], held[1] = min(held[0], value), max(held[1], value)
                    held[2] += value
                    held[3] += 1
            if len(self._steps) > MAX_POINTS:
                for old in sorted(self._steps)[: len(self._steps) - MAX_POINTS]:
                    del self._steps[old]
            wait = self._drawn_at + DRAW_INTERVAL_S - time.monotonic()
            if wait > 0:
                if self._timer is None:  # the latest state is drawn when the interval is over
                    self._timer = threading.Timer(wait, self.draw_band)
                    self._timer.daemon = True
                    self._timer.start()
                return
        self.draw_band()

    def draw_band(self) -> None:
        """Redraw the mean and band from the values held (at most every ``DRAW_INTERVAL_S``)."""
        if not self.banded:
            return
        with self._lock:
            self._timer = None
            self._drawn_at = time.monotonic()
            ordered = sorted(self._steps.items())
        try:
            self.band.data = {
                "step": [step for step, _ in ordered],
                "low": [held[0] for _, held in ordered],
                "high": [held[1] for _, held in ordered],
                "value": [held[2] / held[3] for _, held in ordered],
            }
        except Exception as e:  # the chart failing must not lose the job (nor its metrics, kept on disk)
            log.warning("the chart of %s could not be drawn: %s", self.name, e)
