"""A detached job's result on disk: whole or absent, 0600, and past ``result_bytes`` kept without its
values, saying so when they are asked for."""

from __future__ import annotations

import stat

import pytest

from gpugeek_jupyter import config
from gpugeek_jupyter.detached.results import load_result, result_path, save_result, values_of
from gpugeek_jupyter.errors import GpugeekError
from gpugeek_jupyter.jobs.result import JobResult
from gpugeek_jupyter.store import JobStatus


def _result(values: list[object]) -> JobResult:
    return JobResult(
        job_id="job-0000abcd",
        pool="kept",
        kind="cell",
        status=JobStatus.SUCCEEDED,
        returncodes=[0, 0],
        values=values,
        duration_s=1.0,
    )


def test_a_result_is_kept_whole_and_private() -> None:
    save_result(_result([{"loss": 0.29}, {"loss": 0.31}]))
    path = result_path("job-0000abcd")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not path.with_suffix(".partial").exists()
    loaded = load_result("job-0000abcd")
    assert loaded is not None and values_of(loaded) == [{"loss": 0.29}, {"loss": 0.31}]


def test_a_result_past_the_limit_is_kept_without_values_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUGEEK_RESULT_BYTES", "1000")
    config.set_config(None)
    save_result(_result([b"x" * 4000, b"y" * 4000]))
    loaded = load_result("job-0000abcd")
    assert loaded is not None and loaded.values == [] and loaded.returncodes == [0, 0]
    with pytest.raises(GpugeekError) as raised:
        values_of(loaded)
    message = str(raised.value)
    assert message.startswith("job 'job-0000abcd' has no values to give back: the ranks' values were ")
    assert "over the limit of 1000 (GpugeekConfig.result_bytes, GPUGEEK_RESULT_BYTES)" in message
    assert message.endswith("(e.g. result_bytes=2000)")


def test_no_result_is_none() -> None:
    assert load_result("job-ffffffff") is None


def test_cancelling_a_job_whose_pool_cannot_be_reached_says_which_process_to_interrupt() -> None:
    import os
    import socket

    from gpugeek_jupyter.detached import JobHandle
    from gpugeek_jupyter.errors import GpugeekError
    from gpugeek_jupyter.store import PoolStatus, Submitter, get_registry, process_started_at

    registry = get_registry()
    pool = registry.add_pool("here", "local", {"gpu_type": "cpu", "count": 2}, {"on_demand": 1.0}, owner="tests")
    registry.set_pool_status(pool.id, PoolStatus.READY)  # a row with no scheduler address: nothing to reach
    me = Submitter("notebook a.ipynb", os.getpid(), socket.gethostname(), process_started_at(os.getpid()))
    registry.queue_job("job-0000beef", pool.id, "here", "cell", "0" * 64, 2, me)
    with pytest.raises(GpugeekError) as raised:
        JobHandle("job-0000beef").cancel()
    assert str(raised.value) == (
        "job 'job-0000beef' cannot be cancelled from here: its pool 'here' has no scheduler yet; "
        "interrupt the process that runs it (notebook a.ipynb)"
    )
