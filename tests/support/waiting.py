"""Polling for a condition in tests, with a bound."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def poll(condition: Callable[[], Any], seconds: float, interval: float = 0.1) -> Any:
    """``condition()``'s first truthy value within ``seconds``, else its last (falsy) value."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    return condition()


def wait_for(condition: Callable[[], Any], seconds: float, what: str) -> Any:
    """Like :func:`poll`, but an ``AssertionError`` naming ``what`` when it never happens."""
    value = poll(condition, seconds)
    if not value:
        raise AssertionError(f"{what} did not happen within {seconds} s")
    return value
