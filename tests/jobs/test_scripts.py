"""Scripts run through ``job.run`` / ``%gpugeek_run --script`` exactly as under torchrun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.net import free_port

HERE = Path(__file__).parent
REPO = HERE.parents[1]


def _read_ranks(directory: Path) -> list[dict[str, Any]]:
    return [json.loads((directory / f"rank{r}.json").read_text()) for r in range(2)]


def test_script_sees_the_same_environment_argv_and_cwd_as_under_torchrun(pool: Any, in_tmp: Path) -> None:
    from gpugeek_jupyter import ClusterClient

    shutil.copy(HERE / "torchrun_env_script.py", in_tmp / "envscript.py")
    (in_tmp / "out").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",) and not k.startswith("TORCHELASTIC")}
    env["PYTHONPATH"] = str(REPO)
    torchrun = Path(sys.executable).with_name("torchrun")
    subprocess.run(
        [
            str(torchrun),
            "--nproc_per_node=2",
            f"--master-port={free_port()}",
            "envscript.py",
            "--out",
            "out",
            "--lr",
            "3e-05",
            "--batch_size",
            "256",
        ],
        cwd=in_tmp,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    under_torchrun = _read_ranks(in_tmp / "out")
    shutil.rmtree(in_tmp / "out")
    (in_tmp / "out").mkdir()

    job = ClusterClient().job_on("jobs")
    result = job.run(script_path="envscript.py", args=["--out", "out"], hyperparams={"lr": 3e-5, "batch_size": 256})
    assert result.ok, result.report()
    under_job = _read_ranks(in_tmp / "out")

    varying = ("MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE")
    for rank, (theirs, ours) in enumerate(zip(under_torchrun, under_job, strict=True)):
        for seen in (theirs, ours):
            assert int(seen["env"]["MASTER_PORT"]) > 0
            assert seen["env"]["TORCHELASTIC_ERROR_FILE"].endswith(f"attempt_0/{rank}/error.json")
        assert ours["env"]["TORCHELASTIC_RUN_ID"] == result.job_id
        assert {k: v for k, v in ours["env"].items() if k not in varying} == {
            k: v for k, v in theirs["env"].items() if k not in varying
        }
        assert {k: v for k, v in ours.items() if k != "env"} == {k: v for k, v in theirs.items() if k != "env"}
    assert under_job[1]["env"]["RANK"] == "1" and under_job[1]["env"]["LOCAL_RANK"] == "1"


def test_script_exit_status_decides_success(pool: Any, in_tmp: Path) -> None:
    from gpugeek_jupyter.jobs import run_script

    (in_tmp / "ok.py").write_text("import sys\nsys.exit(0)\n")
    (in_tmp / "three.py").write_text("import os, sys\nif os.environ['RANK'] == '1':\n    sys.exit(3)\n")
    (in_tmp / "boom.py").write_text("raise RuntimeError('no data')\n")

    assert run_script(pool, "ok.py").returncodes == [0, 0]
    three = run_script(pool, "three.py")
    # rank 1's failure stops rank 0 when it comes first (as torchrun stops the others)
    assert not three.ok and three.returncodes[1] == 3 and three.returncodes[0] in (0, None) and three.failed_rank == 1
    boom = run_script(pool, "boom.py")
    # every rank raises; the first to exit with 1 stops the other, which may have exited with 1 too by then
    assert not boom.ok and boom.returncodes[boom.failed_rank] == 1, boom.returncodes
    assert all(code in (1, None) for code in boom.returncodes), boom.returncodes
    assert "RuntimeError: no data" in boom.traceback and "boom.py" in boom.traceback


def test_script_builds_its_own_process_group_and_cells_still_work_after(pool: Any, in_tmp: Path) -> None:
    from gpugeek_jupyter.jobs import run_cell, run_script

    (in_tmp / "allreduce.py").write_text(
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.ones(1)\n"
        "dist.all_reduce(t)\n"
        "assert t.item() == 2.0, t\n"
        "dist.destroy_process_group()\n"
    )
    assert run_script(pool, "allreduce.py").ok
    assert run_script(pool, "allreduce.py").ok
    after = run_cell(pool, "t = torch.ones(1)\ndist.all_reduce(t)\nt.item()", {"torch": __import__("torch")})
    assert after.values == [2.0, 2.0], after.report()


def test_a_missing_script_is_a_clear_error(pool: Any, in_tmp: Path) -> None:
    from gpugeek_jupyter.errors import SpecError
    from gpugeek_jupyter.jobs import run_script

    with pytest.raises(SpecError, match="cannot read script 'nope.py'"):
        run_script(pool, "nope.py")


def test_boolean_hyperparams_are_argparse_switches(pool: Any, in_tmp: Path) -> None:
    from gpugeek_jupyter import ClusterClient

    (in_tmp / "switches.py").write_text(
        "import argparse, json, os\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--fp16', action='store_true')\n"
        "p.add_argument('--compile', action='store_true')\n"
        "p.add_argument('--lr', type=float)\n"
        "a = p.parse_args()\n"
        "with open(f\"seen{os.environ['RANK']}.json\", 'w') as f:\n"
        "    json.dump(vars(a), f)\n"
    )
    job = ClusterClient().job_on("jobs")
    result = job.run(script_path="switches.py", hyperparams={"fp16": True, "compile": False, "lr": 0.5})
    assert result.ok, result.report()
    for rank in range(2):
        assert json.loads((in_tmp / f"seen{rank}.json").read_text()) == {"fp16": True, "compile": False, "lr": 0.5}


def test_a_script_whose_collective_only_rank_0_calls_fails_naming_the_rank_that_finished(
    pool: Any, in_tmp: Path
) -> None:
    from gpugeek_jupyter.jobs import run_script

    (in_tmp / "one_sided.py").write_text(
        "import os, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.ones(1)\n"
        "if int(os.environ['RANK']) == 0:\n"
        "    dist.all_reduce(t)\n"
    )
    result = run_script(pool, "one_sided.py")
    assert not result.ok
    failure = result.failure or ""
    # rank 1's process exits with the script, so rank 0's call fails at once instead of waiting
    assert "failed on rank 0" in failure and "rank 1 had finished the job" in failure, failure
    assert "`if rank == 0:`" in failure, failure
