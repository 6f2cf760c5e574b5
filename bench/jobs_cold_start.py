"""Cold start: the first job on a fresh local pool (pool start included) against a torchrun launch.

Both run a 2-rank gloo all_reduce:

- torchrun: ``torchrun --nproc_per_node=2 allreduce.py``, wall time of the whole command;
- gpugeek, as in a notebook: a fresh Python process loads the package and starts its warm-up (what
  ``%load_ext gpugeek_jupyter`` does: the pool forkserver imports torch in the background) and
  waits for it, as a user reading the notebook would; then ``gpugeek_jupyter.launch(gpu_type="cpu",
  count=2)`` and the first ``run_cell`` with the all_reduce, timed from before the launch to the
  result (what the notebook waits for);
- gpugeek, as a script from nothing: a fresh process timed from before ``import gpugeek_jupyter``
  through launch and first job, no warm-up (the forkserver starts at the launch).
- gpugeek, a kept pool (``launch(keep=True)``) from a fresh process: the user's agent launches the
  pool from its own warm forkserver; timed from before the launch to the first job's result, once
  with the agent already up (a fresh kernel's usual case) and once with the agent to be started;
- gpugeek, a small script on a running pool: ``Job.run(script_path=allreduce.py)`` (the same script
  torchrun runs), median of 3 runs in the extension-loaded process; each script gets fresh rank
  processes, as under torchrun, so this is the API's own cost of a script against torchrun's.

The interpreter's own start and the pool's shutdown are not included.

Each is run ``--rounds`` times, interleaved; medians are compared.

    PYTHONPATH=. .venv/bin/python bench/jobs_cold_start.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import run_torchrun

ALLREDUCE = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == 2.0
dist.destroy_process_group()
"""

FIRST_JOB = """
import json, os, sys, time
started = time.perf_counter()
import gpugeek_jupyter
from gpugeek_jupyter.jobs import run_cell
if sys.argv[1] == "warm":
    from gpugeek_jupyter.pools.worker_origin import warm_up
    warm_up().join()
imported = time.perf_counter()
pool = gpugeek_jupyter.launch(gpu_type="cpu", count=2, name=f"cold-{os.getpid()}", keep=sys.argv[1] == "kept")
launched = time.perf_counter()
result = run_cell(pool, "import torch\\nt = torch.ones(1)\\ndist.all_reduce(t)\\nt.item()", {})
done = time.perf_counter()
assert result.values == [2.0, 2.0], result
times = {"from_import": done - started, "from_launch": done - imported, "pool_start": launched - imported}
if sys.argv[1] == "warm":  # the small script again on this running pool, through the Python API
    from gpugeek_jupyter.client import Job
    job, scripts = Job(pool, owns_pool=False), []
    for _ in range(3):
        begun = time.perf_counter()
        job.run(script_path=sys.argv[2], stream=False).raise_for_status()
        scripts.append(time.perf_counter() - begun)
    times["script_on_pool"] = sorted(scripts)[1]
print(json.dumps(times))
pool.stop()
"""


def torchrun_wall(script: Path) -> float:
    start = time.perf_counter()
    run_torchrun(script, timeout=300)
    return time.perf_counter() - start


def first_job(
    registry_dir: str, mode: str, registry: str | None = None, script: Path | None = None
) -> dict[str, float]:
    env = dict(os.environ, GPUGEEK_REGISTRY=registry or os.path.join(registry_dir, f"cold-{time.time_ns()}.sqlite"))
    env["GPUGEEK_AGENT_IDLE"] = "120"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", FIRST_JOB, mode, str(script or "")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def stop_agent(registry: str) -> None:
    """Stop the agent of ``registry``'s user (if one runs) and wait until its process has gone."""
    code = (
        "import psutil\n"
        "from gpugeek_jupyter.detached.connection import running_agent\n"
        "agent = running_agent()\n"
        "if agent is not None:\n"
        "    pid = agent.ping()['pid']\n"
        "    agent.shutdown()\n"
        "    psutil.Process(pid).wait(timeout=120)\n"
    )
    env = dict(os.environ, GPUGEEK_REGISTRY=registry)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH")]))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=180)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    script = work / "allreduce.py"
    script.write_text(ALLREDUCE)
    torchrun, warm, cold, agent_up, agent_start = [], [], [], [], []
    kept_registry = str(work / "kept" / "gpugeek.sqlite")
    os.makedirs(os.path.dirname(kept_registry), mode=0o700)
    for _ in range(args.rounds):
        torchrun.append(torchrun_wall(script))
        warm.append(first_job(str(work), "warm", script=script))
        cold.append(first_job(str(work), "cold"))
        stop_agent(kept_registry)
        agent_start.append(first_job(str(work), "kept", kept_registry))  # the launch starts the agent
        agent_up.append(first_job(str(work), "kept", kept_registry))  # the agent is up: a fresh kernel's case
    stop_agent(kept_registry)
    baseline = statistics.median(torchrun)
    rows = [
        ("torchrun --nproc_per_node=2, whole command", baseline),
        ("extension loaded: launch() + first job (run_cell)", statistics.median(o["from_launch"] for o in warm)),
        ("  of which the pool start", statistics.median(o["pool_start"] for o in warm)),
        ("script from nothing: import + launch() + first job", statistics.median(o["from_import"] for o in cold)),
        ("kept pool, agent up: launch(keep=True) + first job", statistics.median(o["from_launch"] for o in agent_up)),
        (
            "kept pool, agent to start: launch(keep=True) + first job",
            statistics.median(o["from_launch"] for o in agent_start),
        ),
        (
            "the same script by Job.run on a running pool (fresh rank processes)",
            statistics.median(o["script_on_pool"] for o in warm),
        ),
    ]
    print(f"\nCold start, 2 cpu ranks (gloo) all_reduce, median of {args.rounds} interleaved runs\n")
    print("| what | s | vs torchrun |")
    print("|---|---:|---:|")
    for label, seconds in rows:
        print(f"| {label} | {seconds:.2f} | {seconds / baseline:.2f}x |")
    print("\ntarget: extension loaded, first job on a fresh local pool, pool start included, <= 0.33x torchrun")
    print("target: kept pool with the agent up, launch + first job, <= 0.33x torchrun")


if __name__ == "__main__":
    main()
