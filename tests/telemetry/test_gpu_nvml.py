"""The real NVML path (nvidia-ml-py over the NVIDIA driver): runs only on a machine with a GPU.

Set GPUGEEK_TELEMETRY_RECORD=/path/readings.json to keep what was read; run with ``-s`` to see it.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

import pytest

from gpugeek_jupyter.nvml import discover_gpus
from gpugeek_jupyter.telemetry._schema import SAMPLE_FIELDS
from gpugeek_jupyter.telemetry._worker import Sampler

pytestmark = pytest.mark.gpu


def _record(name: str, readings: Any) -> None:
    print(f"\n{name}: {json.dumps(readings, indent=1, default=str)}")
    path = os.environ.get("GPUGEEK_TELEMETRY_RECORD")
    if path:
        existing = json.loads(open(path).read()) if os.path.exists(path) else {}
        existing[name] = readings
        with open(path, "w") as f:
            json.dump(existing, f, indent=1, default=str)


def test_real_nvml_reads_every_dmon_field_of_every_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    found = discover_gpus()
    sampler = Sampler()
    sampler.open()
    sampler.sample()
    time.sleep(0.5)  # counters (PCIe, NVLink) become rates from the second sample
    started = time.perf_counter()
    rows = [dict(zip(SAMPLE_FIELDS, row, strict=True)) for row in sampler.sample()]
    seconds = time.perf_counter() - started
    sampler.close()
    _record("real_nvml_sample", {"seconds_per_sample": seconds, "rows": rows})

    assert sampler.reason is None
    assert [r["gpu"] for r in rows] == [d.index for d in found.devices]
    for row, device in zip(rows, found.devices):
        assert row["gpu_name"] == device.name and row["gpu_uuid"] == device.uuid
        assert row["mem_total_bytes"] == device.memory_total_bytes
        assert 0 <= row["sm_util_pct"] <= 100 and 0 <= row["mem_util_pct"] <= 100
        assert 0 < row["mem_used_bytes"] <= row["mem_total_bytes"]
        assert 0 < row["power_w"] < 2000 and 0 < row["temperature_c"] < 120 and row["sm_clock_mhz"] > 0
        assert not math.isnan(row["pcie_rx_mb_s"]) and row["pcie_rx_mb_s"] >= 0
        assert row["error"] is None, row["error"]


def test_a_gpu_pool_reports_its_gpus_and_the_worker_process_gpu_memory() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here; the process GPU memory check needs it")
    import gpugeek_jupyter
    from gpugeek_jupyter import telemetry

    pool = gpugeek_jupyter.launch(gpu_type="cpu", count=1, name="gpu-telemetry")  # its worker sees every GPU
    try:

        def hold_gpu_memory(dask_worker: Any) -> int:
            import torch

            dask_worker._gpugeek_test_tensor = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda:0")
            return os.getpid()

        pool.client.run(hold_gpu_memory)
        start = time.time()
        deadline = time.monotonic() + 30
        frame = pool.metrics()
        while time.monotonic() < deadline:
            frame = pool.metrics()
            recent = frame[frame["time"].map(lambda t: t.timestamp()) > start + 1.0]
            if len(recent) and (recent["gpu"] == 0).any():
                break
            time.sleep(0.5)
        gpu0 = recent[recent["gpu"] == 0]
        _record("pool_gpu0_rows", gpu0.tail(3).to_dict(orient="records"))
        _record("job_summary", telemetry.job_summary(pool, start))
        assert gpu0["no_gpu_reason"].isna().all() and gpu0["error"].isna().all()
        assert (gpu0["process_gpu_mem_bytes"] >= 256 * 2**20).all(), (
            "NVML did not list the worker's pid as a GPU process (a container pid namespace?)"
        )
    finally:
        pool.stop()
