"""Training code written for torchrun by the libraries people use, run unchanged through ``job.run``.

Each test runs a script under ``torchrun --nproc_per_node=2`` and then on a 2-worker pool, in the
same working directory, and checks both give the same exit status per rank and the same final loss,
which rank 0 prints as ``FINAL_LOSS=<float>``. Every script seeds its model and its data, shards the
data with a seeded sampler and reduces over a fixed 2-rank gloo group, so the two runs do the same
float32 arithmetic: the loss is expected to agree to all ten printed digits (it does here).
``REL_TOL`` leaves room only for float32 re-association (a different intra-op thread split), far
less than training on a different shard, with another seed or for another number of steps changes.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from support.net import free_port

HERE = Path(__file__).parent
SCRIPTS = HERE / "scripts"
REPO = HERE.parents[1]
REL_TOL = 1e-5
POOL_NAME = "realcode"  # the name conftest's ``pool`` fixture attaches under
TORCHRUN_TIMEOUT = 240

pytestmark = pytest.mark.slow

_FINAL_LOSS = re.compile(r"^FINAL_LOSS=(\S+)$", re.MULTILINE)
# What a launcher sets for its ranks; none of it may leak from this process into torchrun's.
_LAUNCHER_VARS = (
    "OMP_NUM_THREADS",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
)


def final_loss(text: str) -> float:
    """The one ``FINAL_LOSS=`` value in ``text``."""
    found = _FINAL_LOSS.findall(text)
    assert len(found) == 1, f"expected one FINAL_LOSS line, got {found}:\n{text[-4000:]}"
    return float(found[0])


def torchrun(script: Path, args: list[str], cwd: Path) -> tuple[list[int], str, float]:
    """Run ``torchrun --nproc_per_node=2 script ARGS`` in ``cwd``: per-rank exit codes, stdout, seconds."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS and not k.startswith("TORCHELASTIC")}
    env["PYTHONPATH"] = str(REPO)
    launcher = Path(sys.executable).with_name("torchrun")
    command = [str(launcher), "--nproc_per_node=2", f"--master-port={free_port()}", str(script), *args]
    started = time.monotonic()
    done = subprocess.run(
        command, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=TORCHRUN_TIMEOUT
    )
    seconds = time.monotonic() - started
    assert done.returncode == 0, f"torchrun failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    return [0, 0], done.stdout, seconds  # torchrun exits 0 only when every rank did


def assert_same_run(script: Path, args: list[str], cwd: Path) -> float:
    """Run ``script`` under torchrun, then on the pool; assert equal exit codes and final loss."""
    from gpugeek_jupyter import ClusterClient

    codes, stdout, seconds = torchrun(script, args, cwd)
    expected = final_loss(stdout)
    print(f"{script.name}: torchrun {seconds:.1f}s, FINAL_LOSS={expected}")

    result = ClusterClient().job_on(POOL_NAME).run(script_path=str(script), args=args)
    assert result.returncodes == codes, result.report()
    assert result.ok, result.report()
    got = final_loss(result.output[0])
    assert _FINAL_LOSS.search(result.output[1]) is None  # only rank 0 reports, as under torchrun
    assert math.isclose(got, expected, rel_tol=REL_TOL), (got, expected)
    return got


def test_plain_ddp_with_multiprocess_dataloader_trains_as_under_torchrun(pool: Any, in_tmp: Path) -> None:
    """DDP over gloo with a DistributedSampler and num_workers=2 (then persistent workers) matches torchrun."""
    assert_same_run(SCRIPTS / "plain_ddp_dataloader.py", ["--epochs", "3"], in_tmp)


def test_hugging_face_trainer_trains_as_under_torchrun(pool: Any, in_tmp: Path) -> None:
    """``transformers.Trainer`` on a tiny BERT, dataloader_num_workers=2, reaches torchrun's train_loss."""
    assert_same_run(SCRIPTS / "hf_trainer.py", ["--output-dir", "hf-out", "--max-steps", "10"], in_tmp)


def test_lightning_fabric_trains_as_under_torchrun(pool: Any, in_tmp: Path) -> None:
    """Lightning Fabric detects the torchelastic environment on the pool as under torchrun and matches its loss."""
    assert_same_run(SCRIPTS / "lightning_fabric.py", ["--steps", "12"], in_tmp)


# A notebook: a first cell of imports and a data helper, then the training cell run on every rank.
SETUP_CELL = """\
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def synthetic_regression(size=256, features=16):
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(size, features, generator=generator)
    y = x @ torch.randn(features, 1, generator=generator) + 0.1 * torch.randn(size, 1, generator=generator)
    return TensorDataset(x, y)
"""

TRAINING_CELL = """\
torch.manual_seed(0)
dataset = synthetic_regression()
sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
loader = DataLoader(dataset, batch_size=8, num_workers=2, sampler=sampler)
model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(3):
    sampler.set_epoch(epoch)
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    epoch_loss = torch.tensor([total / len(loader)])
    dist.all_reduce(epoch_loss)
    final_loss = epoch_loss.item() / world_size
if rank == 0:
    print(f"FINAL_LOSS={final_loss:.10g}", flush=True)
final_loss
"""


def test_ddp_dataloader_cell_trains_as_the_same_code_under_torchrun(pool: Any, in_tmp: Path) -> None:
    """A notebook's DDP cell with a num_workers=2 DataLoader, via ``run_cell``, matches torchrun running it."""
    from gpugeek_jupyter.jobs import run_cell

    (in_tmp / "setup_cell.py").write_text(SETUP_CELL)
    (in_tmp / "training_cell.py").write_text(TRAINING_CELL)
    _, stdout, seconds = torchrun(HERE / "torchrun_cell.py", ["setup_cell.py", "training_cell.py"], in_tmp)
    expected = final_loss(stdout)
    print(f"training cell: torchrun {seconds:.1f}s, FINAL_LOSS={expected}")

    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(SETUP_CELL, namespace)  # noqa: S102 - the first cell, run in the notebook's kernel
    assert namespace["torch"] is torch
    result = run_cell(pool, TRAINING_CELL, namespace)
    assert result.returncodes == [0, 0], result.report()
    assert result.ok, result.report()
    got = final_loss(result.output[0])
    assert result.values[0] == result.values[1] == pytest.approx(got, rel=1e-9)  # every rank saw the reduced loss
    assert math.isclose(got, expected, rel_tol=REL_TOL), (got, expected)


def test_a_torchrun_script_pasted_into_a_cell_trains_as_under_torchrun(pool: Any, in_tmp: Path) -> None:
    """The plain DDP script, unchanged, as a cell: its ``init_process_group("gloo")`` gets the cell's
    group, its ``destroy_process_group()`` ends it, and the next paste builds it again."""
    from gpugeek_jupyter.jobs import run_cell

    script = SCRIPTS / "plain_ddp_dataloader.py"
    _, stdout, _ = torchrun(script, [], in_tmp)
    expected = final_loss(stdout)
    # the ranks' sys.argv is the launching process's, as a notebook kernel's cells see its own: a
    # cell before gives the script's argparse the arguments torchrun gave it above, none
    assert run_cell(pool, "import sys\nsys.argv[1:] = []", {}).ok
    for _ in range(5):  # its DDP model is freed after its destroy_process_group(), each time
        result = run_cell(pool, script.read_text(), {"__name__": "__main__"}, timeout=TORCHRUN_TIMEOUT)
        assert result.returncodes == [0, 0], result.report()
        assert math.isclose(final_loss(result.output[0]), expected, rel_tol=REL_TOL)
