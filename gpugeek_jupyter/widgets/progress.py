"""The ranks' progress bars as ipywidgets bars in the notebook.

A rank's tqdm bar reaches the notebook as a stream of states (``on_progress(rank, state)``, see
:mod:`gpugeek_jupyter.jobs.capture`); :class:`ProgressBars` draws them, in one of three modes:

- ``"all"``: one bar per bar of every rank (``train [rank 1]``);
- ``"grouped"``: one bar per bar id for all ranks together, at the slowest rank's position, with
  the spread written beside it (``train [ranks 0-7]  40%-45% 20-22/50``);
- ``"rank0"``: rank 0's bars only.

A bar that closes at its end shows 100 % (green); one that closes short of its total, e.g. when
the job failed or was stopped, stays where it stopped (red); one made with ``leave=False`` goes.

>>> from gpugeek_jupyter.jobs import run_cell                          # doctest: +SKIP
>>> run_cell(pool, source, globals(), on_progress=progress_display("grouped", 8))  # doctest: +SKIP

:func:`progress_display` picks these widgets in a Jupyter kernel and plain lines
(:class:`~gpugeek_jupyter.jobs.progress_text.TextProgress`) elsewhere.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ..jobs.output import format_ranks
from ..jobs.progress_text import (
    BarGroup,
    TextProgress,
    aggregate,
    choose_mode,
    format_count,
    format_elapsed,
    format_rate,
    percent,
)

if TYPE_CHECKING:
    from ..jobs.watch import ProgressCallback

WIDGET_INTERVAL_S = 0.1  # a bar's widget is redrawn at most this often (and at once when it closes)


def progress_display(mode: str | None = None, world_size: int = 1) -> ProgressCallback:
    """The ``on_progress`` callback for a job of ``world_size`` ranks: widget bars in a Jupyter
    kernel (made at the first bar a rank opens: a job without bars sends no widget), else one text
    line per bar every few seconds (on stderr).

    ``mode`` is ``"grouped"``, ``"all"`` or ``"rank0"``; None picks grouped above 2 ranks, else all.

    >>> on_progress = progress_display(None, world_size=8)               # doctest: +SKIP
    >>> run_cell(pool, source, globals(), on_progress=on_progress)     # doctest: +SKIP
    """
    chosen = choose_mode(mode, world_size)
    if in_kernel():
        return LazyProgressBars(chosen)
    return TextProgress(chosen)


def in_kernel() -> bool:
    """True inside a Jupyter kernel (a frontend can draw widgets), False in a terminal or a script."""
    if "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class _BarView(widgets.HBox):
    """One drawn bar: its name, the bar, and where it stands."""

    def __init__(self) -> None:
        self.label = widgets.HTML(layout=widgets.Layout(min_width="12em"))
        self.bar = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout=widgets.Layout(flex="2"))
        self.text = widgets.HTML(layout=widgets.Layout(min_width="28em"))  # the bars of a job line up
        super().__init__([self.label, self.bar, self.text], layout=widgets.Layout(width="100%", align_items="center"))
        self.add_class("gpugeek-progress-bar")
        self.updated_at = float("-inf")

    def show(self, label: str, value: float, maximum: float, text: str, style: str) -> None:
        import html

        label_html = f"<code>{html.escape(label)}</code>"
        text_html = f"<code>{html.escape(text)}</code>"
        if self.label.value != label_html:
            self.label.value = label_html
        with self.bar.hold_sync():  # one comm message for the bar's changes
            self.bar.max = maximum
            self.bar.value = min(value, maximum)
            self.bar.bar_style = style
        if self.text.value != text_html:
            self.text.value = text_html


class ProgressBars(widgets.VBox):
    """A ``ProgressCallback`` that draws the ranks' bars; shows itself at the first state.

    >>> bars = ProgressBars("grouped")                                   # doctest: +SKIP
    >>> run_cell(pool, source, globals(), on_progress=bars)             # doctest: +SKIP

    Each bar is redrawn at most every ``interval`` seconds (what arrived meanwhile is drawn when the
    interval is over) and at once when it closes. A state for a bar that had closed starts it again
    (a restarted attempt counts its bars anew).
    """

    def __init__(
        self,
        mode: str = "grouped",
        *,
        interval: float = WIDGET_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        show: Callable[[Any], Any] | None = None,
    ) -> None:
        super().__init__([])
        self.add_class("gpugeek-progress")
        self.mode = choose_mode(mode, 0)
        self._interval = interval
        self._clock = clock
        self._show = show
        self._shown = False
        self._lock = threading.RLock()
        self._states: dict[Any, dict[int, Mapping[str, Any]]] = {}  # bar key -> {rank: state}
        self._views: dict[Any, _BarView] = {}
        self._dirty: set[Any] = set()
        self._timer: threading.Timer | None = None

    def __call__(self, rank: int, state: Mapping[str, Any]) -> None:
        if self.mode == "rank0" and rank != 0:
            return
        key: Any = state.get("id") if self.mode == "grouped" else (rank, state.get("id"))
        with self._lock:
            ranks = self._states.setdefault(key, {})
            previous = ranks.get(rank)
            if previous is not None and previous.get("closed") and not state.get("closed"):
                ranks.clear()  # the bar runs again: a restarted attempt
            ranks[rank] = dict(state)
            view = self._views.get(key)
            if view is None:
                view = self._views[key] = _BarView()
                self.children = tuple(self._views[k] for k in sorted(self._views, key=_order))
            finished = all(bool(s.get("closed")) for s in ranks.values())
            if finished and not state.get("leave", True):  # tqdm's leave=False: gone once done
                self._remove(key)
            elif finished or self._clock() - view.updated_at >= self._interval:
                self._draw(key)
            else:
                self._dirty.add(key)
                self._arm_timer()
        if not self._shown:
            self._shown = True
            if self._show is not None:
                self._show(self)
            else:
                from IPython.display import display

                display(self)

    def bar_values(self) -> dict[str, tuple[float, float, str]]:
        """``{label: (value, max, text)}`` of every bar as drawn now (for tests and logs)."""
        with self._lock:
            return {_plain(v.label.value): (v.bar.value, v.bar.max, _plain(v.text.value)) for v in self._views.values()}

    # -- drawing -----------------------------------------------------------------------------------
    def _draw(self, key: Any) -> None:
        view, ranks = self._views[key], self._states[key]
        self._dirty.discard(key)
        view.updated_at = self._clock()
        if self.mode == "grouped":
            view.show(*_group_view(aggregate(ranks)))
        else:
            ((rank, state),) = ranks.items()
            label = str(state.get("desc") or "")
            if self.mode == "all":
                label = f"{label} [rank {rank}]".strip()
            view.show(*_bar_view(label, state))

    def _remove(self, key: Any) -> None:
        view = self._views.pop(key)
        for widget in (view.label, view.bar, view.text, view):
            widget.close()
        self._states.pop(key, None)
        self._dirty.discard(key)
        self.children = tuple(self._views[k] for k in sorted(self._views, key=_order))

    def _arm_timer(self) -> None:
        if self._timer is None:
            self._timer = threading.Timer(self._interval, self._draw_dirty)
            self._timer.daemon = True
            self._timer.start()

    def _draw_dirty(self) -> None:
        with self._lock:
            self._timer = None
            for key in sorted(self._dirty, key=_order):
                self._draw(key)


class LazyProgressBars:
    """A ``ProgressCallback`` that makes its :class:`ProgressBars` (a widget, shown in the cell) at
    the first bar's state: most cells open no bar, and a widget costs comm messages to make.

    >>> bars = LazyProgressBars("all")                                   # doctest: +SKIP
    >>> bars.bars is None                                                # doctest: +SKIP
    True
    """

    def __init__(self, mode: str = "grouped", **options: Any) -> None:
        self.mode = choose_mode(mode, 0)
        self._options = options
        self._lock = threading.Lock()
        self.bars: ProgressBars | None = None

    def __call__(self, rank: int, state: Mapping[str, Any]) -> None:
        if self.bars is None:
            with self._lock:
                if self.bars is None:
                    self.bars = ProgressBars(self.mode, **self._options)
        self.bars(rank, state)


def _order(key: Any) -> tuple[int, int]:
    if isinstance(key, tuple):
        return (int(key[1] or 0), int(key[0]))  # by bar, then by rank: a loop's bars stay together
    return (int(key or 0), 0)


def _bar_view(label: str, state: Mapping[str, Any]) -> tuple[str, float, float, str, str]:
    scale, divisor = bool(state.get("unit_scale")), int(state.get("unit_divisor") or 1000)
    n, total, unit = float(state.get("n") or 0), state.get("total"), str(state.get("unit") or "it")
    rate, elapsed, closed = state.get("rate"), float(state.get("elapsed") or 0.0), bool(state.get("closed"))
    value, maximum, style = _position(n, total, closed)
    shown = format_count(n, scale, divisor)
    if total:
        text = f"{percent(n, total)}% {shown}/{format_count(total, scale, divisor)}"
    else:
        text = f"{shown} {unit}"
    text += " " + _timing(elapsed, n, total, rate, unit, scale, divisor, closed)
    if state.get("postfix"):
        text += f" {state['postfix']}"
    return label, value, maximum, text, style


def _group_view(group: BarGroup) -> tuple[str, float, float, str, str]:
    label = f"{group.desc} [{format_ranks(group.ranks)}]".strip()
    value, maximum, style = _position(group.n_min, group.total, group.closed)
    low = format_count(group.n_min, group.unit_scale, group.unit_divisor)
    high = format_count(group.n_max, group.unit_scale, group.unit_divisor)
    position = low if low == high else f"{low}-{high}"
    spread = group.percents
    if group.total and spread is not None:
        share = f"{spread[0]}%" if spread[0] == spread[1] else f"{spread[0]}%-{spread[1]}%"
        text = f"{share} {position}/{format_count(group.total, group.unit_scale, group.unit_divisor)}"
    else:
        text = f"{position} {group.unit}"
    timing = _timing(
        group.elapsed,
        group.n_min,
        group.total,
        group.rate,
        group.unit,
        group.unit_scale,
        group.unit_divisor,
        group.closed,
    )
    text += " " + timing
    if group.postfix:
        text += f" {group.postfix}"
    return label, value, maximum, text, style


def _position(n: float, total: Any, closed: bool) -> tuple[float, float, str]:
    """(value, max, bar style): done at 100 % green, stopped short red, unknown total full blue."""
    if not total:
        return 1.0, 1.0, "success" if closed else "info"
    maximum = float(total)
    if closed:
        return (maximum, maximum, "success") if n >= maximum else (n, maximum, "danger")
    return min(n, maximum), maximum, ""


def _timing(
    elapsed: float,
    n: float,
    total: Any,
    rate: Any,
    unit: str,
    scale: bool,
    divisor: int,
    closed: bool,
) -> str:
    """``[00:02<00:03, 19.8 it/s]``, as tqdm writes it (no remaining time once closed)."""
    parts = format_elapsed(elapsed)
    if not closed and total and rate:
        parts += "<" + format_elapsed(max(0.0, (float(total) - n) / float(rate)))
    speed = format_rate(rate, unit, scale, divisor)
    return f"[{parts}, {speed}]" if speed else f"[{parts}]"


def _plain(value: str) -> str:
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", value))
