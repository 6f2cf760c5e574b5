"""Scheduled runs with the real agent (a process of its own, started on demand by the schedule):
runs that continue each other's checkpoints, an overlapping occurrence skipped, the agent killed
across missed occurrences and one catch-up when it is back, and failures that pause."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest

from support.agent import agent_stopped_afterwards

pytestmark = pytest.mark.slow

RESUMING_CELL = """
import os
import torch
model = gg.ddp(torch.nn.Linear(2, 1))
ckpt = gg.checkpoint(os.environ["GPUGEEK_CHECKPOINT_DIR"], model=model)
start = ckpt.step
for step in range(start, start + 2):
    ckpt.save(step + 1)
print(f"steps {start} to {ckpt.step}, resumed from {os.environ['GPUGEEK_RESUME_FROM'] or 'nothing'}", flush=True)
(start, ckpt.step)
"""


@pytest.fixture
def agent_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("GPUGEEK_AGENT_IDLE", "60")
    with agent_stopped_afterwards():
        yield


@pytest.fixture
def kept_pool(agent_settings: None) -> Any:
    import gpugeek_jupyter

    return gpugeek_jupyter.launch(gpu_type="cpu", count=2, name="kept", keep=True)


def _until(what: str, check: Callable[[], Any], timeout: float = 180.0, about: Callable[[], Any] = list) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:.0f} s: {what} ({about()})")


def _ended(schedule: Any, status: str = "succeeded") -> list[Any]:
    """The schedule's runs that ended so, oldest first."""
    return [r for r in reversed(schedule.runs()) if r.status.value == status]


def test_a_short_interval_schedule_runs_three_times_and_each_run_continues_the_steps_of_the_one_before(
    kept_pool: Any,
) -> None:
    import gpugeek_jupyter

    daily = gpugeek_jupyter.schedule(cell=RESUMING_CELL, every="2s", pool="kept", name="daily", namespace={})
    runs = _until("three succeeded runs", lambda: (found := _ended(daily))[2:] and found[:3], about=daily.runs)
    daily.pause()

    values = [gpugeek_jupyter.job(r.job_id).result().values for r in runs]
    assert values == [[(0, 2), (0, 2)], [(2, 4), (2, 4)], [(4, 6), (4, 6)]], values
    assert runs[0].resumed_from is None
    assert [r.resumed_from.rsplit("/", 1)[-1] for r in runs[1:]] == ["step-000000002.pt", "step-000000004.pt"]
    log = gpugeek_jupyter.job(runs[2].job_id).logs(rank=0)
    assert f"steps 4 to 6, resumed from {runs[2].resumed_from}" in log, log
    record = gpugeek_jupyter.job(runs[1].job_id).record()
    assert (record.pool_name, record.submitter) == ("kept", f"schedule daily, run {runs[1].id}, detached")


def test_an_occurrence_while_the_previous_run_still_goes_is_skipped_and_recorded_skipped(kept_pool: Any) -> None:
    import gpugeek_jupyter

    slow = gpugeek_jupyter.schedule(
        cell="import time\ntime.sleep(5)\nrank", every="1s", pool="kept", name="slow", namespace={}
    )
    first = _until("the first run's end", lambda: _ended(slow), about=slow.runs)[0]
    slow.pause()
    skipped = [r for r in slow.runs() if r.status.value == "skipped" and r.due_at < first.ended_at]
    assert len(skipped) >= 3, slow.runs()
    assert all(r.reason == f"run {first.id} ({first.job_id}) was still running" for r in skipped), skipped
    assert all(r.job_id is None for r in skipped)
    started = [r for r in slow.runs() if r.job_id is not None and r.started_at < first.ended_at]
    assert [r.id for r in started] == [first.id]  # nothing ran beside it


def test_an_agent_killed_across_two_missed_occurrences_runs_one_catch_up_when_it_is_back(
    agent_settings: None,
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.detached.connection import connect
    from gpugeek_jupyter.store import get_registry

    every = 6.0
    nightly = gpugeek_jupyter.schedule(
        cell="print('update', flush=True)\nrank", every=f"{every:.0f}s", name="nightly", gpu_type="cpu", count=1
    )
    first = _until("the first run's end", lambda: _ended(nightly), about=nightly.runs)[0]
    assert get_registry().latest_pool(first.pool_name).status.value == "stopped"  # made for the run, stopped after
    agent = psutil.Process(int(connect(start=False).ping()["pid"]))
    agent.send_signal(signal.SIGKILL)
    agent.wait(timeout=10)
    killed = time.time()
    due = nightly.record().next_run_at
    time.sleep(max(0.0, due + every + 1.0 - time.time()))  # two occurrences pass while no agent runs
    connect()  # the agent is back (any process needing it starts it)
    back = time.time()

    catch_up = _until(
        "the catch-up run's end",
        lambda: [r for r in _ended(nightly) if r.due_at > killed],
        about=nightly.runs,
    )[0]
    # two occurrences at least passed while no agent ran (a third if the agent took long to start)
    assert catch_up.missed >= 2 and killed < catch_up.due_at <= back, catch_up
    nightly.pause()
    after_kill = [r for r in nightly.runs() if r.due_at > killed and r.due_at <= back]
    assert [r.id for r in after_kill] == [catch_up.id], after_kill  # one run, not a burst
    assert nightly.record().next_run_at > back


def test_a_failing_run_counts_and_max_failures_in_a_row_pause_the_schedule_saying_so(kept_pool: Any) -> None:
    import gpugeek_jupyter

    broken = gpugeek_jupyter.schedule(
        cell="raise RuntimeError('bad input data')",
        every="1s",
        pool="kept",
        name="broken",
        max_failures=2,
        namespace={},
    )
    _until("the schedule paused", lambda: broken.record().status.value == "paused", about=broken.runs)
    record = broken.record()
    failed = _ended(broken, "failed")
    assert len(failed) == 2, broken.runs()
    assert record.reason is not None and record.reason.startswith("paused after 2 failed runs in a row (the last: ")
    assert "bad input data" in record.reason, record.reason
    time.sleep(2.5)
    assert [r.id for r in broken.runs() if r.job_id is not None] == [r.id for r in reversed(failed)]  # none since

    broken.resume()
    assert (broken.record().status.value, broken.record().failures) == ("active", 0)
    broken.delete()
    assert [s["name"] for s in gpugeek_jupyter.schedules.list_schedules()] == []


def test_with_overlap_queue_the_occurrence_waits_for_the_run_before_and_a_further_one_is_skipped(
    kept_pool: Any,
) -> None:
    import gpugeek_jupyter

    queued = gpugeek_jupyter.schedule(
        cell="import time\ntime.sleep(4)\nrank", every="1s", pool="kept", name="queued", overlap="queue", namespace={}
    )
    first, second = _until("two runs' ends", lambda: _ended(queued)[1:] and _ended(queued)[:2], about=queued.runs)
    queued.pause()
    assert second.due_at < first.ended_at <= second.started_at, (first, second)  # it waited its turn
    skipped = [r for r in queued.runs() if r.status.value == "skipped" and r.due_at < first.ended_at]
    assert skipped and all(
        r.reason == f"run {first.id} ({first.job_id}) was still running and run {second.id} waited" for r in skipped
    ), skipped


def test_with_overlap_replace_the_running_job_is_cancelled_for_the_next_run(kept_pool: Any) -> None:
    import gpugeek_jupyter

    replaced = gpugeek_jupyter.schedule(
        cell="import time\ntime.sleep(600)", every="3s", pool="kept", name="replaced", overlap="replace", namespace={}
    )
    first = _until("a cancelled run", lambda: _ended(replaced, "cancelled"), about=replaced.runs)[0]
    after = _until(
        "the run that replaced it",
        lambda: [r for r in replaced.runs() if r.id > first.id and r.job_id],
        about=replaced.runs,
    )[-1]  # the oldest run after it that ran a job
    replaced.pause()
    for run in replaced.runs():
        if run.job_id and not gpugeek_jupyter.job(run.job_id).done():
            gpugeek_jupyter.job(run.job_id).cancel()
    assert f"job {first.job_id} was replaced by the schedule's next run ({after.id})" in (first.reason or ""), first
    assert gpugeek_jupyter.job(first.job_id).status() == "cancelled"
    assert replaced.record().failures == 0  # a replaced run is no failure


def test_a_run_whose_kept_pool_no_longer_exists_fails_saying_so_and_counts(kept_pool: Any) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.store import get_registry

    orphan = gpugeek_jupyter.schedule(cell="rank", every="1h", pool="kept", name="orphan", namespace={})
    _until("the first run's end", lambda: _ended(orphan), about=orphan.runs)
    kept_pool.stop()
    get_registry().set_next_run(orphan.id, 0.0)  # the next occurrence is due now
    failed = _until("a failed run", lambda: _ended(orphan, "failed"), about=orphan.runs)[0]
    assert failed.reason == (
        "pool 'kept' no longer exists (relaunch it with keep=True, or delete the schedule and make one that "
        "launches a pool for each run)"
    ), failed
    assert (failed.job_id, orphan.record().failures) == (None, 1)
    orphan.delete()


def test_a_pool_made_for_a_run_carries_its_budget_and_the_budget_stops_the_run(agent_settings: None) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.store import get_registry

    capped = gpugeek_jupyter.schedule(
        cell="import time\ntime.sleep(120)", every="1h", gpu_type="cpu", count=1, budget=0.00001,
        name="capped", namespace={},
    )  # fmt: skip
    ended = _until(
        "the run's end",
        lambda: [r for r in capped.runs() if r.status.value in ("failed", "cancelled")],
        about=capped.runs,
    )[0]
    job = get_registry().job(ended.job_id)
    pool = get_registry().pool_by_id(job.pool_id)
    capped.delete()

    assert "budget" in (job.failure_reason or ""), job
    assert pool.status.value == "stopped" and "budget" in (pool.reason or ""), pool
    assert pool.spec["budget"] == 0.00001


SCRIPT_RUN = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
folder, resume_from = os.environ["GPUGEEK_CHECKPOINT_DIR"], os.environ["GPUGEEK_RESUME_FROM"]
step = torch.load(resume_from)["step"] if resume_from else 0
if dist.get_rank() == 0:
    torch.save({"step": step + 1}, os.path.join(folder, f"step-{step + 1:09d}.pt"))
print(f"rank {dist.get_rank()} from step {step} to {step + 1}", flush=True)
dist.destroy_process_group()
"""


def test_a_script_schedule_runs_on_its_kept_pool_and_each_run_resumes_from_the_last_ones_file(
    kept_pool: Any, tmp_path: Any
) -> None:
    import gpugeek_jupyter

    script = tmp_path / "update.py"
    script.write_text(SCRIPT_RUN)
    update = gpugeek_jupyter.schedule(script_path=str(script), every="2s", pool="kept", name="update")
    runs = _until("two succeeded runs", lambda: (found := _ended(update))[1:] and found[:2], about=update.runs)
    update.pause()

    assert runs[0].resumed_from is None and runs[1].resumed_from.endswith("/step-000000001.pt"), runs
    for run, (start, end) in zip(runs, [(0, 1), (1, 2)], strict=True):
        handle = gpugeek_jupyter.job(run.job_id)
        assert handle.record().kind == "script" and handle.result().returncodes == [0, 0]
        for rank in (0, 1):
            assert f"rank {rank} from step {start} to {end}" in handle.logs(rank=rank)
    update.delete()


def test_a_run_whose_pool_would_pass_the_users_quota_fails_naming_the_limit_and_starts_nothing(
    agent_settings: None, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import gpugeek_jupyter
    from gpugeek_jupyter.store import get_registry

    config_dir = tmp_path / "jupyter-config"  # the admin's setting, read by the agent that runs the schedule
    config_dir.mkdir()
    (config_dir / "jupyter_gpugeek_config.json").write_text(json.dumps({"GpugeekConfig": {"quota_max_workers": 1}}))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(config_dir))
    too_big = gpugeek_jupyter.schedule(cell="rank", every="1h", gpu_type="cpu", count=2, name="big", namespace={})
    failed = _until("a failed run", lambda: _ended(too_big, "failed"), about=too_big.runs)[0]
    too_big.delete()

    assert failed.job_id is None and "past the quota of 1 (GpugeekConfig.quota_max_workers" in failed.reason, failed
    assert [p for p in get_registry().list_pools() if p.name.startswith("big-")] == []  # nothing was launched
