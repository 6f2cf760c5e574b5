"""The user's agent in tests: the real process (started on demand by the code under test), stopped
afterwards by its pid, never by name."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil


def stop_agent(timeout: float = 60.0) -> None:
    """Ask the running agent of this registry (if any) to stop; SIGKILL it if it does not in time."""
    from gpugeek_jupyter.detached.connection import running_agent

    agent = running_agent()
    if agent is None:
        return
    pid = agent.ping()["pid"]
    agent.shutdown()
    deadline = time.monotonic() + timeout
    while _running(pid):  # an agent a Jupyter server started is its child: a zombie until it reaps it
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"the agent {pid} did not stop within {timeout:.0f} s of being asked")
        time.sleep(0.1)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextmanager
def agent_stopped_afterwards() -> Iterator[None]:
    try:
        yield
    finally:
        stop_agent()
