"""``ClusterClient`` / ``Job``: pools for jobs from Python, and an API key that is never shown."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import pytest

SECRET = "gk-live-5e3cr3t-value"


def test_api_key_comes_from_the_environment_and_is_never_shown(monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
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
        result = job.run(script_path="./train_llm.py", hyperparams={"batch_size": 256, "lr": 3e-5},
                         on_output=lambda rank, stream, text: seen.append((rank, text)))
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

    (in_tmp / "fail.py").write_text("import sys\nsys.exit(4)\n")
    job = ClusterClient().job_on("jobs")
    result = job.run("fail.py", stream=False)
    assert not result.ok and result.returncodes == [4, 4]
    job.stop()
    assert pool.status.is_live
    assert [r.id for r in ClusterClient().jobs(limit=1)] == [result.job_id]
