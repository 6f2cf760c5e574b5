"""Process liveness in tests: which pids still run (zombies count as gone), waiting for them to go."""

from __future__ import annotations

import time
from collections.abc import Iterable

import psutil


def alive(pids: Iterable[int]) -> list[int]:
    """The pids among ``pids`` whose process still runs (a zombie has exited: it is not counted)."""
    living = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                living.append(pid)
        except psutil.NoSuchProcess:
            pass
    return living


def wait_until_gone(pids: Iterable[int], seconds: float) -> list[int]:
    """Wait up to ``seconds`` for every process to exit; returns those still alive then."""
    deadline = time.monotonic() + seconds
    living = alive(pids)
    while living and time.monotonic() < deadline:
        time.sleep(0.2)
        living = alive(living)
    return living


def kill(pids: Iterable[int]) -> None:
    """SIGKILL what is left, so that a failing test leaves nothing behind."""
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
