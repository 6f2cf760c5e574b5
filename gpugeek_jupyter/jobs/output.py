"""Rank output in the notebook or a terminal: grouped, every line labelled, or rank 0's only.

``--output all`` (:class:`LabelledWriter`): every line labelled ``[rank N]``, carriage returns kept.
``--output grouped`` (:class:`GroupedWriter`): lines several ranks print alike shown once, as
``[ranks 0-7] ...``. ``--output rank0`` (:class:`RankZeroWriter`). :func:`output_writer` picks one.

A rank's tqdm bar redraws its line with ``\\r``; the label is written again after each ``\\r`` so
the frontend keeps drawing one labelled bar in place.

>>> import io
>>> out = io.StringIO()
>>> writer = LabelledWriter(stdout=out, stderr=out)
>>> writer(1, "stdout", "loss 0.5\\nloss ")
>>> writer(1, "stdout", "0.4\\n")
>>> out.getvalue()
'[rank 1] loss 0.5\\n[rank 1] loss 0.4\\n'
"""

from __future__ import annotations

import collections
import contextvars
import itertools
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TextIO

from .display_stream import DISPLAY_STREAM, plain_text

_BREAKS = re.compile(r"(\r\n|\r|\n)")


class LabelledWriter:
    """Callable ``(rank, stream, text)`` that writes to ``stdout``/``stderr`` with rank labels.

    A rank's text never continues another rank's unfinished line: when one rank left a line without
    its end and another writes, that line is ended first, and the first rank's rest comes labelled
    on a line of its own.

    >>> import io
    >>> out = io.StringIO()
    >>> writer = LabelledWriter(stdout=out, stderr=out)
    >>> writer(0, "stdout", "no newline 0")
    >>> writer(1, "stdout", "no newline 1")
    >>> print(out.getvalue())
    [rank 0] no newline 0
    [rank 1] no newline 1
    """

    def __init__(self, stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
        self._stdout = stdout
        self._stderr = stderr
        self._at_line_start: dict[tuple[int, str], bool] = {}
        # per target (stdout and stderr may be one): who wrote last, and whether its line is open
        self._last_writer: dict[int, tuple[int, str]] = {}
        self._line_open: dict[int, bool] = {}

    def __call__(self, rank: int, stream: str, text: str) -> None:
        if stream == DISPLAY_STREAM:  # a rank's display(...): its text, in a terminal
            stream, text = "stdout", plain_text(text)
        target = self._target(stream)
        written = self._end_others_line(id(target), (rank, stream), text) + self.label(rank, stream, text)
        if written:
            target.write(written)
            self._line_open[id(target)] = written[-1] not in "\r\n"
        target.flush()

    def _end_others_line(self, target: int, key: tuple[int, str], text: str) -> str:
        """A line end when another writer's line is open on ``target`` and ``text`` would continue
        it (a redraw, ``\r``, replaces that line as it always did); both are labelled anew after."""
        last = self._last_writer.get(target)
        if not text:
            return ""
        self._last_writer[target] = key
        if last is None or last == key:
            return ""
        self._at_line_start[last] = True
        self._at_line_start[key] = True
        return "\n" if self._line_open.get(target) and not text.startswith(("\r", "\n")) else ""

    def line_open(self, rank: int, stream: str) -> bool:
        """Whether this rank's last line on ``stream`` was written without its end."""
        return not self._at_line_start.get((rank, stream), True)

    def label(self, rank: int, stream: str, text: str) -> str:
        key = (rank, stream)
        at_start = self._at_line_start.get(key, True)
        parts = []
        for piece in _BREAKS.split(text):
            if not piece:
                continue
            if _BREAKS.fullmatch(piece):
                parts.append(piece)
                at_start = True
            else:
                if at_start:
                    parts.append(f"[rank {rank}] ")
                parts.append(piece)
                at_start = False
        self._at_line_start[key] = at_start
        return "".join(parts)

    def close(self) -> None:
        """Nothing is held back: every piece was written as it came."""

    def _target(self, stream: str) -> TextIO:
        import sys

        if stream == "stderr":
            return self._stderr or sys.stderr
        return self._stdout or sys.stdout


def rank_ranges(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 5]`` -> ``'0-3,5'``."""
    spans: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def format_ranks(ranks: Iterable[int]) -> str:
    """``rank 3``, ``ranks 0-7`` or ``ranks 0-3,5``: how every report names a set of ranks.

    >>> format_ranks([3]), format_ranks(range(8)), format_ranks([5, 0, 1, 2, 3])
    ('rank 3', 'ranks 0-7', 'ranks 0-3,5')
    """
    chosen = set(ranks)
    return f"rank {next(iter(chosen))}" if len(chosen) == 1 else f"ranks {rank_ranges(chosen)}"


def ranks_label(ranks: Iterable[int]) -> str:
    """``[rank 3]`` or ``[ranks 0-7]``."""
    return f"[{format_ranks(ranks)}]"


_RANK_PLACEHOLDER = "\x00"


def _without_rank(text: str, rank: int) -> str:
    """``text`` with the rank's own number (a whole number, not part of another) made a placeholder."""
    return re.sub(rf"(?<![\w.]){rank}(?![\w.])", _RANK_PLACEHOLDER, text)


def rank_values(ranks: Iterable[int]) -> str:
    """What ranks said where their lines differ only by their own number: ``0..3``, ``0, 1``,
    ``0..3, 5``, never a placeholder.

    >>> rank_values([0, 1, 2, 3]), rank_values([1, 0]), rank_values([0, 1, 2, 3, 5, 7, 8])
    ('0..3', '0, 1', '0..3, 5, 7, 8')
    """
    spans: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    parts: list[str] = []
    for first, last in spans:
        if last - first >= 2:
            parts.append(f"{first}..{last}")
        else:  # one or two numbers read better written out
            parts.extend(str(rank) for rank in range(first, last + 1))
    return ", ".join(parts)


@dataclass(eq=False)  # groups are told apart by identity (two may hold the same line)
class _Group:
    stream: str
    exact: str | None  # the line, while every member printed it exactly
    generic: str  # the line with the first member's rank number made a placeholder
    ranks: list[int]
    seq: int
    made: float  # when its first line came: shown by ``made + window`` at the latest
    shown: bool = False
    # every member's line is ``generic`` with its own rank number in the placeholder's place (a member
    # that joined by the exact line may not be: its number there is not its rank)
    by_rank: bool = True

    def accepts(self, line: str, generic: str) -> bool:
        return line == self.exact or (self.by_rank and generic == self.generic)

    def text(self) -> str:
        if self.exact is not None:
            return self.exact
        return self.generic.replace(_RANK_PLACEHOLDER, rank_values(self.ranks))


class GroupedWriter:
    """Callable ``(rank, stream, text)``: a line that several ranks print alike is shown once.

    ``[ranks 0-7] epoch 3: loss 0.41`` for a line printed identically by ranks 0 to 7, and
    ``[ranks 0-3] done on 0..3`` for lines identical but for each rank's own number; a line only one
    rank printed keeps its ``[rank N]`` label. Each rank's lines keep their order. A line is shown
    at once when every rank has printed it, or when every rank missing from it has printed a later
    line; else it waits for its copies at most ``window`` seconds. The window starts at ``window``
    and widens, up to ``max_window``, when ranks are seen arriving further apart (a loaded machine
    delivers one step's copies late: a copy that comes after its line was shown, or a line whose
    copies took longer than half the window), so that one step's lines stay one line. A ``\\r`` (a
    redrawn line) keeps only the last drawing; text without a line end waits for it, or for
    :meth:`close`.

    >>> import io
    >>> out = io.StringIO()
    >>> writer = GroupedWriter(world_size=2, stdout=out, stderr=out)
    >>> writer(0, "stdout", "epoch 0\\nI am rank 0\\n")
    >>> writer(1, "stdout", "epoch 0\\nI am rank 1\\n")
    >>> writer.close()
    >>> print(out.getvalue(), end="")
    [ranks 0-1] epoch 0
    [ranks 0-1] I am rank 0, 1
    """

    def __init__(
        self,
        world_size: int,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        window: float = 0.1,
        ranks: list[int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        align: bool = False,
        max_window: float = 1.0,
    ) -> None:
        self._stdout = stdout
        self._stderr = stderr
        self.window = window
        self.max_window = max(window, max_window)
        # lines shown before all their copies came, by (stream, line): a copy that comes later tells
        # how far apart the ranks arrive (bounded: only the newest are kept)
        self._shown_short: collections.OrderedDict[tuple[str, str], _Group] = collections.OrderedDict()
        self.expected = set(ranks) if ranks is not None else set(range(world_size))
        self._clock = clock
        self._partial: dict[tuple[int, str], str] = {}
        self._pending: collections.deque[_Group] = collections.deque()  # in the order they are shown
        # live: the pending groups by (stream, line) and by (stream, line but for the rank), oldest
        # first, so that a line finds the group it joins without scanning every pending line
        self._by_line: dict[tuple[str, str], collections.deque[_Group]] = {}
        self._last_group: dict[int, _Group] = {}  # the newest group each rank is in
        self.align = align
        self._seq = 0
        self._lock = threading.RLock()
        self._timer: threading.Timer | None = None

    def __call__(self, rank: int, stream: str, text: str) -> None:
        if stream == DISPLAY_STREAM:  # a rank's display(...): its text, in a terminal
            stream, text = "stdout", plain_text(text)
        with self._lock:
            buffered = self._partial.pop((rank, stream), "") + text
            *lines, rest = re.split(r"\r\n|\n", buffered)
            for line in lines:
                self._add(rank, stream, line.rsplit("\r", 1)[-1])
            if rest:
                self._partial[(rank, stream)] = rest
            self._flush(self._clock())
            self._arm()

    def close(self) -> None:
        """Show everything still held back (the job ended)."""
        with self._lock:
            for (rank, stream), rest in sorted(self._partial.items()):
                self._add(rank, stream, rest.rsplit("\r", 1)[-1])
            self._partial.clear()
            self._flush(float("inf"))
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    # -- grouping ------------------------------------------------------------------------------
    def _add(self, rank: int, stream: str, line: str) -> None:
        if self.align:
            self._add_aligned(rank, stream, line)
        else:
            self._add_live(rank, stream, line)

    def _join(self, group: _Group, rank: int, line: str, generic: str) -> None:
        if line != group.exact:
            group.exact = None
        if generic != group.generic:
            group.by_rank = False
        group.ranks.append(rank)
        self._last_group[rank] = group
        if self.expected <= set(group.ranks):
            spread = self._clock() - group.made
            if spread > self.window / 2:
                self._widen(2 * spread)

    def _new_group(self, rank: int, stream: str, line: str, generic: str) -> _Group:
        self._seq += 1
        now = self._clock()
        for key in ((stream, "=" + line), (stream, "~" + generic)):
            late = self._shown_short.get(key)
            if late is not None and rank not in late.ranks:
                self._widen(1.5 * (now - late.made))  # this line's copy came after the line was shown
                break
        new = _Group(stream, line, generic, [rank], self._seq, now)
        self._last_group[rank] = new
        return new

    def _widen(self, window: float) -> None:
        if window > self.window:
            self.window = min(self.max_window, window)

    def _add_aligned(self, rank: int, stream: str, line: str) -> None:
        """Logs read afterwards: a new line goes right after the rank's own previous line, so that a
        rank whose window starts a line earlier still meets the others' lines."""
        # joining a group older than the rank's newest would reorder this rank's lines
        last = self._last_group.get(rank)
        after = self._pending.index(last) if last is not None and last in self._pending else -1
        generic = _without_rank(line, rank)
        for group in itertools.islice(self._pending, after + 1, None):
            if group.stream != stream or rank in group.ranks:
                continue
            if group.accepts(line, generic):
                self._join(group, rank, line, generic)
                return
        self._pending.insert(after + 1, self._new_group(rank, stream, line, generic))

    def _add_live(self, rank: int, stream: str, line: str) -> None:
        """Live output: pending groups are in the order they were made, so the group a line joins is
        the oldest one alike that is newer than the rank's own newest (which keeps the rank's lines
        in order, and which the rank is not in yet). Amortized O(1) a line."""
        last = self._last_group.get(rank)
        after = last.seq if last is not None else 0
        generic = _without_rank(line, rank)
        best: _Group | None = None
        for key in ((stream, "=" + line), (stream, "~" + generic)):
            groups = self._by_line.get(key)
            while groups and groups[0].shown:
                groups.popleft()
            if not groups:
                self._by_line.pop(key, None)
                continue
            for group in groups:  # oldest first: the first one alike that is newer than the rank's newest
                if group.seq <= after or group.shown or (best is not None and group.seq >= best.seq):
                    continue
                if group.accepts(line, generic):
                    best = group
                    break
        if best is not None:
            self._join(best, rank, line, generic)
            return
        new = self._new_group(rank, stream, line, generic)
        self._pending.append(new)
        self._by_line.setdefault((stream, "=" + line), collections.deque()).append(new)
        self._by_line.setdefault((stream, "~" + generic), collections.deque()).append(new)

    def _flush(self, now: float) -> None:
        """Show the oldest groups that are complete, passed by every missing rank, or due, in order."""
        while self._pending:
            group = self._pending[0]
            missing = self.expected - set(group.ranks)
            if missing and group.made + self.window > now and not self._passed(group, missing):
                return
            self._pending.popleft()
            group.shown = True
            if missing:
                self._remember_short(group)
            target = self._target(group.stream)
            target.write(f"{ranks_label(group.ranks)} {group.text()}\n")
            target.flush()

    def _remember_short(self, group: _Group) -> None:
        keys = [] if group.exact is None else [(group.stream, "=" + group.exact)]
        if group.by_rank:
            keys.append((group.stream, "~" + group.generic))
        for key in keys:
            self._shown_short[key] = group
            self._shown_short.move_to_end(key)
        while len(self._shown_short) > 256:
            self._shown_short.popitem(last=False)

    def _passed(self, group: _Group, missing: set[int]) -> bool:
        """Every missing rank has printed a line after this one (so it cannot join it any more:
        its lines keep their order). Live output only: aligned groups are not in ``seq`` order."""
        if self.align:
            return False
        for rank in missing:
            last = self._last_group.get(rank)
            if last is None or last.seq <= group.seq:
                return False
        return True

    def _arm(self) -> None:
        """Show a due group even when no more output comes: a timer, under this thread's context
        (so a notebook routes the text to the cell that runs the job)."""
        if not self._pending or self._timer is not None or self.window == float("inf"):
            return
        delay = max(0.0, self._pending[0].made + self.window - self._clock())
        context = contextvars.copy_context()
        self._timer = threading.Timer(delay, context.run, args=(self._on_timer,))
        self._timer.daemon = True
        self._timer.start()

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
            self._flush(self._clock())
            self._arm()

    def _target(self, stream: str) -> TextIO:
        import sys

        if stream == "stderr":
            return self._stderr or sys.stderr
        return self._stdout or sys.stdout


class RankZeroWriter(LabelledWriter):
    """Rank 0's output only (``--output rank0``); every rank's is still in the job's logs."""

    def __call__(self, rank: int, stream: str, text: str) -> None:
        if rank == 0:
            super().__call__(rank, stream, text)

    def close(self) -> None:
        pass


OUTPUT_MODES = ("grouped", "all", "rank0")


def resolve_output_mode(mode: str | None, world_size: int) -> str:
    """The output mode to use: ``mode``, else ``GpugeekConfig.output_mode``; ``auto`` is grouped when
    the pool has more than 2 ranks, else all. A bad mode is a ``SpecError`` naming it."""
    from ..config import get_config
    from ..errors import SpecError

    chosen = (mode or get_config().output_mode or "auto").lower()
    if chosen == "auto":
        return "grouped" if world_size > 2 else "all"
    if chosen not in OUTPUT_MODES:
        raise SpecError(field="output", value=mode, rule="grouped, all or rank0", example="grouped")
    return chosen


def output_writer(
    mode: str | None,
    world_size: int,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    ranks: tuple[int, ...] | None = None,
) -> LabelledWriter | GroupedWriter:
    """The writer of a job's output for ``mode`` (see :func:`resolve_output_mode`) over ``ranks``
    (default: every rank); call its ``close()`` when the job has ended."""
    chosen = resolve_output_mode(mode, world_size)
    if chosen == "grouped":
        return GroupedWriter(world_size, stdout=stdout, stderr=stderr, ranks=list(ranks) if ranks else None)
    if chosen == "rank0":
        return RankZeroWriter(stdout=stdout, stderr=stderr)
    return LabelledWriter(stdout=stdout, stderr=stderr)
