"""``ClusterClient`` / ``Job``: pools for jobs from Python, and an API key that is never shown."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import pytest

SECRET = "gk-live-5e3cr3t-value"


def test_api_key_comes_from_the_environment_and_is_never_shown(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from gpugeek_jupyter import ClusterClient
    from gpugeek_jupyter.errors import SpecError

    monkeypatch.setenv("GPUGEEK_API_KEY", SECRET)
    caplog.set_level(logging.DEBUG)
    client = ClusterClient()
    assert client.has_api_key
    assert SECRET not in repr(client) and SECRET not in str(client) and SECRET not in repr(vars(client))
    with pytest.raises(SpecError) as failure:
        client.create_job(gpu_type="cpu", count=0)
    assert SECRET not in str(failure.value) and SECRET not in repr(failure.value)
    with pytest.raises(TypeError):
        pickle.dumps(client)
    assert SECRET not in caplog.text
    assert not ClusterClient(api_key="").has_api_key


def test_create_job_mistakes_name_keyword_arguments_not_flags() -> None:
    from gpugeek_jupyter import ClusterClient
    from gpugeek_jupyter.errors import SpecError

    with pytest.raises(SpecError) as raised:
        ClusterClient().create_job(gpu_type="A100-80GB", count=0)
    assert str(raised.value) == "count must be a whole number from 1 to 1024, got 0 (e.g. count=4)"
    with pytest.raises(SpecError) as raised:
        ClusterClient().create_job(gpu_type="cpu", count=2, name="\n")
    assert str(raised.value).endswith("got '\\n' (e.g. name='dev')") and "\n" not in str(raised.value)


def test_a_keyword_no_launch_takes_is_named_with_the_closest_one() -> None:
    """Python's own TypeError would name PoolSpec.create (or take a typo for an option's value)."""
    import gpugeek_jupyter
    from gpugeek_jupyter import ClusterClient
    from gpugeek_jupyter.errors import SpecError

    with pytest.raises(SpecError) as raised:
        ClusterClient().create_job(gpu_type="cpu", count=2, colour="red")
    assert str(raised.value).startswith("create_job() takes no keyword 'colour' (it takes account, address, ")
    with pytest.raises(SpecError) as raised:
        gpugeek_jupyter.launch(gpu_type="cpu", cuont=2)
    assert str(raised.value).startswith("launch() takes no keyword 'cuont'; did you mean count=? (it takes ")
    assert ", keep, " in str(raised.value)


def test_cell_and_run_mistakes_name_the_keyword(pool: Any) -> None:
    from gpugeek_jupyter import ClusterClient
    from gpugeek_jupyter.errors import SpecError

    job = ClusterClient().job_on("jobs")
    for call, expected in [
        (lambda: job.run_cell("rank", timout=5), "run_cell() takes no keyword 'timout'; did you mean timeout=? "),
        (
            lambda: job.submit_cell("rank", rank_0=True),
            "submit_cell() takes no keyword 'rank_0'; did you mean rank0=? ",
        ),
        (
            lambda: job.run_cell("rank", [1]),
            "namespace must be a mapping of names to values, got [1] (e.g. namespace=globals())",
        ),
        (
            lambda: job.run_cell("rank", timeout="soon"),
            "timeout must be a number of seconds > 0, got 'soon' (e.g. timeout=600)",
        ),
        (
            lambda: job.run_cell("rank", max_restarts=True),
            "max_restarts must be a whole number >= 0, got True (e.g. max_restarts=2)",
        ),
    ]:
        with pytest.raises(SpecError) as raised:
            call()
        assert str(raised.value).startswith(expected), str(raised.value)
    assert job.run_cell("rank").values == [0, 1] and job.results[-1].ok


@pytest.mark.timeout(120)
def test_create_job_launches_a_pool_and_runs_a_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpugeek_jupyter import ClusterClient
    from gpugeek_jupyter.store import get_registry

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train_llm.py").write_text(
        "import argparse, os\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--batch_size', type=int)\n"
        "p.add_argument('--lr', type=float)\n"
        "a = p.parse_args()\n"
        "print(os.environ['RANK'], a.batch_size, a.lr)\n"
    )
    seen: list[tuple[int, str]] = []
    with ClusterClient(api_key=SECRET).create_job(gpu_type="cpu", count=2, name="llm") as job:
        assert job.pool.name == "llm" and job.pool.spec.count == 2
        result = job.run(
            script_path="./train_llm.py",
            hyperparams={"batch_size": 256, "lr": 3e-5},
            on_output=lambda rank, stream, text: seen.append((rank, text)),
        )
        assert result.ok and result.returncodes == [0, 0] and result.duration_s > 0
        assert sorted(seen) == [(0, "0 256 3e-05\n"), (1, "1 256 3e-05\n")]
        assert result.job_id == job.results[-1].job_id
        record = get_registry().job(result.job_id)
        assert record.kind == "script" and record.hyperparams == {"batch_size": 256, "lr": 3e-5}
        assert record.rank_exits == [0, 0] and record.status.value == "succeeded"
        assert "llm" in repr(job)
    assert not job.pool.status.is_live  # leaving the block stopped the pool it launched


def test_job_on_a_running_pool_leaves_it_running(pool: Any, in_tmp: Path) -> None:
    from gpugeek_jupyter import ClusterClient

    # rank 1 exits once rank 0 has: the first failure stops the other ranks, so rank 1 could otherwise
    # be stopped (no exit status) before its own sys.exit(4), depending on timing
    (in_tmp / "fail.py").write_text(
        "import os, sys, time\nif os.environ['RANK'] == '1':\n    time.sleep(30)\nsys.exit(4)\n"
    )
    job = ClusterClient().job_on("jobs")
    result = job.run("fail.py", stream=False)
    assert not result.ok and result.returncodes == [4, None] and result.failed_rank == 0, result
    job.stop()
    assert pool.status.is_live
    assert [r.id for r in ClusterClient().jobs(limit=1)] == [result.job_id]


def test_run_env_reaches_every_rank_of_that_run(pool: Any, in_tmp: Path) -> None:
    from gpugeek_jupyter import ClusterClient

    (in_tmp / "show.py").write_text("import os\nprint(os.environ['RANK'], os.environ['ACCELERATE_USE_CPU'])\n")
    job = ClusterClient().job_on("jobs")
    result = job.run(script_path="show.py", env={"ACCELERATE_USE_CPU": "true"}, stream=False)
    assert result.ok and result.output == ["0 true\n", "1 true\n"]


@pytest.mark.parametrize(
    "env, message",
    [
        (
            {"RANK": "3"},
            "env={'RANK': '3'}: torchrun's own variables are set by the launcher for each rank and cannot be overridden",
        ),
        ({"A-B": "1"}, "env={'A-B': '1'}: a name must be letters, digits and '_'"),
        (
            {"A": "x\0y"},
            "env={'A': 'x\\x00y'}: a value cannot contain a NUL character (e.g. env={'NCCL_DEBUG': 'INFO'})",
        ),
        ({"A": ["x"]}, "env={'A': ['x']}: a value must be a string, got list"),
    ],
)
def test_run_env_mistakes_name_the_keyword_and_the_value(
    pool: Any, in_tmp: Path, env: dict[str, Any], message: str
) -> None:
    from gpugeek_jupyter import ClusterClient
    from gpugeek_jupyter.errors import SpecError

    (in_tmp / "noop.py").write_text("")
    with pytest.raises(SpecError) as raised:
        ClusterClient().job_on("jobs").run(script_path="noop.py", env=env)
    assert message in str(raised.value) and "\n" not in str(raised.value)


NO_GUARD_SCRIPT = """\
import os
from gpugeek_jupyter import ClusterClient
with open("top-level-runs", "a") as f:
    f.write(f"{os.getpid()}\\n")
job = ClusterClient().create_job(gpu_type="cpu", count=2, name="noguard")
result = job.run(script_path="train.py", env={"WANDB_MODE": "offline"})
print("RESULT", result.ok, result.returncodes)
job.stop()
"""

TRAIN_WITH_LOADER_WORKERS = """\
import os, torch, torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
dist.init_process_group("gloo")
ds = TensorDataset(torch.arange(32.0))
total = torch.tensor([sum(float(b[0].sum()) for b in DataLoader(ds, batch_size=4, num_workers=2, sampler=DistributedSampler(ds)))])
dist.all_reduce(total)
print(os.environ["WANDB_MODE"], total.item())
"""


def test_a_plain_script_without_a_main_guard_launches_runs_and_stops(tmp_path: Path) -> None:
    """The workers never run the launching script's top level again: no guard needed, no phantom pools."""
    import os
    import subprocess
    import sys

    from gpugeek_jupyter.store import Registry

    (tmp_path / "launch.py").write_text(NO_GUARD_SCRIPT)
    (tmp_path / "train.py").write_text(TRAIN_WITH_LOADER_WORKERS)
    registry = tmp_path / "registry.sqlite"
    env = {**os.environ, "GPUGEEK_REGISTRY": str(registry), "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run(
        [sys.executable, "launch.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RESULT True [0, 0]" in done.stdout
    assert "[rank 0] offline 496.0" in done.stdout and "[rank 1] offline 496.0" in done.stdout
    assert len((tmp_path / "top-level-runs").read_text().split()) == 1
    pools = Registry(registry).list_pools()
    assert [(p.name, p.status.value) for p in pools] == [("noguard", "stopped")]
    assert "Traceback" not in done.stderr and "ERROR" not in done.stderr, done.stderr  # success is quiet


def test_a_launch_while_multiprocessing_reruns_the_main_script_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing
    import time

    from gpugeek_jupyter import ClusterClient
    from gpugeek_jupyter.errors import PoolStartError

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    started = time.monotonic()
    with pytest.raises(PoolStartError, match='put the launch under `if __name__ == "__main__":`'):
        ClusterClient().create_job(gpu_type="cpu", count=2)
    assert time.monotonic() - started < 5


def test_jobs_takes_the_pool_name_first_as_the_magic_does(pool: Any, in_tmp: Path) -> None:
    from gpugeek_jupyter import ClusterClient
    from gpugeek_jupyter.errors import SpecError

    result = ClusterClient().job_on("jobs").run_cell("1 + 1")
    assert result.ok, result.report()
    assert [r.id for r in ClusterClient().jobs("jobs", limit=1)] == [result.job_id]
    assert [r.id for r in ClusterClient().jobs(pool="jobs", limit=1)] == [result.job_id]
    with pytest.raises(SpecError) as number:
        ClusterClient().jobs(5)  # type: ignore[arg-type]
    assert str(number.value) == "pool must be a pool name (a number of jobs is limit=N), got 5 (e.g. pool='misc')"
