"""Read the ``nvidia-smi dmon`` fields of this worker's GPUs through NVML (``import pynvml``).

The one place that opens NVML on a worker: the cost's utilization rows come from these samples too
(:mod:`gpugeek_jupyter.cost.usage`). Which GPUs are this worker's is
:func:`gpugeek_jupyter.devices.select_visible`'s answer. Runs on a worker's sampler thread, never on
the thread that runs tasks. Nothing here raises:
NVML missing or failing becomes :attr:`NvmlReader.reason` ("NVML library not found ..."), a field
the device does not support becomes NaN, and any other failure becomes the row's ``error`` text.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..devices import VARIABLE, select_visible, visible_devices
from ..nvml import nvml_failure_reason

log = logging.getLogger(__name__)

NAN = math.nan
_ALL_LINKS = 0xFFFFFFFF  # NVML scope id: sum over every NVLink of the device

# "first" samples only the worker's own GPU (dask-cuda lists it first, see gpugeek_jupyter.devices),
# "visible" every GPU that CUDA_VISIBLE_DEVICES lists (all of them when unset)
GPU_SELECTIONS = ("visible", "first")


@dataclass
class _Device:
    index: int
    handle: Any
    name: str
    uuid: str
    unsupported: set[str] = field(default_factory=set)  # fields NVML said it cannot read here
    counters: dict[str, tuple[float, float]] = field(default_factory=dict)  # field -> (value, monotonic t)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReader:
    """This worker's GPUs, opened once on the sampler thread; ``read()`` gives one row part per GPU."""

    def __init__(self, selection: str = "visible", environ: Mapping[str, str] | None = None) -> None:
        """``environ``: where to read ``CUDA_VISIBLE_DEVICES`` (default: this process's environment, when opened)."""
        if selection not in GPU_SELECTIONS:
            raise ValueError(
                f"GPU selection must be one of {', '.join(GPU_SELECTIONS)}, got '{selection}' (e.g. 'visible')"
            )
        self.selection = selection
        self.environ = environ
        self.reason: str | None = "NVML not opened yet"
        self.devices: list[_Device] = []
        self._nvml: Any = None

    # -- opening ---------------------------------------------------------------------------------
    def open(self) -> None:
        try:
            import pynvml
        except ImportError:
            self.reason = "nvidia-ml-py is not installed on this worker (pip install nvidia-ml-py)"
            return
        try:
            pynvml.nvmlInit()
        except Exception as e:  # no driver is a normal state: it is data, not an error
            self.reason = nvml_failure_reason(e)
            log.info("telemetry: no GPU sampling on this worker: %s", self.reason)
            return
        self._nvml = pynvml
        try:
            self.devices = self._open_devices(pynvml)
        except Exception as e:
            self.reason = nvml_failure_reason(e)
            log.info("telemetry: could not list GPUs on this worker: %s", self.reason)
            return
        if self.devices:
            self.reason = None
        elif visible_devices(self.environ) is not None:
            value = (os.environ if self.environ is None else self.environ).get(VARIABLE, "")
            self.reason = f"no GPU visible to this worker ({VARIABLE}='{value}')"
        else:
            self.reason = "NVML found no devices"

    def _open_devices(self, nvml: Any) -> list[_Device]:
        all_devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            all_devices.append(
                _Device(index, handle, _text(nvml.nvmlDeviceGetName(handle)), _text(nvml.nvmlDeviceGetUUID(handle)))
            )
        return select_visible(all_devices, self.environ, own_only=self.selection == "first")

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception as e:
                log.debug("nvmlShutdown failed: %s", e)
            self._nvml = None

    # -- reading ---------------------------------------------------------------------------------
    def read(self, pids: set[int], now: float) -> list[tuple[Any, ...]]:
        """Per GPU: (gpu, name, uuid, sm %, mem %, used, total, W, C, MHz, PCIe rx/tx, NVLink rx/tx,
        process GPU memory, error); ``now`` is a monotonic time for counter rates."""
        return [self._read_device(device, pids, now) for device in self.devices]

    def _read_device(self, device: _Device, pids: set[int], now: float) -> tuple[Any, ...]:
        nvml = self._nvml
        errors: list[str] = []
        handle = device.handle

        def optional(key: str, function: Any, *args: Any) -> Any:
            if key in device.unsupported:
                return None
            try:
                return function(handle, *args)
            except Exception as e:
                if getattr(e, "value", None) in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                    device.unsupported.add(key)
                elif not errors:
                    errors.append(f"{key}: {nvml_failure_reason(e)}")
                return None

        utilization = optional("utilization", nvml.nvmlDeviceGetUtilizationRates)
        memory = optional("memory", nvml.nvmlDeviceGetMemoryInfo)
        power_mw = optional("power", nvml.nvmlDeviceGetPowerUsage)
        temperature = optional("temperature", nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU)
        sm_clock = optional("sm_clock", nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM)
        pcie_rx, pcie_tx, nvlink_rx, nvlink_tx = self._read_throughput(device, optional, now)
        processes = optional("processes", nvml.nvmlDeviceGetComputeRunningProcesses)
        process_memory = NAN
        if processes is not None:
            process_memory = float(sum(int(p.usedGpuMemory or 0) for p in processes if int(p.pid) in pids))
        return (
            device.index,
            device.name,
            device.uuid,
            _float(utilization.gpu if utilization is not None else None),
            _float(utilization.memory if utilization is not None else None),
            _float(memory.used if memory is not None else None),
            _float(memory.total if memory is not None else None),
            _float(power_mw / 1000.0 if power_mw is not None else None),
            _float(temperature),
            _float(sm_clock),
            pcie_rx,
            pcie_tx,
            nvlink_rx,
            nvlink_tx,
            process_memory,
            errors[0] if errors else None,
        )

    def _read_throughput(self, device: _Device, optional: Any, now: float) -> tuple[float, float, float, float]:
        """PCIe and NVLink MB/s from NVML's cumulative byte counters (one cheap call per device);
        PCIe falls back to nvmlDeviceGetPcieThroughput where the counters are not supported."""
        nvml = self._nvml
        wanted = (
            ("pcie_rx", (nvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0), 1.0),
            ("pcie_tx", (nvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0), 1.0),
            ("nvlink_rx", (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, _ALL_LINKS), 1024.0),  # KiB
            ("nvlink_tx", (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, _ALL_LINKS), 1024.0),
        )
        asked = [(key, field_id, scale) for key, field_id, scale in wanted if key not in device.unsupported]
        values = optional("field_values", nvml.nvmlDeviceGetFieldValues, [f for _, f, _ in asked]) if asked else None
        if "field_values" in device.unsupported:  # an old driver: no counters at all
            device.unsupported.update(key for key, _, _ in wanted)
        rates: dict[str, float] = {}
        for position, (key, _field_id, scale) in enumerate(asked):
            if values is None:
                break
            value = values[position]
            if value.nvmlReturn != nvml.NVML_SUCCESS:
                device.unsupported.add(key)
                continue
            counter = _field_value(nvml, value) * scale
            previous = device.counters.get(key)
            device.counters[key] = (counter, now)
            if previous is not None and now > previous[1] and counter >= previous[0]:
                rates[key] = (counter - previous[0]) / (now - previous[1]) / 1e6
        if "pcie_rx" in device.unsupported and "pcie_rx" not in rates:
            rx_kb = optional("pcie_throughput", nvml.nvmlDeviceGetPcieThroughput, nvml.NVML_PCIE_UTIL_RX_BYTES)
            tx_kb = optional("pcie_throughput", nvml.nvmlDeviceGetPcieThroughput, nvml.NVML_PCIE_UTIL_TX_BYTES)
            rates["pcie_rx"] = _float(rx_kb / 1000.0 if rx_kb is not None else None)
            rates["pcie_tx"] = _float(tx_kb / 1000.0 if tx_kb is not None else None)
        return (
            rates.get("pcie_rx", NAN),
            rates.get("pcie_tx", NAN),
            rates.get("nvlink_rx", NAN),
            rates.get("nvlink_tx", NAN),
        )


def _float(value: Any) -> float:
    return NAN if value is None else float(value)


def _field_value(nvml: Any, value: Any) -> float:
    kind = value.valueType
    union = value.value
    if kind == nvml.NVML_VALUE_TYPE_DOUBLE:
        return float(union.dVal)
    if kind == nvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return float(union.uiVal)
    if kind == nvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return float(union.ulVal)
    if kind == nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return float(union.sllVal)
    return float(union.ullVal)
