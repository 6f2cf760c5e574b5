"""What NVML says about this machine's GPUs; "no GPU" is an answer, not an error.

:func:`discover_gpus` is the one place that opens NVML in the launching process (the local backend:
which GPUs can a pool use; tests: is there a GPU). On workers only the telemetry reader opens it
(:mod:`gpugeek_jupyter.telemetry._nvml_reader`), sharing :func:`nvml_failure_reason`. Which of the
GPUs a process may use is :mod:`gpugeek_jupyter.devices`'s business.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuDevice:
    """One GPU as NVML lists it (``index`` in NVML's PCI bus order)."""

    index: int
    name: str
    uuid: str
    memory_total_bytes: int


@dataclass(frozen=True)
class GpuDiscovery:
    """The GPUs found, or why there are none."""

    devices: tuple[GpuDevice, ...]
    reason: str | None  # why there are no devices, when there are none

    def describe(self) -> str:
        """E.g. '2 x NVIDIA H100 80GB HBM3', or 'no NVIDIA GPU (NVML library not found ...)'."""
        if not self.devices:
            return f"no NVIDIA GPU ({self.reason})"
        names: dict[str, int] = {}
        for d in self.devices:
            names[d.name] = names.get(d.name, 0) + 1
        return ", ".join(f"{n} x {name}" for name, n in names.items())


def nvml_failure_reason(error: BaseException) -> str:
    """A short, human reason for an NVML failure (e.g. 'NVML library not found')."""
    text = str(error) or type(error).__name__
    if "Library Not Found" in text or "LibraryNotFound" in type(error).__name__:
        return "NVML library not found (no NVIDIA driver on this machine)"
    if "Driver Not Loaded" in text:
        return "NVIDIA driver not loaded"
    return f"NVML failed: {text}"


def discover_gpus() -> GpuDiscovery:
    """List the GPUs NVML can see; never raises."""
    try:
        import pynvml
    except ImportError:
        return GpuDiscovery((), "nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except Exception as e:  # every NVML failure means "no usable GPU", which is a normal state
        return GpuDiscovery((), nvml_failure_reason(e))
    try:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            devices.append(
                GpuDevice(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                    memory_total_bytes=int(memory.total),
                )
            )
        return GpuDiscovery(tuple(devices), None if devices else "NVML found no devices")
    except Exception as e:
        return GpuDiscovery((), nvml_failure_reason(e))
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception as e:
            log.debug("nvmlShutdown failed: %s", e)


@dataclass(frozen=True)
class GpuLinks:
    """How one GPU is wired to the others of its machine over NVLink, as NVML reports it."""

    bus_id: str  # its PCI bus id, e.g. '00000000:18:00.0'
    peers: frozenset[str]  # the bus ids of the GPUs its active NVLinks reach directly
    switch: bool  # its NVLinks reach an NVSwitch: every GPU on the switch is one hop away


def _bus_id(pci: object) -> str:
    value = getattr(pci, "busId", b"")
    return (value.decode() if isinstance(value, bytes) else str(value)).upper()


def gpu_links(entry: str) -> GpuLinks | None:
    """The NVLink wiring of the GPU that ``entry`` names (an index in NVML's order, or a UUID, as
    in ``CUDA_VISIBLE_DEVICES``); None without NVML, such a GPU, or NVLink. Never raises."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        if entry.isdigit():
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(entry))
        else:
            handle = pynvml.nvmlDeviceGetHandleByUUID(entry)
        bus_id = _bus_id(pynvml.nvmlDeviceGetPciInfo(handle))
        peers: set[str] = set()
        switch = False
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                    continue
                kind = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
            except Exception:  # past the GPU's last link, or NVLink unsupported: NVML_ERROR_NOT_SUPPORTED
                continue
            if kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                switch = True
            elif kind == pynvml.NVML_NVLINK_DEVICE_TYPE_GPU:
                peers.add(_bus_id(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)))
        peers.discard(bus_id)
        return GpuLinks(bus_id=bus_id, peers=frozenset(peers), switch=switch)
    except Exception as e:
        log.debug("NVLink of GPU %s: %s", entry, nvml_failure_reason(e))
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception as e:
            log.debug("nvmlShutdown failed: %s", e)
