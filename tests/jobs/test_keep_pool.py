"""A detached job on a pool that is not kept yet, through the Python API: the pool is launched
again by the real agent and the job outlives the process; refused while a job holds the pool."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.agent import agent_stopped_afterwards

pytestmark = pytest.mark.slow


@pytest.fixture
def agent_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    with agent_stopped_afterwards():
        yield


def test_submit_on_a_pool_this_process_launched_makes_it_kept_unless_a_job_holds_it(
    agent_settings: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpugeek_jupyter import ClusterClient
    from gpugeek_jupyter.detached import is_kept
    from gpugeek_jupyter.errors import ConflictError
    from gpugeek_jupyter.jobs import run_cell

    job = ClusterClient().create_job(gpu_type="cpu", count=2, name="mine")
    first_pool = job.pool
    holder = threading.Thread(target=run_cell, args=(first_pool, "import time\ntime.sleep(4)", {}))
    holder.start()
    try:
        deadline = time.monotonic() + 30
        while not first_pool.registry.open_jobs(first_pool.id) and time.monotonic() < deadline:
            time.sleep(0.05)
        busy = first_pool.registry.open_jobs(first_pool.id)[0]
        with pytest.raises(ConflictError) as refused:
            job.submit(script_path=str(tmp_path / "never.py"))
    finally:
        holder.join()
    assert str(refused.value) == (
        f"pool 'mine' is busy with {busy.id} (running): a detached job would launch it again under the agent, "
        "which ends that job; wait for it, or run detached jobs on a kept pool: "
        "gpugeek_jupyter.launch(..., keep=True)"
    )
    assert job.pool is first_pool and first_pool.status.value == "ready"  # nothing was done

    script = tmp_path / "train.py"
    script.write_text("import os\nprint('rank', os.environ['RANK'], flush=True)\n")
    handle = job.submit(script_path=str(script))
    assert capsys.readouterr().err == (
        "[gpugeek] pool 'mine' is kept now: the agent launched it again (2 x cpu), so it and the job outlive "
        "this process; what its old workers held is gone\n"
    )
    assert handle.wait(timeout=120).result().returncodes == [0, 0]
    assert job.pool is not first_pool and is_kept(job.pool) and not job.owns_pool
    assert first_pool.registry.pool_by_id(first_pool.id).status.value == "stopped"
    job.stop()  # the agent's pool now: left running, and said so (it was this job's)
    assert job.pool.status.is_live
    assert capsys.readouterr().err == (
        "[gpugeek] pool 'mine' is left running: it is the agent's since a job was submitted to it "
        "(stop it with job.pool.stop() or %gpugeek_stop mine)\n"
    )


def test_a_cell_runs_attached_or_detached_through_the_job_api(agent_settings: None) -> None:
    from gpugeek_jupyter import ClusterClient

    job = ClusterClient().create_job(gpu_type="cpu", count=2, name="cells", keep=True)
    offset = 7
    attached = job.run_cell("import torch.distributed as dist\ndist.get_rank() + offset", {"offset": offset})
    handle = job.submit_cell("rank * 10 + offset", {"offset": offset})
    offset = 100  # captured at submit time: the running job keeps 7

    assert attached.ok and attached.values == [7, 8] and job.results == [attached]
    assert handle.wait(timeout=120).result().values == [7, 17]
    job.pool.stop()


def test_a_detached_job_through_its_handle_logs_followed_where_timeout_restarts_and_a_replayed_traceback(
    agent_settings: None, tmp_path: Path
) -> None:
    from gpugeek_jupyter import ClusterClient

    job = ClusterClient().create_job(gpu_type="cpu", count=2, name="handles", keep=True)
    try:
        # logs(follow=True): lines labelled by rank as they come, until the job ends
        failing = job.submit_cell(
            "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.3)\n"
            "if rank == 1:\n    raise ValueError('bad batch')\n",
            {},
        )
        lines = list(failing.logs(follow=True))
        assert {"[rank 0] tick 0", "[rank 1] tick 2"} <= set(lines), lines
        assert failing.status() == "failed"
        # the stream ends with the failing rank's traceback, so a later attach shows it as the cell did
        end = [e for e in failing.events(follow_live=False) if e["kind"] == "end"]
        assert len(end) == 1 and end[0]["status"] == "failed" and end[0]["failed_rank"] == 1, end
        assert end[0]["traceback"].rstrip().endswith("ValueError: bad batch"), end[0]["traceback"]

        # where(): a running detached job's ranks, asked from this process
        sleeping = job.submit_cell("import time\ntime.sleep(30)", {}, timeout=6)
        deadline = time.monotonic() + 60
        while sleeping.status() != "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        report = sleeping.where()
        assert report.job_id == sleeping.id and sorted(report.entries) == [0, 1], report
        # timeout=: the detached job is ended as an attached one would be
        timed_out = sleeping.result(timeout=90)
        assert timed_out.status.value == "failed" and timed_out.timed_out, timed_out

        # max_restarts=: rank 0 fails its first attempt only; the job restarts and succeeds
        marker = tmp_path / "failed-once"
        restarted = job.submit_cell(
            "import pathlib\np = pathlib.Path(marker)\n"
            "if rank == 0 and not p.exists():\n    p.touch()\n    raise RuntimeError('first attempt')\nrank",
            {"marker": str(marker)},
            max_restarts=1,
        ).result(timeout=120)
        assert restarted.ok and restarted.restarts == 1 and restarted.values == [0, 1], restarted
    finally:
        job.pool.stop()
