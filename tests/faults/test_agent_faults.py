"""The per-user agent under faults: killed with SIGKILL mid-job, a socket left by a dead agent, and
two processes starting it at once. Real processes throughout."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from support.agent import agent_stopped_afterwards

pytestmark = pytest.mark.slow


@pytest.fixture
def agent_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    with agent_stopped_afterwards():
        yield


def _agent_pid() -> int:
    from gpugeek_jupyter.detached.connection import connect

    return int(connect().ping()["pid"])


def test_an_agent_killed_mid_job_leaves_the_job_failed_with_its_pool_lost_and_no_worker_behind(
    agent_settings: None,
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.detached import submit_request
    from gpugeek_jupyter.jobs import cell_request
    from gpugeek_jupyter.store import get_registry

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="kept", keep=True)
    handle = submit_request(pool, cell_request("import time\nprint('up', flush=True)\ntime.sleep(600)", {}))
    deadline = time.monotonic() + 60
    while handle.status() != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    agent = psutil.Process(_agent_pid())
    workers = [p for p in agent.children(recursive=True) if "python" in p.name()]
    agent.send_signal(signal.SIGKILL)
    agent.wait(timeout=10)

    handle.wait(timeout=30)  # swept: the agent is gone
    record = handle.record()
    assert record.status.value == "failed" and record.failure_reason == "pool lost", record
    pool_record = get_registry().pool_by_id(pool.id)
    assert pool_record.status.value == "lost" and "exited" in (pool_record.reason or ""), pool_record
    assert all(i.stopped_at is not None for i in get_registry().worker_intervals(pool.id))  # cost stops
    gone = psutil.wait_procs(workers, timeout=30)[1]
    assert not gone, f"worker processes outlived the agent: {gone}"


def test_a_socket_left_by_a_dead_agent_is_replaced_by_a_new_agent(agent_settings: None) -> None:
    from gpugeek_jupyter.detached.connection import agent_paths

    path = agent_paths().socket
    path.parent.mkdir(parents=True, exist_ok=True)
    left = socket.socket(socket.AF_UNIX)
    left.bind(str(path))  # a socket file that nobody serves any more
    left.close()
    assert path.exists()
    pid = _agent_pid()
    assert psutil.pid_exists(pid) and pid != os.getpid()


def _start_and_say_pid(registry: str, answers: Any) -> None:
    os.environ["GPUGEEK_REGISTRY"] = registry
    answers.put(_agent_pid())


def test_two_processes_starting_the_agent_at_once_get_the_same_one(
    agent_settings: None, isolated_registry: Path
) -> None:
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    starters = [context.Process(target=_start_and_say_pid, args=(str(isolated_registry), answers)) for _ in range(2)]
    for starter in starters:
        starter.start()
    pids = {answers.get(timeout=120) for _ in starters}
    for starter in starters:
        starter.join(timeout=30)
    assert len(pids) == 1, f"two agents started: {pids}"
    assert _agent_pid() in pids


@pytest.fixture
def outside_scheduler(tmp_path: Path) -> Iterator[str]:
    """A dask scheduler and one worker that are no pool's: real processes, stopped by pid."""
    import json
    import subprocess
    import sys

    scheduler_file = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
         "--no-dashboard", "--scheduler-file", str(scheduler_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        worker = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--no-dashboard"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        yield address
    finally:
        for process in (worker, scheduler):
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()


def test_a_kept_pool_attached_by_address_is_attached_again_by_the_next_agent_when_its_agent_is_killed(
    agent_settings: None, outside_scheduler: str
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.detached.connection import connect
    from gpugeek_jupyter.store import get_registry

    pool = gpugeek_jupyter.launch(backend="address", address=outside_scheduler, count=1, name="outside", keep=True)
    first = _agent_pid()
    os.kill(first, signal.SIGKILL)
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(first).wait(timeout=10)

    second = int(connect().ping()["pid"])  # a new agent, started by this call
    record = get_registry().live_pool("outside")
    events = [e["message"] for e in get_registry().events(record.id)]
    old = get_registry().pool_by_id(pool.id)
    get_registry().request_stop("outside")
    deadline = time.monotonic() + 60
    while get_registry().pool_by_id(record.id).status.is_live and time.monotonic() < deadline:
        time.sleep(0.1)

    assert second != first and record.id != pool.id
    assert record.owner == f"gpugeek agent (pid {second})" and record.scheduler_address == outside_scheduler
    assert (old.status.value, old.reason) == ("lost", "its owner process exited without stopping it")
    assert events[-1] == f"attached again by a new gpugeek agent (its agent died with pool {pool.id})", events
    assert get_registry().pool_by_id(record.id).status.value == "stopped"


def test_the_agent_starts_its_forkserver_at_once_and_exits_by_itself_when_idle(
    isolated_registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpugeek_jupyter.detached.connection import agent_paths

    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "3")
    with agent_stopped_afterwards():
        agent = psutil.Process(_agent_pid())
        deadline = time.monotonic() + 60  # the forkserver is up before any pool is asked for
        while not any("forkserver" in " ".join(c.cmdline()) for c in agent.children()):
            assert time.monotonic() < deadline, [c.cmdline() for c in agent.children()]
            time.sleep(0.1)
        # no kept pool, no detached job: after its idle period it ends, and its socket with it
        gone, alive = psutil.wait_procs([agent], timeout=60)
        assert gone and not alive, f"the idle agent {agent.pid} is still running"
        assert not agent_paths().socket.exists()
