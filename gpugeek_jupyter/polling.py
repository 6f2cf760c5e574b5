"""Waiting for something to become true: the one deadline-and-sleep loop, for threads and coroutines.

A condition is asked until it answers (any true value, which :func:`poll_until` returns), ``interval``
seconds apart; it is asked once more after the deadline has passed, so a slow machine never turns
"just done" into a timeout. At the deadline the caller's ``on_timeout()`` exception is raised, or a
:class:`PollTimeout` naming ``what``:

>>> poll_until(lambda: 42, timeout=1, interval=0.1, what="the answer")
42
>>> poll_until(lambda: None, timeout=0, interval=0, what="pool 'dev' to stop")
Traceback (most recent call last):
...
gpugeek_jupyter.polling.PollTimeout: pool 'dev' to stop: not done within 0 s

A condition that raises ends the wait with its exception (a failure is not worth waiting out).
Where running out of time is not an error (a grace period, a best-effort confirmation),
:func:`wait_for` answers None instead:

>>> wait_for(lambda: None, timeout=0, interval=0) is None
True
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["PollTimeout", "apoll_until", "poll_until", "wait_for"]

T = TypeVar("T")


class PollTimeout(TimeoutError):
    """What was waited for did not happen within the timeout (when the caller gave no ``on_timeout``)."""


def poll_until(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    interval: float,
    what: str,
    on_timeout: Callable[[], BaseException] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``condition()``'s first true answer, asking every ``interval`` s for ``timeout`` s at most."""
    answer = wait_for(condition, timeout=timeout, interval=interval, clock=clock, sleep=sleep)
    if not answer:
        raise _timeout(what, timeout, on_timeout)
    return answer


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    interval: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T | None:
    """:func:`poll_until` that answers None at the deadline instead of raising."""
    deadline = clock() + timeout
    while True:
        answer = condition()
        if answer:
            return answer
        if clock() > deadline:
            return None
        if interval > 0:
            sleep(interval)


async def apoll_until(
    condition: Callable[[], Awaitable[T | None]],
    *,
    timeout: float,
    interval: float,
    what: str,
    on_timeout: Callable[[], BaseException] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """:func:`poll_until` for a coroutine condition, sleeping with ``asyncio.sleep`` (the loop goes on)."""
    deadline = clock() + timeout
    while True:
        answer = await condition()
        if answer:
            return answer
        if clock() > deadline:
            raise _timeout(what, timeout, on_timeout)
        await asyncio.sleep(interval)


def _timeout(what: str, timeout: float, on_timeout: Callable[[], BaseException] | None) -> BaseException:
    if on_timeout is not None:
        return on_timeout()
    return PollTimeout(f"{what}: not done within {timeout:.0f} s")
