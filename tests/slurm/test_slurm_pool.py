"""A slurm pool against a real slurmctld: two Slurm jobs, a DDP cell, a script job, a clean stop."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from gpugeek_jupyter.pools.scheduler_workers import connected_workers
from slurm.one_host import OneHostSlurm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DDP_CELL = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.full((8, 4), float(dist.get_rank() + 1))
loss = model(x).pow(2).mean()
loss.backward()
optimizer.step()
weights = [p.detach().clone() for p in model.parameters()]
gathered = [torch.zeros_like(weights[0]) for _ in range(dist.get_world_size())]
dist.all_gather(gathered, weights[0])
all(torch.equal(g, gathered[0]) for g in gathered), dist.get_world_size(), os.environ["MASTER_ADDR"]
"""

SCRIPT = """
import os
import torch.distributed as dist
dist.init_process_group("gloo")
t = __import__("torch").ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} sum {int(t.item())}", flush=True)
dist.destroy_process_group()
"""


def _jobs_of(slurm: OneHostSlurm, name: str) -> list[tuple[str, str]]:
    answer = slurm.run("squeue", "-h", "-n", f"gpugeek-{name}", "-o", "%i|%T")
    return [tuple(line.split("|")) for line in answer.stdout.split()]  # type: ignore[misc]


def test_a_two_worker_cpu_pool_is_two_slurm_jobs_that_run_a_ddp_cell_and_a_script(
    slurm: OneHostSlurm, tmp_path: Path
) -> None:
    import os

    import gpugeek_jupyter
    from gpugeek_jupyter.client import ClusterClient
    from gpugeek_jupyter.jobs import run_cell
    from gpugeek_jupyter.pools.slurm import slurm_job_ids

    started = time.monotonic()
    job = ClusterClient().create_job(gpu_type="cpu", count=2, backend="slurm", name="ddp", walltime="00:20:00")
    pool = job.pool
    launch_s = time.monotonic() - started
    try:
        jobs = _jobs_of(slurm, "ddp")
        assert sorted(state for _, state in jobs) == ["RUNNING", "RUNNING"]
        assert sorted(slurm_job_ids(pool.registry, pool.id)) == sorted(job_id for job_id, _ in jobs)
        from gpugeek_jupyter.cost.ledger import pool_cost

        assert sorted(pool_cost(pool.registry, pool.id).slurm_job_ids) == sorted(job_id for job_id, _ in jobs)
        assert pool.scheduler_address.startswith("tls://")  # the pool's own certificates, as local pools
        folder = Path(pool.running.job_folder)
        assert oct((folder / "tls" / "key.pem").stat().st_mode & 0o777) == "0o600"

        started = time.monotonic()
        cell = run_cell(pool, DDP_CELL, {"os": os})
        cell_s = time.monotonic() - started
        assert cell.ok, cell.failure
        assert [value[:2] for value in cell.values] == [(True, 2), (True, 2)]

        script = tmp_path / "train.py"
        script.write_text(textwrap.dedent(SCRIPT))
        lines: list[str] = []
        started = time.monotonic()
        result = job.run(str(script), on_output=lambda rank, stream, text: lines.append(text))
        script_s = time.monotonic() - started
        assert result.ok, result.failure
        assert sorted(line.strip() for line in "".join(lines).splitlines() if "sum" in line) == [
            "rank 0 of 2 sum 3",
            "rank 1 of 2 sum 3",
        ]
        again = run_cell(pool, "import torch.distributed as dist\ndist.get_world_size()", {})  # after the restart
        assert again.ok and again.values == [2, 2], again.failure
    finally:
        started = time.monotonic()
        pool.stop()
        stop_s = time.monotonic() - started
    assert slurm.wait_for_no_jobs(30) == []
    assert not (folder / "tls").exists()  # the credentials' copy goes with the pool
    assert list((folder / "logs").iterdir())  # the workers' logs stay
    print(
        f"\nslurm pool: launch {launch_s:.1f} s, DDP cell {cell_s:.1f} s, script {script_s:.1f} s, stop {stop_s:.1f} s"
    )
    assert gpugeek_jupyter.list_pools()[-1].status.value == "stopped"


def test_gpu_workers_ask_slurm_for_one_gpu_each_and_own_the_one_it_assigns(slurm: OneHostSlurm) -> None:
    import os

    import gpugeek_jupyter
    from gpugeek_jupyter import config
    from slurm.one_host import FAKE_GPU_TYPE

    config.set_config(config.GpugeekConfig(slurm_gres={"T4": FAKE_GPU_TYPE}))  # the site's name for its GPUs
    pool = gpugeek_jupyter.launch(backend="slurm", gpu_type="T4", count=2, name="gpus")
    try:
        for job_id in pool.running.batch_jobs().values():
            shown = slurm.run("scontrol", "show", "job", job_id).stdout
            assert f"gres/gpu:{FAKE_GPU_TYPE}=1" in shown or f"gpu:{FAKE_GPU_TYPE}:1" in shown, shown
        visible = pool.client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
        assert sorted(visible.values()) == ["0", "1"]  # what Slurm assigned, one GPU each
    finally:
        pool.stop()


def test_the_dry_run_prints_the_job_script_without_submitting(
    slurm: OneHostSlurm, capsys: pytest.CaptureFixture[str]
) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from gpugeek_jupyter.magics.pools import PoolMagics

    shell = InteractiveShell.instance()
    shell.register_magics(PoolMagics)
    shell.run_line_magic(
        "gpugeek_launch",
        "--backend slurm --gpu-type A100-80GB --count 4 --name big --partition long --account proj42 --qos normal "
        '--walltime 04:00:00 --constraint a100 --sbatch-directives exclusive --prologue "module load cuda/12.4" '
        "--dry-run",
    )
    script = capsys.readouterr().out
    for line in (
        "#SBATCH -J gpugeek-big",
        "#SBATCH -p long",
        "#SBATCH -A proj42",
        "#SBATCH -t 04:00:00",
        "#SBATCH --qos=normal",
        "#SBATCH --constraint=a100",
        "#SBATCH --gres=gpu:a100_80gb:1",
        "#SBATCH --exclusive",
        "module load cuda/12.4",
    ):
        assert line in script.splitlines(), line
    assert "--name big-0 --nthreads 1" in script and "--tls-key " in script
    assert "PRIVATE KEY" not in script
    assert slurm.job_ids() == []
    import gpugeek_jupyter

    assert gpugeek_jupyter.list_pools() == []


def test_without_pool_tls_the_workers_speak_plain_tcp_and_get_no_credentials(
    slurm: OneHostSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpugeek_jupyter

    monkeypatch.setenv("GPUGEEK_POOL_TLS", "0")
    pool = gpugeek_jupyter.launch(backend="slurm", count=1, name="plain")
    try:
        assert pool.scheduler_address.startswith("tcp://")
        folder = Path(pool.running.job_folder)
        assert not (folder / "tls").exists()
        assert pool.client.run(lambda: 1) and len(pool.worker_addresses()) == 1
    finally:
        pool.stop()


def test_with_a_port_range_the_scheduler_workers_and_nannies_listen_inside_it(
    slurm: OneHostSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For a firewall that opens one range between the notebook's host and the compute nodes (the
    dashboard takes no port: it is served on a Unix socket of the owner's)."""
    import gpugeek_jupyter
    from gpugeek_jupyter.jobs import run_cell

    first, last = 41000, 41040
    monkeypatch.setenv("GPUGEEK_SLURM_PORTS", f"{first}:{last}")
    pool = gpugeek_jupyter.launch(backend="slurm", count=2, name="ranged")
    try:

        def port(address: str) -> int:
            return int(address.rsplit(":", 1)[1].split("/", 1)[0])

        workers = connected_workers(pool.client)
        listening = {
            "scheduler": port(pool.scheduler_address),
            **{f"worker {info['name']}": port(address) for address, info in workers.items()},
            **{f"nanny {info['name']}": port(info["nanny"]) for info in workers.values()},
        }
        assert len(listening) == 5 and all(first <= p <= last for p in listening.values()), listening
        assert len(set(listening.values())) == 5  # one port each
        assert pool.dashboard_link == "/gpugeek/pools/ranged/dashboard/status"
        import torch

        result = run_cell(pool, "t = torch.ones(1)\ndist.all_reduce(t)\nt.item()", {"torch": torch})
        assert result.ok and result.values == [2.0, 2.0], result.report()
    finally:
        pool.stop()


def test_a_slurm_pools_dashboard_is_on_its_socket_and_its_workers_serve_no_http(slurm: OneHostSlurm) -> None:
    import socket

    import gpugeek_jupyter
    from gpugeek_jupyter.pools.dashboard_socket import dashboard_socket_path

    pool = gpugeek_jupyter.launch(backend="slurm", count=1, name="served")
    try:
        assert pool.dashboard_link == "/gpugeek/pools/served/dashboard/status"
        assert pool.client.scheduler_info()["services"] == {}  # no dashboard port
        assert pool.client.run(lambda dask_worker: (type(dask_worker).__name__, dask_worker.service_ports)) == {
            address: ("PoolWorker", {}) for address in pool.worker_addresses()
        }
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(dashboard_socket_path(pool.registry, pool.id)))
            client.sendall(b"GET /json/identity.json HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            assert client.recv(12) == b"HTTP/1.1 200"
    finally:
        pool.stop()
