"""A rank's output, live in the notebook: ``sys.stdout``/``sys.stderr`` of the worker, routed.

While a job runs on a worker, whatever its threads print goes, in order, to the notebook as dask
events (``Worker.log_event``); whole lines at once, bursts coalesced every 20 ms, ``flush()`` and
carriage returns honoured. With ``--no-stream`` it is collected and returned with the rank's answer
instead.

tqdm bars made while the job runs (``tqdm.tqdm``, ``tqdm.auto``, ``tqdm.notebook``, ``trange``, and
subclasses that keep tqdm's own display) write no text: each sends its state on the same topic,
``{"job", "launch", "rank", "seq", "progress": {"id", "desc", "n", "total", "unit", "elapsed",
"rate", "closed", "postfix", "unit_scale", "unit_divisor", "leave"}}``, at most every 0.1 s per bar and
always its final state, so the notebook draws one bar per rank instead of ranks overwriting each
other's ``\\r`` line. ``id`` numbers the bars a rank shows in this job, in order, so the same loop
has the same id on every rank. The hook is tqdm's display path (``display``, ``close``), patched for
the job's duration only; ``tqdm.notebook`` bars behave as ``tqdm.std`` ones (a rank has no
frontend). With ``--no-stream`` a bar's final state is one collected line. Without tqdm, nothing
changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import itertools
import logging
import os
import sys
import threading
import time
import types
import weakref
from collections.abc import Iterator
from typing import Any

from . import descriptors
from .descriptors import DescriptorCapture
from .payload import OUTPUT_TOPIC
from .progress_text import format_bar

log = logging.getLogger(__name__)

_MAX_COLLECTED_OUTPUT = 1_000_000  # characters kept per rank with --no-stream
PROGRESS_INTERVAL_S = 0.1  # a bar sends at most this often (its final state always)
METRICS_INTERVAL_S = 0.5  # gg.log values buffered on a rank are sent at least this often (see .metrics)
METRICS_BATCH = 2000  # ... or as soon as this many are buffered
# a job whose words (output, bars, values) come to at most this many characters also sends them with
# its answer, which travels straight to the driver: it need not wait for the events' longer way
REPLAY_CHARS = 16_384
# what a job's threads write after the job ended goes to the job's logs, not to the next cell (see
# Forwarder.leftover), up to this many characters per job
LATE_CHARS = 1_000_000


class _State:
    def __init__(self) -> None:
        self.forwarder: Forwarder | None = None
        self.ended: Forwarder | None = None  # the last job's, until the next starts: its threads' late words
        self.loop_thread: int | None = None
        self.installed = False
        self.lock = threading.Lock()
        self.descriptors: DescriptorCapture | None = None  # descriptors 1 and 2, the job's while it runs
        self.passthrough: dict[str, Any] = {}  # the worker's own descriptors, for its event loop's output


_state = _State()


class Forwarder:
    """Sends what a rank writes to the notebook as dask events, in order, coalesced a little."""

    interval = 0.02

    def __init__(
        self, worker: Any, loop: asyncio.AbstractEventLoop, job_id: str, launch: str, rank: int, stream: bool
    ) -> None:
        self.worker = worker
        self.loop = loop
        self.job_id = job_id
        self.launch = launch
        self.rank = rank
        self.stream = stream
        self.sent = 0
        self.collected: list[tuple[str, str]] = []
        self._collected_chars = 0
        self._pending: list[tuple[str, str]] = []
        self._last_emit = 0.0
        self._timer_armed = False
        self._progress_ended = False
        self._metrics: list[tuple[int, float, str, float]] = []  # gg.log rows not sent yet
        self._metrics_timer = False
        self._lock = threading.Lock()
        self.replay: list[dict[str, Any]] | None = []  # every message sent, while they are few (REPLAY_CHARS)
        self._replay_chars = 0
        self._late_chars = 0  # written after the job ended (leftover), counted against LATE_CHARS

    def write(self, stream: str, text: str) -> None:
        if not text:
            return
        with self._lock:
            if not self.stream:
                self._collect_locked(stream, text)
                return
            if self._pending and self._pending[-1][0] == stream:
                self._pending[-1] = (stream, self._pending[-1][1] + text)
            else:
                self._pending.append((stream, text))
            # whole lines go out at once (print() writes a line in pieces); a partial line, or lines
            # closer together than `interval`, wait for the timer
            now = time.monotonic()
            if now - self._last_emit >= self.interval and ("\n" in text or "\r" in text):
                self._emit_locked(now, whole_lines=True)
            if self._pending and not self._timer_armed:
                self._timer_armed = True
                self.loop.call_soon_threadsafe(self.loop.call_later, self.interval, self._on_timer)

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._emit_locked(time.monotonic(), whole_lines=False)
            self._send_metrics_locked()

    def metrics(self, rows: list[tuple[int, float, str, float]]) -> None:
        """Buffer ``gg.log`` rows (:mod:`.metrics`): sent every ``METRICS_INTERVAL_S``, every
        ``METRICS_BATCH`` rows and at :meth:`flush`; counted in :attr:`sent`, whatever ``stream``."""
        with self._lock:
            if self._progress_ended:
                return
            self._metrics.extend(rows)
            if len(self._metrics) >= METRICS_BATCH:
                self._send_metrics_locked()
            elif not self._metrics_timer:
                self._metrics_timer = True
                self.loop.call_soon_threadsafe(self.loop.call_later, METRICS_INTERVAL_S, self._on_metrics_timer)

    def _on_metrics_timer(self) -> None:
        with self._lock:
            self._metrics_timer = False
            self._send_metrics_locked()

    def _send_metrics_locked(self) -> None:
        if not self._metrics:
            return
        rows, self._metrics = self._metrics, []
        self._send_locked({"metrics": rows}, size=40 * len(rows))

    def lineage(self, record: dict[str, Any]) -> None:
        """Send a lineage record (:mod:`.lineage`: data read, a checkpoint resumed from or written)
        now: they are few, and a job that dies later keeps what it had recorded."""
        with self._lock:
            if not self._progress_ended:
                self._send_locked({"lineage": record}, size=200)

    def progress(self, state: dict[str, Any]) -> None:
        """Send a progress bar's state; counted in :attr:`sent`, so the driver waits for it too.

        With ``stream`` off, a closed bar's final state is collected as one line of stderr.
        """
        with self._lock:
            if self._progress_ended:
                return
            if not self.stream:
                if state.get("closed"):
                    self._collect_locked("stderr", format_bar(state) + "\n")
                return
            self._send_locked({"progress": state}, size=200)

    def end_progress(self) -> None:
        """No progress state goes out after this (the rank is about to answer with :attr:`sent`)."""
        with self._lock:
            self._progress_ended = True

    def _collect_locked(self, stream: str, text: str) -> None:
        if self._collected_chars < _MAX_COLLECTED_OUTPUT:
            if self.collected and self.collected[-1][0] == stream:
                self.collected[-1] = (stream, self.collected[-1][1] + text)
            else:
                self.collected.append((stream, text))
            self._collected_chars += len(text)

    def _on_timer(self) -> None:
        with self._lock:
            self._timer_armed = False
            if self._pending:
                self._emit_locked(time.monotonic(), whole_lines=False)

    def _emit_locked(self, now: float, whole_lines: bool) -> None:
        keep: tuple[str, str] | None = None
        if whole_lines:  # hold back the unfinished last line
            stream, text = self._pending[-1]
            cut = max(text.rfind("\n"), text.rfind("\r")) + 1
            if cut < len(text):
                keep = (stream, text[cut:])
                self._pending[-1] = (stream, text[:cut])
        for stream, text in self._pending:
            if text:
                self._send_locked({"stream": stream, "text": text}, size=len(text))
        self._pending = [keep] if keep else []
        self._last_emit = now

    def leftover(self, stream: str, text: str) -> None:
        """Text a thread of this job wrote after the job ended: sent marked ``late`` (the driver
        keeps it in the job's logs, never in a later cell), unnumbered, up to ``LATE_CHARS``."""
        with self._lock:
            if self._late_chars > LATE_CHARS:
                return
            self._late_chars += len(text)
            if self._late_chars > LATE_CHARS:
                text = f"[gpugeek] more output after the job ended was left out ({LATE_CHARS:,} characters kept)\n"
            message = {"job": self.job_id, "launch": self.launch, "rank": self.rank, "late": True}
            self.worker.log_event(OUTPUT_TOPIC, {**message, "stream": stream, "text": text})

    def _send_locked(self, words: dict[str, Any], size: int) -> None:
        """One message on the job's topic, numbered (``seq``) so the driver can drop the copy it
        already had from the answer's :attr:`replay`."""
        message = {"job": self.job_id, "launch": self.launch, "rank": self.rank, "seq": self.sent, **words}
        self.worker.log_event(OUTPUT_TOPIC, message)
        self.sent += 1
        if self.replay is not None:
            self._replay_chars += size
            if self._replay_chars <= REPLAY_CHARS:
                self.replay.append(message)
            else:
                self.replay = None  # too much to send twice: the driver waits for the events


class _RoutedStream:
    """Replaces ``sys.stdout``/``sys.stderr`` in the worker: while a job runs, writes go to the notebook."""

    def __init__(self, original: Any, name: str) -> None:
        self._original = original
        self._name = name

    def write(self, text: str) -> int:
        capture = _state.forwarder
        if threading.get_ident() == _state.loop_thread:
            own = _state.passthrough.get(self._name, self._original)  # never the job's descriptors
            return int(own.write(text))
        if capture is None:
            ended = _state.ended
            if ended is None or not text:
                return int(self._original.write(text))
            try:
                ended.leftover(self._name, text)  # a thread the last job left running
            except Exception:  # the worker is closing: its own stream takes it, the thread goes on
                return int(self._original.write(text))
            return len(text)
        capture.write(self._name, text)
        return len(text)

    def flush(self) -> None:
        capture = _state.forwarder
        if capture is not None and threading.get_ident() != _state.loop_thread:
            capture.flush()
        else:
            self._original.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


def current_forwarder() -> Forwarder | None:
    """The forwarder of the job running in this worker (None outside a job)."""
    return _state.forwarder


def install(loop_thread: int) -> None:
    """Route ``sys.stdout``/``sys.stderr`` of this worker process (once), and make ready to take
    its descriptors 1 and 2 during jobs (:mod:`.descriptors`); ``loop_thread`` is the worker's event
    loop, whose own logging never belongs to a job."""
    with _state.lock:
        _state.loop_thread = loop_thread
        if not _state.installed:
            # a crash dumps its thread's stack to descriptor 2: the job's file while a job runs
            if sys.__stderr__ is not None and not faulthandler.is_enabled():
                faulthandler.enable(file=sys.__stderr__, all_threads=False)
            stdout, stderr = _RoutedStream(sys.stdout, "stdout"), _RoutedStream(sys.stderr, "stderr")
            _route_log_handlers({id(sys.__stdout__): stdout, id(sys.__stderr__): stderr})
            sys.stdout, sys.stderr = stdout, stderr
            _state.descriptors = _descriptor_capture()
            if _state.descriptors is not None:
                _state.passthrough = {name: _state.descriptors.passthrough(name) for name in ("stdout", "stderr")}
            _state.installed = True


def _route_log_handlers(routed: dict[int, _RoutedStream]) -> None:
    """Logging handlers made before :func:`install` that write to the worker's own streams (dask's
    own, configured at its import) write through the routed ones: from the event loop to the
    worker's descriptors, from a job's threads to the job, never into a job's descriptor files."""
    loggers = [
        logging.getLogger(),
        *(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger)),
    ]
    for logger in loggers:
        for handler in logger.handlers:
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and id(stream) in routed:
                handler.setStream(routed[id(stream)])


def _descriptor_capture() -> DescriptorCapture | None:
    if os.environ.get("GPUGEEK_CAPTURE_FDS", "1") == "0":
        return None
    try:
        folder = descriptors.folder()
        descriptors.remove_ended(folder)
        return DescriptorCapture(folder)
    except OSError as e:  # no private temp dir: prints are still the job's, descriptors stay the worker's
        log.warning("output below Python (os.write, C printf) of this worker's jobs is not captured: %s", e)
        return None


@contextlib.contextmanager
def captured(forwarder: Forwarder) -> Iterator[None]:
    """While inside, what any thread but the event loop's writes goes to ``forwarder`` (what is
    written to descriptors 1 and 2 too), and tqdm bars send their states to it instead of text."""
    _state.forwarder, _state.ended = forwarder, None
    bars = TqdmHook.take_over(forwarder)
    taken = _state.descriptors
    if taken is not None:
        try:
            taken.begin(forwarder, forwarder.loop)
        except OSError as e:
            log.warning("output below Python of job %s is not captured: %s", forwarder.job_id, e)
            taken = None
    try:
        yield
    finally:
        try:
            if taken is not None:
                taken.end()
                forwarder.flush()
            if bars is not None:
                bars.give_back()
        finally:
            forwarder.end_progress()
            _state.forwarder, _state.ended = None, forwarder


# -- progress bars ---------------------------------------------------------------------------------
_TYPE_ATTRIBUTES = (staticmethod, classmethod, property, types.FunctionType)  # what tqdm.notebook overrides


class _Muted:
    """Where a taken-over bar's text goes: nowhere (its state travels as events)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


_MUTED = _Muted()


def _mute(text: str) -> None:
    """A taken-over bar's status printer: writes nothing."""


class _Bar:
    """What the hook keeps on a bar it took over (the bar's ``_gpugeek_bar`` attribute)."""

    __slots__ = ("hook", "id", "sent_at", "dirty", "timer_armed", "closing", "closed")

    def __init__(self, hook: TqdmHook) -> None:
        self.hook = hook
        self.id: int | None = None  # given when the bar is first shown: disabled bars take no number
        self.sent_at = float("-inf")
        self.dirty = False
        self.timer_armed = False
        self.closing = False
        self.closed = False


def _bar_of(bar: Any) -> _Bar | None:
    tracked = getattr(bar, "__dict__", {}).get("_gpugeek_bar")
    return tracked if isinstance(tracked, _Bar) else None


def bar_state(bar: Any, bar_id: int, closed: bool = False) -> dict[str, Any]:
    """A tqdm bar's state as a progress event carries it (``rate`` the overall one once closed)."""
    n, total = _number(bar.n), _number(bar.total) if bar.total is not None else None
    start = getattr(bar, "start_t", None)
    elapsed = max(0.0, float(bar._time() - start)) if start is not None else 0.0
    initial = _number(getattr(bar, "initial", 0) or 0)
    rate: float | None = None
    if not closed:
        smoothed = bar._ema_dt()
        rate = float(bar._ema_dn() / smoothed) if smoothed else None
    if rate is None and elapsed > 0:
        rate = float((n - initial) / elapsed)
    unit_scale, leave = getattr(bar, "unit_scale", False), getattr(bar, "leave", True)
    if unit_scale and unit_scale is not True and unit_scale != 1:  # a factor: applied here, as tqdm does
        factor = float(unit_scale)
        n, total, rate = n * factor, (total * factor if total is not None else None), (rate * factor if rate else rate)
        unit_scale = False
    return {
        "id": bar_id,
        "desc": str(getattr(bar, "desc", "") or "").removesuffix(": "),
        "n": n,
        "total": total,
        "unit": str(getattr(bar, "unit", "it")),
        "elapsed": elapsed,
        "rate": rate,
        "closed": closed,
        "postfix": str(getattr(bar, "postfix", None) or ""),
        "unit_scale": bool(unit_scale),
        "unit_divisor": int(getattr(bar, "unit_divisor", 1000) or 1000),
        "leave": bool(abs(getattr(bar, "pos", 0)) == 0 if leave is None else leave),  # kept once closed
    }


def _number(value: Any) -> int | float:
    return value if isinstance(value, int) and not isinstance(value, bool) else float(value)


class TqdmHook:
    """For one job on this worker: tqdm's display path patched so that bars send states, not text.

    Bars are taken over when they write to ``sys.stdout``/``sys.stderr`` (the default) and keep
    tqdm's own ``display``; a bar given another file, or a GUI subclass with its own display
    (``tqdm.rich``, ``tqdm.gui``), is left as it is. ``tqdm.notebook`` classes lose their widget
    methods for the job (they fall back to ``tqdm.std``'s), as a rank has no frontend to show them.
    """

    def __init__(self, forwarder: Forwarder, std_class: Any) -> None:
        self.forwarder = forwarder
        self.std = std_class
        self.ids = itertools.count()
        self.open: dict[int, weakref.ref[Any]] = {}  # bars shown and not closed, by id (tqdm's == compares positions)
        self.lock = threading.Lock()
        self.ended = False
        self._saved: list[tuple[type, str, Any]] = []  # (class, name, value) to put back
        self._plain: set[type] = set()  # tqdm.notebook classes already made plain
        self._failed = False

    @classmethod
    def take_over(cls, forwarder: Forwarder) -> TqdmHook | None:
        """Patch tqdm for this job (None when tqdm is not installed)."""
        try:
            import tqdm.std
        except ImportError:
            return None
        hook = cls(forwarder, tqdm.std.tqdm)
        try:
            hook._install()
        except Exception as e:  # a tqdm whose insides differ: its bars keep writing text
            hook.give_back()
            log.warning(
                "progress bars are shown as text in this job: tqdm %s could not be hooked: %r", tqdm.std.__version__, e
            )
            return None
        return hook

    def give_back(self) -> None:
        """The job ended: bars still open send their final state (closed), and tqdm is as it was."""
        with self.lock:
            still_open = [ref() for ref in self.open.values()]
        for bar in still_open:
            if bar is not None:
                self._send_final(bar)
        with self.lock:
            self.ended = True
        for owner, name, value in reversed(self._saved):
            setattr(owner, name, value)
        self._saved.clear()

    # -- the patches -------------------------------------------------------------------------------
    def _install(self) -> None:
        std, hook = self.std, self
        original_new = std.__dict__["__new__"]
        original_init, original_display, original_close = std.__init__, std.display, std.close

        def __new__(klass: type, *args: Any, **kwargs: Any) -> Any:
            hook._plain_notebook(klass)
            return original_new.__func__(klass, *args, **kwargs)

        def __init__(bar: Any, *args: Any, **kwargs: Any) -> None:
            file = kwargs.get("file", args[4] if len(args) > 4 else None)
            taken = type(bar).display is display and _is_console(file)
            if taken:
                bar._gpugeek_bar = _Bar(hook)
            original_init(bar, *args, **kwargs)
            if taken and not getattr(bar, "disable", True):
                bar.fp, bar.sp = _MUTED, _mute  # close() and clear() write to fp directly

        def display(bar: Any, msg: str | None = None, pos: int | None = None) -> Any:
            tracked = _bar_of(bar)
            if tracked is None:
                return original_display(bar, msg, pos)
            if msg is None and tracked.hook is hook:  # a redraw ('' clears the line; others are notices)
                hook._shown(bar, tracked)
            return True

        def close(bar: Any) -> None:
            tracked = _bar_of(bar)
            if tracked is None or tracked.hook is not hook or getattr(bar, "disable", True):
                original_close(bar)
                return
            tracked.closing = True
            try:
                original_close(bar)  # its last redraw is ignored; its writes go nowhere
            finally:
                hook._send_final(bar)

        self._patch(std, "__new__", staticmethod(__new__))
        self._patch(std, "__init__", __init__)
        self._patch(std, "display", display)
        self._patch(std, "close", close)

    def _patch(self, owner: type, name: str, value: Any) -> None:
        self._saved.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, value)

    def _plain_notebook(self, klass: type) -> None:
        """``tqdm.notebook`` classes in ``klass``'s bases behave as ``tqdm.std`` for this job."""
        for base in klass.__mro__:
            if base.__module__ != "tqdm.notebook" or base in self._plain:
                continue
            with self.lock:
                if base in self._plain:
                    continue
                self._plain.add(base)
                for name, value in list(vars(base).items()):
                    if isinstance(value, _TYPE_ATTRIBUTES):
                        self._saved.append((base, name, value))
                        delattr(base, name)

    # -- states ------------------------------------------------------------------------------------
    def _shown(self, bar: Any, tracked: _Bar) -> None:
        try:
            with self.lock:
                if tracked.closing or tracked.closed or self.ended:
                    return
                if tracked.id is None:
                    tracked.id = next(self.ids)
                    self.open[tracked.id] = weakref.ref(bar)
                now = time.monotonic()
                wait = tracked.sent_at + PROGRESS_INTERVAL_S - now
                if wait > 0:  # sent lately: the latest state goes out when the interval is over
                    tracked.dirty = True
                    if not tracked.timer_armed:
                        tracked.timer_armed = True
                        loop = self.forwarder.loop
                        loop.call_soon_threadsafe(loop.call_later, wait, self._trailing, weakref.ref(bar))
                    return
                tracked.sent_at, tracked.dirty = now, False
                state = bar_state(bar, tracked.id)
            self.forwarder.progress(state)
        except Exception as e:  # the bar must not break the user's loop
            self._failure(e)

    def _trailing(self, ref: weakref.ref[Any]) -> None:
        """On the worker's event loop: the state a throttled bar held back."""
        bar = ref()
        tracked = _bar_of(bar) if bar is not None else None
        if tracked is None:
            return
        try:
            with self.lock:
                tracked.timer_armed = False
                if not tracked.dirty or tracked.closing or tracked.closed or self.ended or tracked.id is None:
                    return
                tracked.sent_at, tracked.dirty = time.monotonic(), False
                state = bar_state(bar, tracked.id)
            self.forwarder.progress(state)
        except Exception as e:
            self._failure(e)

    def _send_final(self, bar: Any) -> None:
        tracked = _bar_of(bar)
        try:
            with self.lock:
                if tracked is None or tracked.id is None or tracked.closed or self.ended:
                    return  # never shown (e.g. closed before its delay): nothing to finish
                tracked.closed = True
                self.open.pop(tracked.id, None)
                state = bar_state(bar, tracked.id, closed=True)
            self.forwarder.progress(state)
        except Exception as e:
            self._failure(e)

    def _failure(self, error: Exception) -> None:
        if not self._failed:
            self._failed = True
            log.warning("a progress bar's state could not be sent (later ones may be lost too): %r", error)


def _is_console(file: Any) -> bool:
    """tqdm's default file (None: sys.stderr) or the worker's own streams, routed or not."""
    if file is None or isinstance(file, _RoutedStream):
        return True
    return any(file is stream for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__))
