"""A kept Slurm pool outlives its agent: the agent SIGKILLed while a detached job runs, the job goes
on, the pool's keeper brings a new agent, which takes the pool and the job back, and the job ends
with every line and value; with the real one-host Slurm and real processes throughout."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import psutil
import pytest

from slurm.one_host import OneHostSlurm
from support.agent import agent_stopped_afterwards

pytestmark = pytest.mark.slow

TICKING = """import time
for step in range(16):
    print(f"tick {step} on {rank}", flush=True)
    time.sleep(0.5)
rank * 100
"""


def _agent_pid(timeout: float = 60.0, not_pid: int | None = None) -> int:
    from gpugeek_jupyter.detached.connection import running_agent

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        agent = running_agent()
        if agent is not None:
            pid = int(agent.ping()["pid"])
            if pid != not_pid:
                return pid
        time.sleep(0.2)
    raise AssertionError(f"no new agent within {timeout:.0f} s")


def _submit_and_kill_the_agent(pool: Any, cell: str, agent: int) -> tuple[Any, int]:
    """Submit ``cell`` detached, SIGKILL ``agent`` once two ticks were printed; the job's handle and
    the pid of the agent the pool's keeper starts in its place."""
    from gpugeek_jupyter.detached import submit_request
    from gpugeek_jupyter.detached.stream import read_events
    from gpugeek_jupyter.jobs import cell_request

    handle = submit_request(pool, cell_request(cell, {}))
    deadline = time.monotonic() + 60
    while sum("tick" in e.get("text", "") for e in read_events(handle.id)) < 2:
        assert time.monotonic() < deadline, read_events(handle.id)
        time.sleep(0.1)
    os.kill(agent, signal.SIGKILL)
    return handle, _agent_pid(not_pid=agent)


def _out_lines(job_id: str) -> list[str]:
    from gpugeek_jupyter.detached.stream import follow

    return [e["text"] for e in follow(job_id) if e["kind"] == "out"]


def test_a_job_on_a_kept_slurm_pool_goes_on_when_its_agent_is_killed_and_a_new_agent_takes_it_back(
    slurm: OneHostSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.detached.stream import read_events
    from gpugeek_jupyter.store import get_registry

    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    with agent_stopped_afterwards():
        pool: Any = gpugeek_jupyter.launch(backend="slurm", count=2, name="keeper", keep=True)
        first_agent = _agent_pid()
        keeper = get_registry().pool_by_id(pool.id).owner_pid  # the pool's lease is its scheduler's process
        assert keeper != first_agent and "kept_scheduler" in " ".join(psutil.Process(keeper).cmdline())
        slurm_jobs = sorted(slurm.job_ids())
        assert len(slurm_jobs) == 2, slurm_jobs

        handle, second_agent = _submit_and_kill_the_agent(pool, TICKING, first_agent)
        record = handle.wait(timeout=120).record()
        values = handle.result().values
        owner = get_registry().pool_by_id(pool.id).owner
        still = sorted(slurm.job_ids())
        lines = _out_lines(handle.id)
        notices = [e["text"] for e in read_events(handle.id, limit=10_000) if e["kind"] == "notice"]

        pool.stop()
        assert slurm.wait_for_no_jobs(60) == []
        assert not psutil.pid_exists(keeper) or psutil.Process(keeper).status() == psutil.STATUS_ZOMBIE

    assert record.status.value == "succeeded", record
    assert values == [0, 100]
    assert owner == f"gpugeek agent (pid {second_agent})"
    assert still == slurm_jobs, "the pool's Slurm jobs changed while no agent ran"
    for step in range(16):  # before the kill, while no agent ran (replayed), and after (live)
        for rank in (0, 1):
            assert lines.count(f"tick {step} on {rank}\n") == 1, lines
    assert any(n.startswith("a new gpugeek agent follows this job") for n in notices), notices


FAILING_PAST_A_BARRIER = """import time
for step in range(8):
    print(f"tick {step} on {rank}", flush=True)
    time.sleep(0.5)
dist.barrier()
if rank == 1:
    raise ValueError("rank 1 fails between two barriers")
dist.barrier()
"""


def test_a_taken_over_job_whose_rank_failed_while_its_peer_waits_in_a_barrier_ends(
    slurm: OneHostSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 fails past a collective with no agent alive, keeping its process group on hold (the
    driver would judge whether the ranks stopped in step); rank 0 waits in a barrier rank 1 never
    reaches. The agent that takes the job over lets rank 1's group go, which breaks rank 0 out: the
    job ends with rank 1's error, not never."""
    import gpugeek_jupyter

    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    with agent_stopped_afterwards():
        pool: Any = gpugeek_jupyter.launch(backend="slurm", count=2, name="keeper", keep=True)
        first_agent = _agent_pid()
        handle, _ = _submit_and_kill_the_agent(pool, FAILING_PAST_A_BARRIER, first_agent)
        record = handle.wait(timeout=120).record()
        pool.stop()
        assert slurm.wait_for_no_jobs(60) == []

    assert record.status.value == "failed", record
    assert "rank 1 fails between two barriers" in (record.failure_reason or ""), record
