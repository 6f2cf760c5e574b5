"""``FakeNvml``: a test-only stand-in for the ``pynvml`` module (nvidia-ml-py), for machines without GPUs.

It replaces the *library*, not our code: installed as ``sys.modules["pynvml"]`` inside pool workers
(see :func:`install_in_worker`), it lets the real sampler (``gpugeek_jupyter.telemetry``) run over
it unchanged. Constants and exception classes are the real nvidia-ml-py ones. The real library is
exercised by the ``gpu``-marked tests on a machine with an NVIDIA GPU.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from typing import Any

import pynvml as _real_nvml

GIB = 2**30


class FakeNvml(types.ModuleType):
    """Pretends to be NVML on a machine with ``gpus`` GPUs.

    ``library_missing``: nvmlInit raises NVMLError_LibraryNotFound, as on a machine without a driver.
    ``fail_after``: after that many utilization reads, every read of the utilization rates raises
    ``fail_error`` (an NVML error code, GPU is lost by default): a device failing mid-run.
    ``nvlink``: whether the NVLink throughput counters are supported.
    """

    def __init__(
        self,
        gpus: int = 2,
        library_missing: bool = False,
        fail_after: int | None = None,
        fail_error: int = _real_nvml.NVML_ERROR_GPU_IS_LOST,
        nvlink: bool = True,
        name: str = "NVIDIA H100 80GB HBM3",
        memory_total: int = 80 * GIB,
    ) -> None:
        super().__init__("pynvml", "FakeNvml: a test stand-in for nvidia-ml-py")
        for attribute in dir(_real_nvml):  # the real constants and exception classes
            if attribute.startswith(("NVML_", "NVMLError")):
                setattr(self, attribute, getattr(_real_nvml, attribute))
        self.gpus = gpus
        self.library_missing = library_missing
        self.fail_after = fail_after
        self.fail_error = fail_error
        self.nvlink = nvlink
        self.device_name = name
        self.memory_total = memory_total
        self.initialized = 0
        self.utilization_reads = 0
        self._counters = [0] * gpus
        self._lock = threading.Lock()

    # -- life cycle ------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.library_missing:
            raise _real_nvml.NVMLError(_real_nvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self.initialized = max(0, self.initialized - 1)

    def _check(self) -> None:
        if not self.initialized:
            raise _real_nvml.NVMLError(_real_nvml.NVML_ERROR_UNINITIALIZED)

    # -- devices ---------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check()
        if not 0 <= index < self.gpus:
            raise _real_nvml.NVMLError(_real_nvml.NVML_ERROR_INVALID_ARGUMENT)
        return index  # a handle is opaque to callers

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.device_name

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-fa4e0000-0000-0000-0000-{handle:012d}"

    # -- readings: deterministic functions of the device and the read count ------------------
    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        with self._lock:
            self.utilization_reads += 1
            reads = self.utilization_reads
        if self.fail_after is not None and reads > self.fail_after:
            raise _real_nvml.NVMLError(self.fail_error)
        return types.SimpleNamespace(gpu=(30 + 10 * handle + reads) % 101, memory=(5 * handle + reads) % 101)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        used = (handle + 1) * GIB
        return types.SimpleNamespace(total=self.memory_total, used=used, free=self.memory_total - used)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 150_000 + 1000 * handle  # mW

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 40 + handle

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        return 1980 if clock == _real_nvml.NVML_CLOCK_SM else 1000

    def nvmlDeviceGetFieldValues(self, handle: int, field_ids: list[Any]) -> list[Any]:
        nvlink_fields = (
            _real_nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
            _real_nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
        )
        with self._lock:
            self._counters[handle] += 1_000_000
            counter = self._counters[handle]
        values = []
        for field in field_ids:
            field_id = field[0] if isinstance(field, tuple) else field
            supported = self.nvlink or field_id not in nvlink_fields
            values.append(
                types.SimpleNamespace(
                    fieldId=field_id,
                    nvmlReturn=_real_nvml.NVML_SUCCESS if supported else _real_nvml.NVML_ERROR_NOT_SUPPORTED,
                    valueType=_real_nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                    value=types.SimpleNamespace(ullVal=counter if supported else 0),
                )
            )
        return values

    def nvmlDeviceGetPcieThroughput(self, handle: int, counter: int) -> int:
        return 1000  # KB/s

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        # the process that holds this fake (the worker) uses 512 MiB on every GPU
        return [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=512 * 2**20)]


def install_in_worker(**options: Any) -> str:
    """Run on workers with ``client.run``: make ``import pynvml`` give a FakeNvml there."""
    sys.modules["pynvml"] = FakeNvml(**options)
    return "installed"


def remove_from_worker() -> str:
    """Run on workers with ``client.run``: give ``import pynvml`` the real library back."""
    sys.modules["pynvml"] = _real_nvml
    return "removed"
