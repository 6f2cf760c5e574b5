"""The live telemetry panel: bokeh in a ``jupyter_bokeh.BokehModel``, moving while cells run.

Headline numbers (mean SM %, memory used / total, power; CPU % and RSS without GPUs, with the
reason) sit above the plots. Up to 8 GPUs (or CPU workers) get one line each, SM % and memory; beyond
that a GPU x time heatmap of SM % and a mean-SM % line, which stays readable at 64 GPUs. New samples
are *streamed* into ``ColumnDataSource`` objects with rollover, never redrawn, by a background
thread that wakes when the pool's feed has new rows, so the panel moves while a cell is busy.

The public entry point, also used by ``%gpugeek_monitor`` and ``%%gpugeek_run --monitor``:

>>> handle = show_monitor(pool)      # displays the panel, returns it   # doctest: +SKIP
>>> handle.close()                   # stops updating and removes it     # doctest: +SKIP
"""

from __future__ import annotations

import datetime as dt
import html
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from bokeh.layouts import column
from bokeh.models import ColumnDataSource, DataRange1d, FactorRange, HoverTool, LinearColorMapper, Range1d
from bokeh.models.annotations import ColorBar, Legend, LegendItem, Title
from bokeh.models.widgets import Div
from bokeh.palettes import Category10_10, Viridis256
from bokeh.plotting import figure
from jupyter_bokeh import BokehModel

from ..jobs.slow_ranks import slow_rank_of_pool
from ..telemetry import TelemetryFeed, feed_for, set_period
from ..telemetry._schema import NO_GPU, Columns, select

if TYPE_CHECKING:
    from ..pools import Pool

log = logging.getLogger(__name__)

MAX_LINES = 8  # more series than this are drawn as a heatmap
GIB = float(2**30)
BUSY_PCT = 10.0  # SM % (or CPU %, 100 = one core) above which a sample counts as work
SLOW_RANK_PERIOD_S = 5.0  # the registry is asked for the pool's job's slow rank this often at most
IDLE_VIEW_SECONDS = 60.0  # what the time axis shows of a pool that has not worked in the window


def busy_window(times: np.ndarray, util: np.ndarray, end: float, window_seconds: float) -> tuple[float, float]:
    """The time axis's span: the last ``window_seconds`` up to ``end``, narrowed to the part where
    the pool worked (from a little before its first busy sample in the window), so that a job on
    a pool that idled for minutes is not a sliver at the right edge; the last minute when it did
    not work at all. Times in seconds.

    >>> t = np.arange(0.0, 301.0)
    >>> busy_window(t, np.where(t >= 280, 90.0, 1.0), 300.0, 300.0)   # busy for the last 20 s
    (270.0, 300.0)
    >>> busy_window(t, np.ones_like(t), 300.0, 300.0)                    # idle: the last minute
    (240.0, 300.0)
    """
    start = end - window_seconds
    recent = times >= start
    if recent.any():  # never before the first sample: a young pool's axis starts with its data
        start = max(start, float(times[recent].min()))
    busy = times[recent & (np.nan_to_num(util, nan=0.0) > BUSY_PCT)]
    if not len(busy):
        return max(start, end - IDLE_VIEW_SECONDS), end
    first = float(busy.min())
    margin = max(10.0, 0.2 * (end - first))  # the idle lead-in, to see the job begin
    return max(start, first - margin), end


_open_panels: list[MonitorPanel] = []
_open_lock = threading.Lock()


def open_monitors() -> list[MonitorPanel]:
    """Panels that are still updating, oldest first."""
    with _open_lock:
        return [p for p in _open_panels if p.running]


def show_monitor(pool: Pool | None = None, period: float | None = None, window_seconds: float = 300.0) -> MonitorPanel:
    """Display the live panel of ``pool`` (default: the current pool) and return its handle.

    ``period`` changes the pool's sampling period (seconds) first. The handle has ``.close()``
    (stop updating and remove the panel), ``.pause()`` / ``.resume()`` and ``.widget``.
    Raises :class:`~gpugeek_jupyter.errors.GpugeekError` only when there is no pool at all.
    """
    from IPython.display import display

    pool = _resolve_pool(pool)
    if period is not None:
        set_period(pool, period)
    feed = feed_for(pool)
    registry, pool_id = pool.registry, pool.id
    panel = MonitorPanel(
        feed,
        pool.name,
        window_seconds=window_seconds,
        slow_rank=lambda: slow_rank_of_pool(registry, pool_id, ended_within_s=window_seconds),
    )
    load_bokehjs()
    display(panel.widget)
    panel.start()
    return panel


_bokehjs_loaded = False


def load_bokehjs() -> None:
    """Put BokehJS into the page, once per kernel: jupyter_bokeh's widget draws with it but does
    not bring it (without it JupyterLab shows "Click to show javascript error" in its place).

    ``GpugeekConfig.bokehjs``: ``inline`` (default; about 4 MB in the first panel's output, works
    without internet, as clusters often are) or ``cdn``. The loader stays in that output, so a
    reopened notebook loads BokehJS again before the panel.
    """
    global _bokehjs_loaded
    if _bokehjs_loaded:
        return
    from bokeh.io import output_notebook
    from bokeh.resources import CDN, INLINE

    from ..config import get_config
    from ..errors import GpugeekError

    source = get_config().bokehjs.lower()
    if source not in ("inline", "cdn"):
        raise GpugeekError(
            f"GPUGEEK_BOKEHJS must be inline or cdn, got '{get_config().bokehjs}' (e.g. GPUGEEK_BOKEHJS=cdn)"
        )
    output_notebook(resources=INLINE if source == "inline" else CDN, hide_banner=True)
    _bokehjs_loaded = True


def _resolve_pool(pool: Pool | None) -> Pool:
    if pool is not None:
        return pool
    from ..errors import GpugeekError
    from ..runtime import get_pool_manager

    current = get_pool_manager().current
    if current is None:
        raise GpugeekError(
            "no current pool to monitor; launch one (e.g. %gpugeek_launch --gpu-type cpu --count 2) or pass --pool NAME"
        )
    return current


class _PanelModel(BokehModel):
    """``BokehModel`` whose ``close`` may run twice (ipywidgets calls it again from ``__del__``)."""

    def close(self) -> None:
        try:
            super().close()
        except KeyError:  # the document listener was already removed by the first close
            pass


class _Series:
    """Index of every (worker, gpu) seen, in display order, with its latest values."""

    FIELDS = ("util", "mem_used", "mem_total", "power")

    def __init__(self) -> None:
        self.index: dict[tuple[str, int], int] = {}
        self.labels: list[str] = []
        self.sort_keys: list[tuple[Any, ...]] = []
        self.latest = {name: np.empty(0) for name in self.FIELDS}
        self.workers: set[str] = set()

    def __len__(self) -> int:
        return len(self.labels)

    def indices(self, workers: np.ndarray, names: np.ndarray, gpus: np.ndarray) -> tuple[np.ndarray, bool]:
        """Series index per row, adding unseen series; True when some were added."""
        out = np.empty(len(workers), dtype=np.int64)
        added = False
        lookup = self.index
        for position, key in enumerate(zip(workers, gpus.tolist())):
            found = lookup.get(key)
            if found is None:
                found = lookup[key] = len(self.labels)
                name = names[position]
                gpu = key[1]
                self.labels.append(f"{name}:{gpu}" if gpu != NO_GPU else f"worker {name}")
                self.sort_keys.append(((0, int(name)) if str(name).isdigit() else (1, str(name)), gpu))
                self.workers.add(key[0])
                added = True
            out[position] = found
        if added:
            for field in self.FIELDS:
                grown = np.full(len(self.labels), np.nan)
                grown[: len(self.latest[field])] = self.latest[field]
                self.latest[field] = grown
        return out, added

    def ordered_labels(self) -> list[str]:
        return [label for _, label in sorted(zip(self.sort_keys, self.labels))]


class MonitorPanel:
    """The bokeh panel of one pool's feed, and the thread that keeps it moving."""

    def __init__(
        self,
        feed: TelemetryFeed | None,
        pool_name: str,
        window_seconds: float = 300.0,
        slow_rank: Callable[[], str | None] | None = None,
    ) -> None:
        self.feed = feed
        self.pool_name = pool_name
        self.window_seconds = window_seconds
        self.slow_rank = slow_rank  # the line naming the pool's job's slow rank, if it named one
        self._slow_line: str | None = None
        self._slow_asked_at = -math.inf
        self._cursor = 0
        self._kind: str | None = None  # "gpu" or "cpu", fixed by the first rows
        self._mode: str | None = None  # "lines" or "heatmap"
        self._series = _Series()
        self._sources: list[ColumnDataSource] = []
        self._heat_source: ColumnDataSource | None = None
        self._mean_source: ColumnDataSource | None = None
        self._heat_range: FactorRange | None = None
        self._last_column_time: float | None = None
        from .theme import palette

        self._palette = palette()  # JupyterLab's theme (light or dark) when the panel is made
        self._recent_times = np.empty(0)  # the window's sample times and utilizations (the time axis)
        self._recent_util = np.empty(0)
        self._last_sample_time: float | None = None
        self._note = ""
        self._errors: dict[tuple[str, int], str] = {}  # (worker name, gpu) -> newest error
        self._lock = threading.Lock()  # one update at a time (the thread, or a caller)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.headline = Div(text="", sizing_mode="stretch_width")
        self._plots = column(Div(text="<i>waiting for the first samples...</i>"), sizing_mode="stretch_width")
        self.layout = column(self.headline, self._plots, sizing_mode="stretch_width")
        if feed is not None and len(feed.buffer) == 0 and not feed.closed:
            feed.collect_now()
        if feed is None:
            self._note = "telemetry is off for this pool (GpugeekConfig.telemetry_period_seconds <= 0)"
        self.update()  # before the widget exists: the first data goes out with the initial render
        self.widget = _PanelModel(self.layout)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("live" if self.running else "paused")
        return f"<MonitorPanel pool={self.pool_name!r} {state}, {len(self._series)} series>"

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def start(self) -> MonitorPanel:
        if self.feed is None or self._closed or self.running:
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"gpugeek-monitor-{self.pool_name}", daemon=True)
        self._thread.start()
        with _open_lock:
            if self not in _open_panels:
                _open_panels.append(self)
        return self

    resume = start

    def pause(self) -> None:
        """Stop updating (the plot keeps what it shows); ``resume()`` catches up from the buffer."""
        self._stop.set()
        if self.feed is not None:
            self.feed.buffer.wake()

    def close(self) -> None:
        """Stop updating and close the widget."""
        self.pause()
        self._closed = True
        with _open_lock:
            if self in _open_panels:
                _open_panels.remove(self)
        try:
            self.widget.close()
        except Exception as e:
            log.debug("closing the monitor widget: %s", e)

    def _loop(self) -> None:
        assert self.feed is not None
        feed = self.feed
        warned = False
        while not self._stop.is_set():
            fresh = feed.buffer.wait_newer(self._cursor, timeout=max(1.0, 2 * feed.period))
            if self._stop.is_set():
                break
            if getattr(self.widget, "comm", None) is None:  # the widget was closed elsewhere
                self.close()
                break
            try:
                self.update() if fresh else self._render_headline()
            except Exception as e:  # keep moving; say once what went wrong
                if not warned:
                    log.warning("monitor of pool %s: update failed: %s: %s", self.pool_name, type(e).__name__, e)
                    warned = True
            if feed.closed and feed.buffer.seq <= self._cursor:
                self._render_headline()  # says stopped, without the last numbers
                break

    # -- updating --------------------------------------------------------------------------------
    def source_lengths(self) -> dict[str, int]:
        """Rows now held by each data source (by series label, or 'heatmap'/'mean')."""
        if self._mode == "heatmap":
            assert self._heat_source is not None and self._mean_source is not None
            return {"heatmap": len(self._heat_source.data["t"]), "mean": len(self._mean_source.data["t"])}
        return {label: len(source.data["t"]) for label, source in zip(self._series.labels, self._sources)}

    def update(self) -> int:
        """Stream what the feed collected since the last update; returns the rows consumed."""
        with self._lock:
            if self.feed is None:
                self._render_headline()
                return 0
            self._cursor, columns = self.feed.buffer.since(self._cursor)
            n = len(columns["time"])
            if n:
                self._consume(columns)
            self._ask_slow_rank()
            self._render_headline()
            return n

    def _ask_slow_rank(self) -> None:
        """The pool's job's slow-rank line, asked of the registry every ``SLOW_RANK_PERIOD_S`` at most."""
        now = time.monotonic()
        if self.slow_rank is None or now - self._slow_asked_at < SLOW_RANK_PERIOD_S:
            return
        self._slow_asked_at = now
        try:
            self._slow_line = self.slow_rank()
        except Exception as e:  # the registry busy or closed: the panel goes on
            log.info("monitor of pool %s: no slow-rank line: %s", self.pool_name, e)

    def _consume(self, columns: Columns) -> None:
        self._note_errors(columns)
        is_gpu = columns["gpu"] != NO_GPU
        if self._kind is None:
            self._kind = "gpu" if is_gpu.any() else "cpu"
        if self._kind == "gpu":
            columns = select(columns, is_gpu)
            util, used, total, power = (
                columns[k] for k in ("sm_util_pct", "mem_used_bytes", "mem_total_bytes", "power_w")
            )
        else:
            util, used = columns["cpu_pct"], columns["rss_bytes"]
            total = power = np.full(len(util), np.nan)
            self._note = next((r for r in columns["no_gpu_reason"] if r), self._note)
        times = columns["time"]
        if not len(times):
            return
        index, added = self._series.indices(columns["worker"], columns["worker_name"], columns["gpu"])
        # the newest row of each series updates the headline numbers
        order = np.argsort(times, kind="stable")
        last = {}
        for position in order:
            last[index[position]] = position
        series_ids = np.fromiter(last.keys(), dtype=np.int64)
        rows = np.fromiter(last.values(), dtype=np.int64)
        latest = self._series.latest
        for field, values in (("util", util), ("mem_used", used), ("mem_total", total), ("power", power)):
            latest[field][series_ids] = values[rows]
        self._last_sample_time = float(times.max())
        wanted = "lines" if len(self._series) <= MAX_LINES else "heatmap"
        if wanted != self._mode:
            self._build(wanted)
        elif added:
            self._grow()
        if self._mode == "lines":
            self._stream_lines(index, times, util, used)
        else:
            self._stream_heatmap(index, times, util)

    def _note_errors(self, columns: Columns) -> None:
        """Remember, per GPU or worker, the error of its newest row in this batch (if any)."""
        errors = self._errors
        for key in set(zip(columns["worker_name"], columns["gpu"].tolist())):
            errors.pop(key, None)
        failed = np.flatnonzero(columns["error"] != None)  # noqa: E711 (element-wise)
        for row in failed[np.argsort(columns["time"][failed], kind="stable")].tolist():
            errors[(columns["worker_name"][row], int(columns["gpu"][row]))] = columns["error"][row]

    # -- plots -----------------------------------------------------------------------------------
    def _window_points(self) -> int:
        period = self.feed.period if self.feed is not None else 1.0
        return max(10, int(self.window_seconds / max(period, 0.05)) + 1)

    def _figure(self, title: str, height: int, **kwargs: Any) -> Any:
        plot = figure(
            title=title,
            height=height,
            x_axis_type="datetime",
            sizing_mode="stretch_width",
            tools="xpan,xwheel_zoom,reset,save",
            toolbar_location="right",
            **kwargs,
        )
        if isinstance(plot.title, Title):
            plot.title.text_font_size = "10pt"
        from .theme import apply_palette

        return apply_palette(plot, self._palette)

    def _build(self, mode: str) -> None:
        """Create the plots for ``mode`` (once, or once more when a pool grows past 8 series)."""
        self._mode = mode
        self._sources = []
        util_title = "SM utilization %" if self._kind == "gpu" else "CPU % (100 = one core)"
        if mode == "lines":
            # one span for both plots, set from the data (busy_window), not the whole of the buffer
            self._x_range = x_range = Range1d(start=0, end=1)
            # every y axis starts at 0: a line at 0.18 GiB must not look like an empty worker
            util_range = Range1d(start=0, end=105) if self._kind == "gpu" else DataRange1d(start=0)
            self._util_plot = self._figure(util_title, 210, x_range=x_range, y_range=util_range)
            memory_title = "GPU memory used, GiB" if self._kind == "gpu" else "RSS, GiB"
            self._memory_plot = self._figure(memory_title, 170, x_range=x_range, y_range=DataRange1d(start=0))
            for plot in (self._util_plot, self._memory_plot):
                legend = Legend(
                    items=[],
                    location="top_left",
                    label_text_font_size="8pt",
                    label_text_color=self._palette.text,
                    background_fill_color=self._palette.background,
                    border_line_color=self._palette.grid,
                )
                plot.add_layout(legend, "right")
            self._plots.children = [self._util_plot, self._memory_plot]
            self._grow()
        else:
            labels = self._series.ordered_labels()
            rows = len(labels)
            self._heat_range = FactorRange(factors=labels)
            heat_x_range = DataRange1d(follow="end", follow_interval=self.window_seconds * 1000, range_padding=0)
            heat = self._figure(
                f"{util_title}, per {'GPU' if self._kind == 'gpu' else 'worker'}",
                int(min(900, max(260, 12 * rows + 90))),
                x_range=heat_x_range,
                y_range=self._heat_range,
            )
            heat.yaxis.major_label_text_font_size = "7pt" if rows > 32 else "8pt"
            mapper = LinearColorMapper(palette=Viridis256, low=0, high=100)
            self._heat_source = ColumnDataSource({"t": [], "w": [], "series": [], "util": []})
            heat.rect(
                x="t",
                y="series",
                width="w",
                height=1.0,
                source=self._heat_source,
                fill_color={"field": "util", "transform": mapper},
                line_color=None,
            )
            heat.add_layout(ColorBar(color_mapper=mapper, width=8), "right")
            heat.add_tools(HoverTool(tooltips=[("", "@series"), ("%", "@util{0.0}")]))
            self._mean_source = ColumnDataSource({"t": [], "util": []})
            mean = self._figure(f"mean {util_title}", 160, x_range=heat_x_range)
            mean.line(x="t", y="util", source=self._mean_source, line_width=2)
            self._plots.children = [heat, mean]

    def _grow(self) -> None:
        """Add line renderers (lines mode) or heatmap rows for series seen for the first time."""
        if self._mode == "heatmap":
            assert self._heat_range is not None
            self._heat_range.factors = self._series.ordered_labels()
            return
        for series in range(len(self._sources), len(self._series)):
            label = self._series.labels[series]
            source = ColumnDataSource({"t": [], "util": [], "mem": []})
            colour = Category10_10[series % len(Category10_10)]
            util_line = self._util_plot.line(x="t", y="util", source=source, color=colour, line_width=2)
            memory_line = self._memory_plot.line(x="t", y="mem", source=source, color=colour, line_width=2)
            self._util_plot.legend[0].items.append(LegendItem(label=label, renderers=[util_line]))
            self._memory_plot.legend[0].items.append(LegendItem(label=label, renderers=[memory_line]))
            self._sources.append(source)
        self._order_series()

    def _order_series(self) -> None:
        """Legend entries in worker (then GPU) order, and lines drawn in that order, so worker 0 is
        first in the legend and at the bottom of the drawing, whatever order the workers came in."""
        keys = dict(zip(self._series.labels, self._series.sort_keys))
        for plot in (self._util_plot, self._memory_plot):
            legend = plot.legend[0]
            legend.items = sorted(legend.items, key=lambda item: keys[item.label.value])
            lines = [r for item in legend.items for r in item.renderers]
            plot.renderers = [r for r in plot.renderers if r not in lines] + lines

    def _stream_lines(self, index: np.ndarray, times: np.ndarray, util: np.ndarray, used: np.ndarray) -> None:
        rollover = self._window_points()
        self._recent_times = np.concatenate([self._recent_times, times])
        self._recent_util = np.concatenate([self._recent_util, util])
        end = float(self._recent_times.max())
        keep = self._recent_times >= end - self.window_seconds
        self._recent_times, self._recent_util = self._recent_times[keep], self._recent_util[keep]
        start, end = busy_window(self._recent_times, self._recent_util, end, self.window_seconds)
        if end - start < 1.0:  # a first sample: a span that shows it
            start = end - 1.0
        self._x_range.start, self._x_range.end = start * 1000.0, end * 1000.0
        for series in np.unique(index).tolist():
            mask = index == series
            order = np.argsort(times[mask], kind="stable")
            # plain lists: a few points go inline in one message instead of one binary buffer per column
            self._sources[series].stream(
                {
                    "t": (times[mask][order] * 1000.0).tolist(),
                    "util": util[mask][order].tolist(),
                    "mem": (used[mask][order] / GIB).tolist(),
                },
                rollover=rollover,
            )

    def _stream_heatmap(self, index: np.ndarray, times: np.ndarray, util: np.ndarray) -> None:
        assert self._heat_source is not None and self._mean_source is not None
        count = len(self._series)
        finite = ~np.isnan(util)
        sums = np.bincount(index[finite], weights=util[finite], minlength=count)
        hits = np.bincount(index[finite], minlength=count)
        present = np.flatnonzero(np.bincount(index, minlength=count))
        with np.errstate(invalid="ignore", divide="ignore"):
            means = sums / hits  # NaN where a series only sent NaNs this time
        end = float(times.max())
        period = self.feed.period if self.feed is not None else 1.0
        start = self._last_column_time if self._last_column_time is not None else end - period
        start = max(start, end - 10 * period)  # after a gap, draw a normal-width column
        self._last_column_time = end
        labels = self._series.labels
        self._heat_source.stream(
            {
                "t": np.full(len(present), (start + end) / 2 * 1000.0),
                "w": np.full(len(present), max(end - start, 1e-3) * 1000.0),
                "series": [labels[i] for i in present.tolist()],
                "util": means[present],
            },
            rollover=count * self._window_points(),
        )
        overall = _nanmean(means[present])
        self._mean_source.stream({"t": [end * 1000.0], "util": [overall]}, rollover=self._window_points())

    # -- headline --------------------------------------------------------------------------------
    def _render_headline(self) -> None:
        self.headline.text = self.headline_html()

    @property
    def stopped(self) -> bool:
        """The pool's collection ended (the pool stopped or its client closed): nothing will move."""
        return self.feed is not None and self.feed.closed and self.feed.buffer.seq <= self._cursor

    def headline_html(self) -> str:
        if self.stopped:
            # the last numbers would read as the pool's state now: say it stopped instead
            last = ""
            if self._last_sample_time is not None:
                last = " &middot; last sample " + dt.datetime.fromtimestamp(self._last_sample_time).strftime("%H:%M:%S")
            return (
                "<div style='font-size:12px;line-height:1.5'>"
                f"<b>pool {html.escape(self.pool_name)}</b> &middot; <b>stopped</b>{last}<br>"
                "<span style='color:var(--jp-ui-font-color1, #3d444d)'>collection stopped (the pool was stopped "
                "or its client closed); the plots keep its last window</span></div>"
            )
        parts = [f"<b>pool {html.escape(self.pool_name)}</b>"]
        latest = self._series.latest
        count = len(self._series)
        workers = len(self._series.workers)
        if self._kind == "gpu":
            parts.append(f"{count} GPU{'s' if count != 1 else ''} on {workers} worker{'s' if workers != 1 else ''}")
            parts.append(f"SM <b>{_fmt(_nanmean(latest['util']), '{:.0f} %')}</b> (mean)")
            parts.append(
                f"memory <b>{_fmt(np.nansum(latest['mem_used']) / GIB, '{:.1f}')}"
                f" / {_fmt(np.nansum(latest['mem_total']) / GIB, '{:.1f}')} GiB</b>"
            )
            parts.append(f"power <b>{_fmt(np.nansum(latest['power']) if count else np.nan, '{:,.0f} W')}</b>")
        elif self._kind == "cpu":
            parts.append(f"{workers} CPU worker{'s' if workers != 1 else ''}")
            parts.append(f"CPU <b>{_fmt(_nanmean(latest['util']), '{:.0f} %')}</b> (mean)")
            parts.append(f"RSS <b>{_fmt(np.nansum(latest['mem_used']) / GIB, '{:.2f} GiB')}</b>")
        if self._last_sample_time is not None:
            parts.append(dt.datetime.fromtimestamp(self._last_sample_time).strftime("%H:%M:%S"))
        lines = [" &middot; ".join(parts)]
        if self._kind == "cpu" and self._note:
            lines.append(
                f"<span style='color:var(--jp-ui-font-color1, #3d444d)'>no GPU: {html.escape(self._note)}</span>"
            )
        elif self._note:
            lines.append(f"<span style='color:var(--jp-ui-font-color1, #3d444d)'>{html.escape(self._note)}</span>")
        if self._slow_line:
            lines.append(f"<span style='color:var(--jp-warn-color0, #9a6700)'>{html.escape(self._slow_line)}</span>")
        problems = self._problems()
        if problems:
            lines.append(
                "<span style='color:var(--jp-warn-color0, #9a6700)'>"
                + "<br>".join(html.escape(p) for p in problems)
                + "</span>"
            )
        if (
            not self.running
            and self._thread is not None
            and not self._closed
            and self.feed is not None
            and not self.feed.closed
        ):
            lines.append("<i>paused</i>")
        return "<div style='font-size:12px;line-height:1.5'>" + "<br>".join(lines) + "</div>"

    def _problems(self, limit: int = 3) -> list[str]:
        found = [
            f"{'worker ' + str(name) if gpu == NO_GPU else f'{name}:{gpu}'}: {message}"
            for (name, gpu), message in sorted(self._errors.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))
        ]
        if self.feed is not None:
            found += [
                f"worker {w.name or w.address}: {w.problem}" for w in list(self.feed.workers.values()) if w.problem
            ]
        if len(found) > limit:
            found = found[:limit] + [f"... and {len(found) - limit} more"]
        return found


def _nanmean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if len(finite) else np.nan


def _fmt(value: float, pattern: str) -> str:
    return "-" if value is None or not np.isfinite(value) else pattern.format(value)
