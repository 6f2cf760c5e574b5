"""Reaching the user's agent: connect to its Unix socket, or start it when none answers.

The agent's files live beside the registry, in the user's private (0700) runtime folder::

    gpugeek-agent.sock   the socket it serves on (0600)
    gpugeek-agent.key    the key a client proves itself with (0600, made by the first starter)
    gpugeek-agent.lock   held while an agent is being started, so two starters make one agent
    gpugeek-agent.log    what the agent logs

The connection is Python's own ``multiprocessing.managers`` over that socket, with the key as its
authkey (an HMAC challenge on connect). A socket left by a dead agent answers nothing: it is
removed, under the lock, and a new agent started.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.managers import BaseManager
from pathlib import Path
from typing import Any

from ..config import get_config
from ..errors import GpugeekError, Phrase, Value
from ..polling import poll_until
from ..store import make_private_directory, make_private_file, write_private_file

START_TIMEOUT_S = 60.0  # an agent imports torch (its forkserver) before it answers


@dataclass(frozen=True)
class AgentPaths:
    socket: Path
    key: Path
    lock: Path
    log: Path


def agent_paths() -> AgentPaths:
    """The agent's files for this user's registry."""
    folder = Path(get_config().registry_path).expanduser().parent
    return AgentPaths(
        socket=folder / "gpugeek-agent.sock",
        key=folder / "gpugeek-agent.key",
        lock=folder / "gpugeek-agent.lock",
        log=folder / "gpugeek-agent.log",
    )


class AgentManager(BaseManager):
    """The agent's ``multiprocessing`` manager: one shared object, ``service``."""


AgentManager.register("service")


class AgentUnavailableError(GpugeekError):
    """No agent runs, and none was to be started (or it did not start)."""

    http_status = 503


def connect(start: bool = True) -> Any:
    """A proxy of the running agent's :class:`~.service.AgentService`; starts the agent when none
    answers and ``start`` is True, else raises :class:`AgentUnavailableError`."""
    paths = agent_paths()
    try:
        return _connect(paths)
    except (OSError, EOFError):
        if not start:
            raise AgentUnavailableError("no gpugeek agent is running for this user") from None
    with _start_lock(paths):
        try:  # another starter may have won while this one waited for the lock
            return _connect(paths)
        except (OSError, EOFError):
            pass
        paths.socket.unlink(missing_ok=True)  # left by a dead agent
        process = _spawn(paths)
        last_error: list[BaseException] = []

        def did_not_start() -> AgentUnavailableError:
            why = f"exit code {process.returncode}" if process.returncode is not None else str(last_error[-1])
            return AgentUnavailableError(
                Phrase("the gpugeek agent did not start ({why}); see {log}", why=why, log=Value(str(paths.log)))
            )

        def answers() -> Any:
            try:
                return _connect(paths)
            except (OSError, EOFError) as e:
                last_error.append(e)
                if process.poll() is not None:
                    raise did_not_start() from None
                return None

        return poll_until(answers, timeout=START_TIMEOUT_S, interval=0.05, what="the agent", on_timeout=did_not_start)


def running_agent() -> Any | None:
    """The running agent's service, or None when none runs (never starts one)."""
    try:
        return _connect(agent_paths())
    except (OSError, EOFError):
        return None


def agent_key(paths: AgentPaths) -> bytes:
    """The authkey; made (0600) by the first starter."""
    make_private_directory(paths.key.parent)
    if not paths.key.exists():
        try:
            write_private_file(paths.key, secrets.token_hex(32).encode())
        except FileExistsError:  # another process made it first
            pass
    return paths.key.read_bytes().strip()


def _connect(paths: AgentPaths) -> Any:
    if not paths.socket.exists():
        raise FileNotFoundError(paths.socket)
    manager = AgentManager(address=str(paths.socket), authkey=agent_key(paths))
    manager.connect()
    return manager.service()  # type: ignore[attr-defined]  # registered above


@contextmanager
def _start_lock(paths: AgentPaths) -> Iterator[None]:
    make_private_directory(paths.lock.parent)
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _spawn(paths: AgentPaths) -> subprocess.Popen[bytes]:
    """The agent, detached from its starter: a session of its own, no terminal, output to its log."""
    agent_key(paths)
    make_private_file(paths.log)
    with paths.log.open("ab") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "gpugeek_jupyter.detached"],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=dict(os.environ),
        )
