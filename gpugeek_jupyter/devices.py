"""Which GPUs a process may use: ``CUDA_VISIBLE_DEVICES``, read and written in this one module.

Imports nothing heavy (no NVML, no torch, no dask), so the telemetry reader on a worker, the job
modules and the local backend all share it. The variable, as CUDA reads it:

- unset: every GPU is visible;
- set but empty: none is;
- a comma-separated list of indices (``2,0``) or UUIDs (``GPU-8f2c...``, ``MIG-...``; a unique
  prefix is enough), in the order the process will number them. CUDA stops at the first entry
  that is neither, so ``-1`` (a common way to hide every GPU) or ``0,-1,1`` hides what follows.
  Empty entries (a trailing comma) are skipped.

Indices are matched to NVML's numbering (PCI bus order), which CUDA follows under
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and, on a machine with one GPU model, by default.

dask-cuda gives each worker of a ``LocalCUDACluster`` the list rotated so that the worker's own GPU
comes first: that is :func:`own_gpu`. Ranks of one host get the host's owned GPUs in local-rank order
(:func:`cuda_visible_devices`), so that ``cuda:LOCAL_RANK`` is each rank's own GPU.

>>> visible_devices({"CUDA_VISIBLE_DEVICES": "2, 0"})
['2', '0']
>>> visible_devices({}) is None, visible_devices({"CUDA_VISIBLE_DEVICES": "-1"})
(True, [])
>>> own_gpu({"CUDA_VISIBLE_DEVICES": "3,0,1,2"})
'3'
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

VARIABLE = "CUDA_VISIBLE_DEVICES"
_UUID_PREFIXES = ("GPU-", "MIG-")


class Device(Protocol):
    """What selection needs of a GPU (e.g. :class:`gpugeek_jupyter.nvml.GpuDevice`)."""

    @property
    def index(self) -> int: ...

    @property
    def uuid(self) -> str: ...


D = TypeVar("D", bound=Device)


_initial: dict[str, str] | None = None


def initial_environ() -> Mapping[str, str]:
    """``CUDA_VISIBLE_DEVICES`` as this process had it when first asked, as a small environment
    (empty when unset); later calls return the same.

    For pool workers: a job puts its ranks' value into ``os.environ`` (the host's owned GPUs in
    local-rank order), which no longer says which GPU the worker owns. The telemetry sampler and the
    job runtime ask before the first job runs.
    """
    global _initial
    if _initial is None:
        value = os.environ.get(VARIABLE)
        _initial = {} if value is None else {VARIABLE: value}
    return _initial


def is_uuid(entry: str) -> bool:
    """Whether a ``CUDA_VISIBLE_DEVICES`` entry names a GPU (or MIG instance) by UUID, not by index."""
    return entry.startswith(_UUID_PREFIXES)


def _is_valid(entry: str) -> bool:
    return entry.isdigit() or is_uuid(entry)


def visible_devices(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES`` that CUDA honours; None when unset (every GPU).

    ``environ`` defaults to this process's environment.
    """
    value = (os.environ if environ is None else environ).get(VARIABLE)
    if value is None:
        return None
    entries: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        if not _is_valid(entry):
            break  # as CUDA does: this entry and every one after it hide their GPUs
        entries.append(entry)
    return entries


def own_gpu(environ: Mapping[str, str] | None = None) -> str | None:
    """The GPU a dask-cuda worker owns: the first visible entry. None when unset or empty.

    Unset means "no GPU of its own" even where the process sees GPUs (a ``cpu`` pool's worker on a
    GPU machine): only an explicit list hands a GPU to a worker.
    """
    entries = visible_devices(environ)
    return entries[0] if entries else None


def matches(entry: str, device: Device) -> bool:
    """Whether the ``CUDA_VISIBLE_DEVICES`` entry ``entry`` names ``device``."""
    if entry.isdigit():
        return int(entry) == device.index
    return device.uuid.startswith(entry)


def select_visible(devices: Sequence[D], environ: Mapping[str, str] | None = None, own_only: bool = False) -> list[D]:
    """Those of ``devices`` (every GPU NVML lists) that ``CUDA_VISIBLE_DEVICES`` lets this process
    use, in the variable's order; with ``own_only``, only the first (the worker's own, under dask-cuda).

    As CUDA does, an entry that names no device hides every entry after it.
    """
    entries = visible_devices(environ)
    if entries is None:
        chosen = list(devices)
    else:
        chosen = []
        for entry in entries:
            device = next((d for d in devices if matches(entry, d)), None)
            if device is None:
                break
            if all(d is not device for d in chosen):  # a repeated entry adds nothing
                chosen.append(device)
    return chosen[:1] if own_only else chosen


def format_visible_devices(entries: Iterable[str | int]) -> str:
    """A ``CUDA_VISIBLE_DEVICES`` value listing ``entries`` (indices or UUIDs) in order.

    >>> format_visible_devices([2, "0"])
    '2,0'
    """
    return ",".join(str(entry) for entry in entries)


def cuda_visible_devices(own_gpus_by_local_rank: Sequence[str | None]) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` for every rank of one host, so that ``cuda:LOCAL_RANK`` is the rank's GPU.

    Each GPU worker owns one GPU (:func:`own_gpu`). torchrun ranks see all of the host's GPUs and
    pick ``cuda:LOCAL_RANK``; listing the owned GPUs in local-rank order gives the same contract.
    None when the host has a worker without a GPU of its own (the ranks then run on CPU).

    >>> cuda_visible_devices(["2", "3", "0"])
    '2,3,0'
    """
    if not own_gpus_by_local_rank or any(g is None for g in own_gpus_by_local_rank):
        return None
    return format_visible_devices(g for g in own_gpus_by_local_rank if g is not None)
