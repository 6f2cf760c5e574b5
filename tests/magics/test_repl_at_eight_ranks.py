"""At 8 ranks a training cell's output fits on a screen: one grouped line per step, one progress
bar for the loop, one traceback when every rank fails (a real kernel, a cpu pool of 8 workers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.kernel import KernelSession, pool_kernel

pytestmark = pytest.mark.slow

TRAIN = """%%gpugeek_run
import time
import torch
from tqdm import tqdm
model = gg.ddp(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(0)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in tqdm(range(3), desc="train"):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.4f}")
    time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with pool_kernel(tmp_path_factory, "eight", count=8) as session:
        yield session


def test_a_training_cell_shows_one_line_per_step_and_one_progress_bar(kernel: KernelSession) -> None:
    before = len(kernel.messages)
    result = kernel.run(TRAIN, timeout=240)
    assert result.error is None, result.text
    lines = result.stdout.splitlines()
    assert len(lines) == 3, lines  # the same loss on every rank (same data, DDP): one line per step
    assert all(line.startswith("[ranks 0-7] step ") for line in lines), lines
    assert result.stderr == "", result.stderr  # the bar is a widget, not text
    opened = [
        m
        for m in kernel.messages[before:]
        if m["msg_type"] == "comm_open" and m["content"]["data"]["state"].get("_model_name") == "FloatProgressModel"
    ]
    assert len(opened) == 1, len(opened)  # one bar for the loop of all 8 ranks


def test_a_failure_on_every_rank_is_one_traceback_and_one_line_for_the_rest(kernel: KernelSession) -> None:
    result = kernel.run("%%gpugeek_run\nimport math\nmath.sqrt(-1)", timeout=240)
    assert result.error is not None and result.error["ename"] == "JobFailed", result.text
    text = "\n".join(result.error["traceback"])
    assert text.count("ValueError: math domain error") == 2, text  # the rank's traceback, then the reason
    assert "ranks 1-7 failed with the same error" in result.error["evalue"], result.error["evalue"]
    assert result.stdout == "" and result.stderr == "", result.text
