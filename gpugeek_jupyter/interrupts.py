"""A notebook's interrupt, kept out of Python's import machinery.

CPython's import system guards its table of module locks with one global import lock, taken and
released by Python code (``importlib._bootstrap``). A ``KeyboardInterrupt`` raised in the main thread
just after that lock was taken (while the main thread imports anything: distributed and bokeh import
lazily during a launch) skips the release; raised in the callback that drops a module's lock, it is
even swallowed ("Exception ignored in ...") and the cell goes on as if never interrupted. Either way
the main thread keeps the lock and can go on importing (it is re-entrant), while every other thread's
next import waits for ever: the forkserver's warm-up thread, then the launch waiting on it, hung.

Two parts put that right:

* :func:`interrupts_outside_imports` (:func:`outside_imports` as a decorator) around what this
  package runs in the main thread (a launch, a job): an interrupt that arrives while the import machinery itself runs is delivered a few
  milliseconds later, once it left, so it lands in the import's caller as a normal interrupt.
* :func:`release_import_lock_left_by_interrupt` after every cell of a kernel (the extension's
  ``post_run_cell`` hook): a lock an interrupt left held while the user's own code imported is
  given back before this package's threads need it.
"""

from __future__ import annotations

import _imp
import _signal
import _thread
import functools
import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar, cast

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

REDELIVERY_DELAY_S = 0.005  # how long an interrupt that arrived inside the import machinery waits
LONGEST_DEFERRAL_S = 1.0  # then it is raised wherever it lands (an import blocked on another thread)
_SIGINT = int(signal.SIGINT)
_IMPORT_LOCKS_CODE = "<frozen importlib._bootstrap>"  # co_filename of the code that takes the import locks

_MOST_HOLDS = 64  # the lock is re-entrant: each interrupted import can leave one more hold


def release_import_lock_left_by_interrupt() -> int:
    """Release CPython's global import lock as many times as this thread holds it; returns how many.

    Only Python's import machinery holds that lock, and only inside its own short critical sections:
    code that runs outside them (a kernel between two cells) and still holds it holds a lock an
    interrupt left behind."""
    released = 0
    while released < _MOST_HOLDS:
        try:
            _imp.release_lock()
        except RuntimeError:  # not held by this thread (any more)
            break
        released += 1
    if released:
        log.info("released the import lock an interrupt had left held (%d hold(s))", released)
    return released


class interrupts_outside_imports:  # noqa: N801  (used as a function: ``with interrupts_outside_imports():``)
    """While the block runs in the main thread with Python's own SIGINT handler in force, an
    interrupt never raises inside the import machinery: it is delivered again once it left.

    On every job's path: ``_signal``, the C module under :mod:`signal`, costs ~1 µs a call where
    :mod:`signal`'s enum conversions cost ~8 µs."""

    __slots__ = ("_installed",)

    def __enter__(self) -> None:
        global _deferred_since
        self._installed = (
            threading.current_thread() is threading.main_thread()
            and _signal.getsignal(_SIGINT) is signal.default_int_handler
        )  # not: another thread, SIGINT ignored, or a handler someone else chose (ours, nested)
        if self._installed:
            _deferred_since = None  # an interrupt a previous block deferred has been delivered or dropped
            _signal.signal(_SIGINT, _interrupt_outside_imports)

    def __exit__(self, *exc_info: object) -> None:
        if self._installed and _signal.getsignal(_SIGINT) is _interrupt_outside_imports:
            _signal.signal(_SIGINT, signal.default_int_handler)


def outside_imports(function: F) -> F:
    """``function`` run inside :class:`interrupts_outside_imports`."""

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        with interrupts_outside_imports():
            return function(*args, **kwargs)

    return cast(F, guarded)


def _interrupt_outside_imports(signum: int, frame: FrameType | None) -> None:
    global _deferred_since, _redelivery_pending
    interrupted = frame
    while interrupted is not None and interrupted.f_code is _HANDLER_CODE:  # a signal during this handler
        interrupted = interrupted.f_back
    now = time.monotonic()
    if _deferred_since is None:
        _deferred_since = now
    if (
        interrupted is None
        or interrupted.f_code.co_filename != _IMPORT_LOCKS_CODE
        or now - _deferred_since > LONGEST_DEFERRAL_S  # an import that waits for ever stays interruptible
    ):
        _deferred_since = None
        raise KeyboardInterrupt
    if not _redelivery_pending:  # several signals inside one import are one interrupt
        _redelivery_pending = True
        _thread.start_new_thread(_deliver_again, (signum,))  # threading's start() would wait here


def _deliver_again(signum: int) -> None:
    global _redelivery_pending
    time.sleep(REDELIVERY_DELAY_S)
    _redelivery_pending = False
    _thread.interrupt_main(signal.Signals(signum))


_HANDLER_CODE = _interrupt_outside_imports.__code__
_deferred_since: float | None = None  # when the interrupt now waiting for the import machinery came
_redelivery_pending = False
