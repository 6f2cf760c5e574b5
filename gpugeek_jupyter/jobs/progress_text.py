"""The ranks' progress bars as plain lines, for terminals, scripts and logs.

A rank's tqdm bar arrives as a stream of states (see :data:`~.watch.ProgressCallback`:
``{"id", "desc", "n", "total", "unit", "elapsed", "rate", "closed"}``, optionally ``"postfix"``,
``"unit_scale"``, ``"unit_divisor"`` and ``"leave"``). :class:`TextProgress` writes one line per bar
at most every ``interval`` seconds and one when it closes (unless tqdm was told not to leave it),
never a carriage return, so bars from several ranks never overwrite each other:

>>> lines = []
>>> show = TextProgress("all", write=lines.append)
>>> show(0, {"id": 0, "desc": "train", "n": 50, "total": 50, "unit": "it", "elapsed": 2.5, "rate": 19.8, "closed": True})
>>> lines
['[rank 0] train: 50/50 100% 19.8 it/s']

Modes: ``"all"`` (a line per bar of every rank), ``"rank0"`` (rank 0's bars only) and ``"grouped"``
(one line per bar id for all ranks together, their slowest and fastest position:
``[ranks 0-7] train: 20-22/50 40%-44% 19.8 it/s``). :func:`choose_mode` picks the default.
The widget renderer (``gpugeek_jupyter.widgets.progress``) shares :func:`aggregate` and the formats.
Numbers and times come from tqdm's own ``format_sizeof`` and ``format_interval``; its
``format_meter`` is not used, since a line here carries no bar and writes rates as ``19.8 it/s``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from ..errors import SpecError
from .output import format_ranks

MODES = ("grouped", "all", "rank0")
TEXT_INTERVAL_S = 2.0  # a bar's line at most this often (and once when it closes)

ProgressState = Mapping[str, Any]


def choose_mode(mode: str | None, world_size: int) -> str:
    """The display mode: ``mode`` when given (checked), else grouped above 2 ranks, all below.

    >>> choose_mode(None, 8), choose_mode(None, 2), choose_mode("rank0", 8)
    ('grouped', 'all', 'rank0')
    """
    if mode is None:
        return "grouped" if world_size > 2 else "all"
    if mode not in MODES:
        raise SpecError(field="progress", value=mode, rule="one of 'grouped', 'all' or 'rank0'", example="grouped")
    return mode


# -- numbers -------------------------------------------------------------------------------------
def format_count(value: float, unit_scale: bool = False, divisor: int = 1000) -> str:
    """A bar's position or total as tqdm writes it: ``50``, ``2.5``, ``1.23M`` with ``unit_scale``
    (tqdm's own ``format_sizeof``).

    >>> format_count(50), format_count(2.5), format_count(1_234_567, unit_scale=True)
    ('50', '2.5', '1.23M')
    """
    if unit_scale:
        return str(tqdm.format_sizeof(value, divisor=divisor))
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.4g}"


def percent(n: float, total: float | None) -> int | None:
    """Whole percent done, rounded down (99.6% is not shown as done); None without a total."""
    if not total:
        return None
    return max(0, min(100, int(100 * n / total)))


def format_rate(rate: float | None, unit: str, unit_scale: bool = False, divisor: int = 1000) -> str:
    """``19.8 it/s``, or ``2.50 s/it`` below one per second, as tqdm does; empty when unknown.

    >>> format_rate(19.83, "it"), format_rate(0.4, "it"), format_rate(None, "it")
    ('19.8 it/s', '2.50 s/it', '')
    """
    if not rate:
        return ""
    if rate < 1 and not unit_scale:
        return f"{1 / rate:.2f} s/{unit}"
    if unit_scale:
        return f"{format_count(rate, True, divisor)}{unit}/s"
    return f"{rate:.1f} {unit}/s" if rate < 1000 else f"{rate:.0f} {unit}/s"


def format_elapsed(seconds: float) -> str:
    """``00:42`` or ``1:02:03``: tqdm's own ``format_interval``."""
    return str(tqdm.format_interval(seconds))


# -- one bar, and a bar across ranks -------------------------------------------------------------
def format_bar(state: ProgressState) -> str:
    """One rank's bar on one line, without its label: ``train: 50/50 100% 19.8 it/s``."""
    scale, divisor = bool(state.get("unit_scale")), int(state.get("unit_divisor") or 1000)
    n, total, unit = state.get("n") or 0, state.get("total"), str(state.get("unit") or "it")
    done = percent(n, total)
    if total:
        position = f"{format_count(n, scale, divisor)}/{format_count(total, scale, divisor)} {done}%"
    else:
        position = (
            f"{format_count(n, scale, divisor)} {unit}" if not scale else f"{format_count(n, True, divisor)}{unit}"
        )
    return _joined(state.get("desc"), position, format_rate(state.get("rate"), unit, scale, divisor), state)


@dataclass(frozen=True)
class BarGroup:
    """One bar id across the ranks that show it: where the slowest and the fastest are."""

    desc: str
    ranks: tuple[int, ...]
    n_min: float
    n_max: float
    total: float | None
    unit: str
    rate: float | None  # the slowest rank's (the one the job waits for)
    elapsed: float
    closed: bool  # every rank that showed it has closed it
    leave: bool  # kept once closed (tqdm's leave=False bars vanish)
    postfix: str
    unit_scale: bool
    unit_divisor: int

    @property
    def percents(self) -> tuple[int, int] | None:
        low, high = percent(self.n_min, self.total), percent(self.n_max, self.total)
        return None if low is None or high is None else (low, high)

    def describe(self) -> str:
        """``20-22/50 40%-44%``: the position of the slowest and the fastest rank."""
        scale, divisor = self.unit_scale, self.unit_divisor
        low, high = format_count(self.n_min, scale, divisor), format_count(self.n_max, scale, divisor)
        position = low if low == high else f"{low}-{high}"
        spread = self.percents
        if self.total is None or spread is None:
            return f"{position} {self.unit}"
        share = f"{spread[0]}%" if spread[0] == spread[1] else f"{spread[0]}%-{spread[1]}%"
        return f"{position}/{format_count(self.total, scale, divisor)} {share}"


def aggregate(states: Mapping[int, ProgressState]) -> BarGroup:
    """The ranks' states of one bar id (``{rank: state}``) as one :class:`BarGroup`.

    >>> group = aggregate({0: {"desc": "train", "n": 20, "total": 50, "rate": 10.0, "closed": False},
    ...                    1: {"desc": "train", "n": 22, "total": 50, "rate": 11.0, "closed": False}})
    >>> group.describe(), group.rate
    ('20-22/50 40%-44%', 10.0)
    """
    if not states:
        raise ValueError("aggregate needs the state of at least one rank")
    values = list(states.values())
    first = values[0]
    positions = [float(s.get("n") or 0) for s in values]
    rates = [float(s["rate"]) for s in values if s.get("rate")]
    totals = [s["total"] for s in values if s.get("total")]
    return BarGroup(
        desc=str(first.get("desc") or ""),
        ranks=tuple(sorted(states)),
        n_min=min(positions),
        n_max=max(positions),
        total=max(totals) if totals else None,
        unit=str(first.get("unit") or "it"),
        rate=min(rates) if rates else None,
        elapsed=max(float(s.get("elapsed") or 0.0) for s in values),
        closed=all(bool(s.get("closed")) for s in values),
        leave=bool(first.get("leave", True)),
        postfix=str(first.get("postfix") or ""),
        unit_scale=bool(first.get("unit_scale")),
        unit_divisor=int(first.get("unit_divisor") or 1000),
    )


def format_group(group: BarGroup) -> str:
    """A bar across ranks on one line: ``[ranks 0-7] train: 20-22/50 40%-44% 19.8 it/s``."""
    rate = format_rate(group.rate, group.unit, group.unit_scale, group.unit_divisor)
    return f"[{format_ranks(group.ranks)}] " + _joined(group.desc, group.describe(), rate, {"postfix": group.postfix})


def _joined(desc: Any, position: str, rate: str, state: ProgressState) -> str:
    line = f"{desc}: {position}" if desc else position
    if rate:
        line += f" {rate}"
    if state.get("postfix"):
        line += f" {state['postfix']}"
    return line


# -- the renderer --------------------------------------------------------------------------------
class TextProgress:
    """A :data:`~.watch.ProgressCallback` that writes a line per bar at most every ``interval`` s and
    one when the bar closes; ``write`` takes a line without its newline (default: ``sys.stderr``).

    A bar's first line waits ``interval`` seconds, so a bar that finishes sooner shows one line. A
    state for a bar that had closed starts it again (a restarted attempt counts its bars anew).
    :meth:`through_output` gives the lines, unlabelled, to an ``on_output(rank, stream, text)``.
    """

    def __init__(
        self,
        mode: str = "grouped",
        *,
        write: Callable[[str], None] | None = None,
        interval: float = TEXT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mode = choose_mode(mode, 0)
        self._write = write or _write_stderr
        self._on_output: Callable[[int, str, str], None] | None = None
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[Any, dict[int, ProgressState]] = {}  # bar key -> {rank: state}
        self._printed_at: dict[Any, float] = {}
        self._done: set[Any] = set()

    def __call__(self, rank: int, state: ProgressState) -> None:
        if self.mode == "rank0" and rank != 0:
            return
        key: Any = state.get("id") if self.mode == "grouped" else (rank, state.get("id"))
        with self._lock:
            line = self._update(key, rank, state)
        if line is None:
            return
        if self._on_output is not None:
            self._on_output(rank, "stderr", line + "\n")
        elif self.mode == "grouped":
            self._write(line)
        else:
            self._write(f"[rank {rank}] {line}")

    @classmethod
    def through_output(
        cls, on_output: Callable[[int, str, str], None], interval: float = TEXT_INTERVAL_S
    ) -> TextProgress:
        """Every rank's bars as lines of its stderr, given to ``on_output`` (which labels them), for a
        caller that asked for output but not for progress.

        >>> seen = []
        >>> show = TextProgress.through_output(lambda rank, stream, text: seen.append((rank, stream, text)))
        >>> show(1, {"id": 0, "desc": "eval", "n": 5, "total": 5, "unit": "it", "rate": 2.0, "closed": True})
        >>> seen
        [(1, 'stderr', 'eval: 5/5 100% 2.0 it/s\\n')]
        """
        text = cls("all", interval=interval)
        text._on_output = on_output
        return text

    def _update(self, key: Any, rank: int, state: ProgressState) -> str | None:
        now = self._clock()
        ranks = self._states.setdefault(key, {})
        previous = ranks.get(rank)
        if previous is not None and previous.get("closed") and not state.get("closed"):
            ranks.clear()  # the bar runs again: a restarted attempt
        if not state.get("closed"):
            self._done.discard(key)
        if key not in self._printed_at:
            self._printed_at[key] = now  # the first line waits one interval
        ranks[rank] = state
        if self.mode == "grouped":
            group = aggregate(ranks)
            closed, leave, line = group.closed, group.leave, format_group(group)
        else:
            closed, leave, line = bool(state.get("closed")), bool(state.get("leave", True)), format_bar(state)
        if closed:
            if key in self._done:
                return None
            self._done.add(key)
            if not leave:
                return None
        elif now - self._printed_at[key] < self._interval:
            return None
        self._printed_at[key] = now
        return line


def _write_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
