"""The user's agent in tests: the real process (started on demand by the code under test), stopped
afterwards by its pid, never by name."""

from __future__ import annotations

import os
import signal
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
    try:
        psutil.Process(pid).wait(timeout=timeout)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"the agent {pid} did not stop within {timeout:.0f} s of being asked") from None


@contextmanager
def agent_stopped_afterwards() -> Iterator[None]:
    try:
        yield
    finally:
        stop_agent()
