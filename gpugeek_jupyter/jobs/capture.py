"""A rank's output, live in the notebook: ``sys.stdout``/``sys.stderr`` of the worker, routed.

While a job runs on a worker, whatever its threads print goes, in order, to the notebook as dask
events (``Worker.log_event``); whole lines at once, bursts coalesced every 20 ms, ``flush()`` and
carriage returns (progress bars) honoured. With ``--no-stream`` it is collected and returned with
the rank's answer instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from .payload import OUTPUT_TOPIC

_MAX_COLLECTED_OUTPUT = 1_000_000  # characters kept per rank with --no-stream


class _State:
    def __init__(self) -> None:
        self.forwarder: Forwarder | None = None
        self.loop_thread: int | None = None
        self.installed = False
        self.lock = threading.Lock()


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
        self._lock = threading.Lock()

    def write(self, stream: str, text: str) -> None:
        if not text:
            return
        with self._lock:
            if not self.stream:
                if self._collected_chars < _MAX_COLLECTED_OUTPUT:
                    if self.collected and self.collected[-1][0] == stream:
                        self.collected[-1] = (stream, self.collected[-1][1] + text)
                    else:
                        self.collected.append((stream, text))
                    self._collected_chars += len(text)
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
                self.worker.log_event(
                    OUTPUT_TOPIC,
                    {
                        "job": self.job_id,
                        "launch": self.launch,
                        "rank": self.rank,
                        "seq": self.sent,
                        "stream": stream,
                        "text": text,
                    },
                )
                self.sent += 1
        self._pending = [keep] if keep else []
        self._last_emit = now


class _RoutedStream:
    """Replaces ``sys.stdout``/``sys.stderr`` in the worker: while a job runs, writes go to the notebook."""

    def __init__(self, original: Any, name: str) -> None:
        self._original = original
        self._name = name

    def write(self, text: str) -> int:
        capture = _state.forwarder
        if capture is None or threading.get_ident() == _state.loop_thread:
            return int(self._original.write(text))
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


def install(loop_thread: int) -> None:
    """Route ``sys.stdout``/``sys.stderr`` of this worker process (once); ``loop_thread`` is the
    worker's event loop, whose own logging never belongs to a job."""
    with _state.lock:
        _state.loop_thread = loop_thread
        if not _state.installed:
            sys.stdout = _RoutedStream(sys.stdout, "stdout")
            sys.stderr = _RoutedStream(sys.stderr, "stderr")
            _state.installed = True


@contextlib.contextmanager
def captured(forwarder: Forwarder) -> Iterator[None]:
    """While inside, what any thread but the event loop's writes goes to ``forwarder``."""
    _state.forwarder = forwarder
    try:
        yield
    finally:
        _state.forwarder = None
