"""Jobs that outlive the notebook: a kept pool and a detached cell job, in real kernels, with the real
agent (a process of its own, started on demand), and the submitting kernel killed mid-job."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.agent import agent_stopped_afterwards
from support.kernel import KernelSession, magics_kernel

pytestmark = pytest.mark.slow

TICKING_CELL = """%%gpugeek_run --detach
import time
from tqdm.auto import tqdm
for step in tqdm(range(16), desc="train"):
    print(f"tick {step} on {rank}", flush=True)
    time.sleep(0.5)
rank * 100
"""


@pytest.fixture
def agent_env(isolated_registry: Path) -> Iterator[dict[str, str]]:
    """The kernels' settings; the agent they start is stopped (by pid) afterwards."""
    with agent_stopped_afterwards():
        yield {"GPUGEEK_REGISTRY": str(isolated_registry), "GPUGEEK_HEARTBEAT": "0.5", "GPUGEEK_AGENT_IDLE": "60"}


def _launch_kept(kernel: KernelSession) -> None:
    launched = kernel.run("%gpugeek_launch --gpu-type cpu --count 2 --name kept --keep --quiet", timeout=180)
    assert launched.error is None and "Error" not in launched.text, launched.text


def _submitted_id(result: Any) -> str:
    assert result.error is None, result.text
    found = re.search(r"\[gpugeek\] (job-[0-9a-f]{12}) runs on pool 'kept', detached", result.stdout)
    assert found, result.text
    return found.group(1)


def test_a_detached_job_outlives_its_killed_kernel_and_another_kernel_attaches_and_gets_its_values(
    agent_env: dict[str, str],
) -> None:
    with magics_kernel({**agent_env, "JPY_SESSION_NAME": "/work/submit.ipynb"}) as first:
        _launch_kept(first)
        job_id = _submitted_id(first.run(TICKING_CELL, timeout=60))
        time.sleep(3.0)
        first.kill()
    with magics_kernel(agent_env) as second:
        attached = second.run(f"%gpugeek_attach {job_id}", timeout=120)
        values = second.run(f"import gpugeek_jupyter\ngpugeek_jupyter.job({job_id!r}).result().values", timeout=60)

    assert attached.error is None, attached.text
    for step in (0, 1, 15):  # from before the kill (the replay), and the end (followed live)
        for rank in (0, 1):
            assert f"[rank {rank}] tick {step} on {rank}" in attached.stdout, attached.text
    assert attached.stdout.rstrip().endswith(f"[gpugeek] {job_id} succeeded"), attached.text
    assert values.error is None and values.displays[-1]["text/plain"] == "[0, 100]", values.text
    from gpugeek_jupyter.detached.stream import follow
    from gpugeek_jupyter.store import get_registry

    record = get_registry().job(job_id)
    assert (record.status.value, record.submitter) == ("succeeded", "notebook submit.ipynb, detached")
    bars = [e["state"] for e in follow(job_id) if e["kind"] == "progress"]
    assert bars and bars[-1]["desc"] == "train" and bars[-1]["n"] == 16, bars[-1:]


def test_a_detached_job_is_cancelled_from_another_kernel_within_five_seconds(agent_env: dict[str, str]) -> None:
    with magics_kernel(agent_env) as first, magics_kernel(agent_env) as second:
        _launch_kept(first)
        job_id = _submitted_id(first.run(TICKING_CELL.replace("16", "600"), timeout=60))
        time.sleep(1.0)
        asked = time.monotonic()
        cancelled = second.run(
            f"import gpugeek_jupyter\nh = gpugeek_jupyter.job({job_id!r})\nh.cancel().wait(timeout=30).status()",
            timeout=60,
        )
        took = time.monotonic() - asked

    assert cancelled.error is None and cancelled.displays[-1]["text/plain"] == "'cancelled'", cancelled.text
    assert took < 5.0, f"the job took {took:.1f} s to end after its cancel"


def test_a_detached_cell_on_this_kernels_pool_makes_it_kept_and_another_kernels_pool_is_refused(
    agent_env: dict[str, str],
) -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.store import get_registry

    with magics_kernel(agent_env, launch="--gpu-type cpu --count 2 --name here --quiet") as owner:
        with magics_kernel(agent_env) as other:
            refused = other.run("%%gpugeek_run --pool here --detach\nprint(rank)", timeout=60)
        detached = owner.run("%%gpugeek_run --detach\nimport time\ntime.sleep(2)\nrank + 10", timeout=120)
        owner.kill()  # the job and its pool are the agent's now

    assert refused.error is None and re.fullmatch(
        r"UsageError: pool 'here' belongs to another process \(kernel .+\) and ends with it, and a detached job with it; "
        r"run detached jobs on a kept pool: %gpugeek_launch --keep \.\.\.",
        refused.stderr.strip(),
    ), refused.text
    assert detached.error is None and detached.stdout.startswith(
        "[gpugeek] pool 'here' is kept now: the agent launched it again (2 x cpu), so it and the job outlive "
        "this process; what its old workers held is gone\n"
    ), detached.text
    found = re.search(r"(job-[0-9a-f]{12}) runs on pool 'here', detached", detached.stdout)
    assert found, detached.text
    assert gpugeek_jupyter.job(found.group(1)).wait(timeout=120).result().values == [10, 11]
    record = get_registry().latest_pool("here")
    assert record.status.value == "ready" and record.owner.startswith("gpugeek agent (pid "), record


def test_detached_input_mistakes_are_one_line_errors(agent_env: dict[str, str]) -> None:
    with magics_kernel(agent_env, launch="--gpu-type cpu --count 2 --name here --quiet") as kernel:
        with_out = kernel.run("%%gpugeek_run --detach -o values\nprint(rank)")
        unknown = kernel.run("%gpugeek_attach job-00000000")
        python_unknown = kernel.run("import gpugeek_jupyter\ngpugeek_jupyter.job('job-00000000')")

    assert with_out.error is None and with_out.stderr.startswith(
        "UsageError: --detach returns before the job's values exist, so -o values has nothing to store"
    ), with_out.text
    assert unknown.error is None and unknown.stderr.strip() == (
        "UsageError: no job with id 'job-00000000' (see %gpugeek_jobs)"
    ), unknown.text
    assert python_unknown.error is not None and python_unknown.error["evalue"] == (
        "no job with id 'job-00000000' (see ClusterClient().jobs())"
    ), python_unknown.text


def test_interrupting_attach_detaches_and_the_job_goes_on_then_o_stores_its_values(agent_env: dict[str, str]) -> None:
    with magics_kernel(agent_env) as kernel:
        _launch_kept(kernel)
        job_id = _submitted_id(kernel.run(TICKING_CELL, timeout=60))
        following = kernel.execute(f"%gpugeek_attach {job_id}")
        time.sleep(3.0)
        kernel.manager.interrupt_kernel()
        detached = kernel.collect(following, timeout=30)
        status = kernel.run(f"import gpugeek_jupyter\ngpugeek_jupyter.job({job_id!r}).status()")
        again = kernel.run(f"%gpugeek_attach {job_id} -o values", timeout=120)
        values = kernel.run("values")

    assert detached.error is None, detached.text
    assert f"[gpugeek] detached from {job_id}: it goes on" in detached.stdout, detached.text
    assert status.displays[-1]["text/plain"] == "'running'", status.text
    assert again.error is None and again.stdout.rstrip().endswith(f"[gpugeek] {job_id} succeeded"), again.text
    assert values.displays[-1]["text/plain"] == "[0, 100]", values.text


def test_attaching_to_a_failed_detached_job_shows_its_ranks_traceback_as_the_cell_would(
    agent_env: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import argparse, os\np = argparse.ArgumentParser()\np.add_argument('--lr')\n"
        "print('rank', os.environ['RANK'], 'lr', p.parse_args().lr, flush=True)\n"
    )
    with magics_kernel(agent_env) as kernel:
        _launch_kept(kernel)
        job_id = _submitted_id(
            kernel.run("%%gpugeek_run --detach\nprint('before', flush=True)\nif rank == 1:\n    1 / 0\n", timeout=60)
        )
        attached = kernel.run(f"%gpugeek_attach {job_id}", timeout=120)
        script_id = _submitted_id(kernel.run(f"%gpugeek_run --script-path {script} --detach -- --lr 0.1", timeout=60))
        script_attached = kernel.run(f"%gpugeek_attach {script_id}", timeout=120)

    assert script_attached.error is None, script_attached.text
    for rank in (0, 1):
        assert f"[rank {rank}] rank {rank} lr 0.1" in script_attached.stdout, script_attached.text
    assert script_attached.stdout.rstrip().endswith(f"[gpugeek] {script_id} succeeded"), script_attached.text

    assert attached.error is None, attached.text
    assert "[rank 1] before" in attached.stdout, attached.text
    traceback = [line for line in attached.stderr.splitlines() if line.startswith("[rank 1] ")]
    assert traceback and traceback[-1] == "[rank 1] ZeroDivisionError: division by zero", attached.text
    assert not any(line.startswith("[rank 0] ") for line in attached.stderr.splitlines()), attached.text
    assert re.search(rf"\[gpugeek\] {job_id} failed: .*rank 1", attached.stdout), attached.text
