"""DDP training throughput: the same loop under torchrun and through ``%%gpugeek_run``.

MLP 784-1024-1024-10, batch 64 per rank, SGD, 2 ranks on CPU (gloo), steps/s timed inside the loop
(after warm-up steps), measured in one run, the runs interleaved. A third row is the same cell
reporting its loss with ``gg.log`` every step (``loss.item()`` included); a fourth runs the loop with
a plain ``client.run`` on the same warm dask workers (the event-loop thread, no job machinery).

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
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss
for _ in range(10):
    step()
start = time.perf_counter()
for i in range(STEPS):
    loss = step()
{log}steps_per_s = STEPS / (time.perf_counter() - start)
"""
GG_LOG = "    gg.log(step=i, loss=loss.item())\n"  # what a training loop that reports its loss adds

TORCHRUN_SCRIPT = (
    """
import json, os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
dist.init_process_group("gloo")
"""
    + LOOP.format(wrap="DistributedDataParallel(net)", log="")
    + """
if os.environ["RANK"] == "0":
    print(json.dumps({"steps_per_s": steps_per_s}))
dist.destroy_process_group()
"""
)

CELL = LOOP.format(wrap="gg.ddp(net)", log="") + "\nsteps_per_s"
LOGGING_CELL = LOOP.format(wrap="gg.ddp(net)", log=GG_LOG) + "\nsteps_per_s"


def _plain_client_run(steps: int) -> float:
    """The loop as a function run by ``client.run`` on the warm process group."""
    namespace: dict[str, object] = {"STEPS": steps}
    from torch.nn.parallel import DistributedDataParallel

    namespace["DistributedDataParallel"] = DistributedDataParallel
    exec(LOOP.format(wrap="DistributedDataParallel(net)", log=""), namespace)
    return float(namespace["steps_per_s"])  # type: ignore[arg-type]


def torchrun_rate(script: Path) -> float:
    out = run_torchrun(script)
    return float(json.loads(out.strip().splitlines()[-1])["steps_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
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
        logged = "%%gpugeek_run, gg.log every step"
        rates: dict[str, list[float]] = {"torchrun": [], "%%gpugeek_run": [], logged: [], "plain client.run": []}
        cell = "%%gpugeek_run --rank0 -o rate\n" + CELL.replace("STEPS", str(args.steps))
        logging_cell = "%%gpugeek_run --rank0 -o rate\n" + LOGGING_CELL.replace("STEPS", str(args.steps))
        for _ in range(args.rounds):
            rates["torchrun"].append(torchrun_rate(script))
            for label, source in (("%%gpugeek_run", cell), (logged, logging_cell)):
                result = shell.run_cell(source, store_history=False)
                assert result.success, result.error_in_exec
                rates[label].append(float(shell.user_ns["rate"]))
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
        with_log = statistics.median(rates[logged]) / statistics.median(rates["%%gpugeek_run"])
        print(f"\ngg.log every step: {with_log:.2f}x the same cell without it (target >= 0.99x)")
        print("target: %%gpugeek_run >= 1.0x torchrun")
    finally:
        pool.stop()


if __name__ == "__main__":
    main()
