"""The NCCL path on a machine with NVIDIA GPUs (skipped without one)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture
def gpu_pool() -> Iterator[Any]:
    import gpugeek_jupyter
    from gpugeek_jupyter.catalog import load_catalog
    from gpugeek_jupyter.nvml import discover_gpus

    found = discover_gpus().devices
    catalog = load_catalog()
    gpu_type = next(g.name for g in catalog.gpus.values() if not g.is_cpu and g.matches_nvml_name(found[0].name))
    count = sum(1 for d in found if catalog.gpu(gpu_type).matches_nvml_name(d.name))
    pool = gpugeek_jupyter.launch(gpu_type=gpu_type, count=count, name="gpu-jobs")
    yield pool
    pool.stop()


def test_cell_runs_on_the_rank_gpu_with_nccl(gpu_pool: Any) -> None:
    import torch

    from gpugeek_jupyter.jobs import run_cell

    cell = (
        "import os\n"
        "t = torch.ones(1, device=device)\n"
        "dist.all_reduce(t)\n"
        "(str(device), int(os.environ['LOCAL_RANK']), torch.cuda.current_device(), dist.get_backend(), t.item())"
    )
    result = run_cell(gpu_pool, cell, {"torch": torch})
    assert result.ok, result.report()
    world = len(result.values)
    for device, local_rank, current, backend, total in result.values:
        assert device == f"cuda:{local_rank}" and current == local_rank
        assert "nccl" in backend and total == float(world)


def test_ddp_on_gpus_keeps_ranks_identical(gpu_pool: Any) -> None:
    import torch

    from gpugeek_jupyter.jobs import run_cell

    cell = (
        "torch.manual_seed(0)\n"
        "model = gg.ddp(torch.nn.Linear(16, 4))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "x = torch.randn(8, 16, device=device) + rank\n"
        "model(x).square().mean().backward()\n"
        "opt.step()\n"
        "model.module.weight.detach()"
    )
    result = run_cell(gpu_pool, cell, {"torch": torch}, amp="bf16")
    assert result.ok, result.report()
    assert all(v.device.type == "cpu" for v in result.values)
    assert all(torch.equal(result.values[0], v) for v in result.values)


def test_each_gpu_worker_reports_its_nvlink_wiring_with_nvmls_bus_id(gpu_pool: Any) -> None:
    """The real NVML path of the NVLink-aware layout: every GPU worker answers its own GPU's bus id
    (the one NVML lists for that device) and the bus ids its NVLinks reach, none of them itself."""
    import pynvml

    from gpugeek_jupyter.jobs.rank import gpu_links

    answers = gpu_pool.client.run(gpu_links)
    pynvml.nvmlInit()
    try:
        bus_ids = {
            pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).busId
            for i in range(pynvml.nvmlDeviceGetCount())
        }
    finally:
        pynvml.nvmlShutdown()
    bus_ids = {(b.decode() if isinstance(b, bytes) else str(b)).upper() for b in bus_ids}
    assert len(answers) == gpu_pool.spec.count
    seen = set()
    for links in answers.values():
        assert links is not None and links.bus_id in bus_ids, (links, bus_ids)
        assert links.bus_id not in links.peers and links.peers <= bus_ids
        seen.add(links.bus_id)
    assert len(seen) == len(answers)  # each worker its own GPU
