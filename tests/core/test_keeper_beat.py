"""The beat of a kept Slurm pool's keeper (pools/slurm/kept_scheduler.py), against a real registry: it holds
the pool's lease while its agent lives, brings an agent back when it died (the agent's start
command), carries out a stop requested while no agent runs, and gives the pool up after
``keeper_grace_seconds`` with no agent back. The scheduler and Slurm around it are tested in
tests/slurm/test_slurm_agent_restart.py."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpugeek_jupyter import config
from gpugeek_jupyter.pools.slurm.kept_scheduler import KeeperFiles, _OwnerWatch
from gpugeek_jupyter.store import PoolStatus, get_registry, make_private_directory


@pytest.fixture
def dead_owner() -> Iterator[int]:
    """The pid of a process that has ended (the killed agent)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    yield process.pid


def _watch(tmp_path: Path, owner_pid: int, restart_marker: Path) -> tuple[int, _OwnerWatch, list[str]]:
    registry = get_registry()
    record = registry.add_pool("kept", "slurm", {"name": "kept", "backend": "slurm"}, {}, owner="gpugeek agent (pid 1)")
    files = KeeperFiles.of(record.id)
    make_private_directory(files.folder)
    files.write_owner(owner_pid)
    # a real program as the agent's start command: it leaves a mark, and starts no agent
    command = [sys.executable, "-c", f"open({str(restart_marker)!r}, 'a').write('started\\n')"]
    ended: list[str] = []
    watch = _OwnerWatch(files, {"restart_command": command}, record.id, ended.append)
    return record.id, watch, ended


def _run(watch: _OwnerWatch, ended: list[str], timeout: float = 30.0) -> None:
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    thread.join(timeout)
    watch.done.set()
    assert ended, "the watch did not end"


def test_with_no_agent_back_the_keeper_starts_one_then_gives_the_pool_up_after_the_grace(
    tmp_path: Path, dead_owner: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUGEEK_KEEPER_GRACE", "2")
    config.set_config(None)
    marker = tmp_path / "restarts"
    pool_id, watch, ended = _watch(tmp_path, dead_owner, marker)
    before = get_registry().pool_by_id(pool_id).heartbeat_at
    _run(watch, ended)

    assert ended == ["its agent died and none took the pool back within 2 s"]
    assert watch.gave_up == ended[0]
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.read_text() == "started\n"  # once: the next try would be RESTART_EVERY_S later
    assert get_registry().pool_by_id(pool_id).heartbeat_at > before  # it held the lease meanwhile


def test_a_stop_requested_while_no_agent_runs_is_carried_out_by_the_keeper(tmp_path: Path, dead_owner: int) -> None:
    pool_id, watch, ended = _watch(tmp_path, dead_owner, tmp_path / "restarts")
    get_registry().set_pool_status(pool_id, PoolStatus.READY)
    get_registry().request_stop("kept")
    _run(watch, ended)

    assert ended == ["stopped"] and watch.gave_up is None
    record = get_registry().pool_by_id(pool_id)
    assert (record.status, record.reason) == (PoolStatus.STOPPED, "stopped while no agent ran")


def test_while_its_agent_lives_the_keeper_only_beats(tmp_path: Path) -> None:
    import os

    marker = tmp_path / "restarts"
    pool_id, watch, ended = _watch(tmp_path, os.getpid(), marker)
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    time.sleep(1.5)
    get_registry().set_pool_status(pool_id, PoolStatus.STOPPED, reason="stopped by the user")
    thread.join(10)

    assert ended == ["its pool ended"] and not marker.exists()
