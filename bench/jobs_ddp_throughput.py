"""DDP training throughput: the same loop under torchrun and through ``%%gpugeek_run``.

MLP 784-1024-1024-10, batch 64 per rank, SGD, 2 ranks on CPU (gloo), steps/s timed inside the loop
(after warm-up steps), measured in one run, the runs interleaved. A third row runs the loop with a
plain ``client.run`` on the same warm dask workers (the event-loop thread, no job machinery).

    PYTHONPATH=. .venv/bin/python bench/jobs_ddp_throughput.py [--steps 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from _common import run_torchrun

LOOP = """
import time
import torch
import torch.nn.functional as F
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                          torch.nn.Linear(1024, 10))
model = {wrap}
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))
def step():
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()
for _ in range(10):
    step()
start = time.perf_counter()
for _ in range(STEPS):
    step()
steps_per_s = STEPS / (time.perf_counter() - start)
"""

TORCHRUN_SCRIPT = (
    """
import json, os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
dist.init_process_group("gloo")
"""
    + LOOP.format(wrap="DistributedDataParallel(net)")
    + """
if os.environ["RANK"] == "0":
    print(json.dumps({"steps_per_s": steps_per_s}))
dist.destroy_process_group()
"""
)

CELL = LOOP.format(wrap="gg.ddp(net)") + "\nsteps_per_s"


def _plain_client_run(steps: int) -> float:
    """The loop as a function run by ``client.run`` on the warm process group."""
    namespace: dict[str, object] = {"STEPS": steps}
    from torch.nn.parallel import DistributedDataParallel

    namespace["DistributedDataParallel"] = DistributedDataParallel
    exec(LOOP.format(wrap="DistributedDataParallel(net)"), namespace)
    return float(namespace["steps_per_s"])  # type: ignore[arg-type]


def torchrun_rate(script: Path) -> float:
    out = run_torchrun(script)
    return float(json.loads(out.strip().splitlines()[-1])["steps_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("GPUGEEK_REGISTRY", os.path.join(tempfile.mkdtemp(), "bench.sqlite"))

    from IPython.core.interactiveshell import InteractiveShell

    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell

    script = Path(tempfile.mkdtemp()) / "ddp_loop.py"
    script.write_text(TORCHRUN_SCRIPT.replace("STEPS", str(args.steps)))
    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext gpugeek_jupyter", store_history=False)
    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name=f"bench-ddp-{os.getpid()}")
    try:
        assert run_cell(pool, "dist.barrier()", {}).ok  # warm process group
        rates: dict[str, list[float]] = {"torchrun": [], "%%gpugeek_run": [], "plain client.run": []}
        cell = "%%gpugeek_run --rank0 -o rate\n" + CELL.replace("STEPS", str(args.steps))
        for _ in range(args.rounds):
            rates["torchrun"].append(torchrun_rate(script))
            result = shell.run_cell(cell, store_history=False)
            assert result.success, result.error_in_exec
            rates["%%gpugeek_run"].append(float(shell.user_ns["rate"]))
            plain = pool.client.run(_plain_client_run, args.steps)
            rates["plain client.run"].append(min(plain.values()))
        baseline = statistics.median(rates["torchrun"])
        print(
            f"\nDDP MLP 784-1024-1024-10, batch 64/rank, SGD, 2 cpu ranks (gloo): median of {args.rounds} "
            f"interleaved runs of {args.steps} steps\n"
        )
        print("| how | steps/s | vs torchrun |")
        print("|---|---:|---:|")
        for label, values in rates.items():
            rate = statistics.median(values)
            print(f"| {label} | {rate:.1f} | {rate / baseline:.2f}x |")
        print("\ntarget: %%gpugeek_run >= 1.0x torchrun")
    finally:
        pool.stop()


if __name__ == "__main__":
    main()
