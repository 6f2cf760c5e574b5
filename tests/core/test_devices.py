"""``CUDA_VISIBLE_DEVICES``, read as CUDA reads it, and written for ranks: pure functions."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpugeek_jupyter import devices
from gpugeek_jupyter.devices import (
    cuda_visible_devices,
    format_visible_devices,
    is_uuid,
    own_gpu,
    select_visible,
    visible_devices,
)
from gpugeek_jupyter.nvml import GpuDevice

GPUS = tuple(
    GpuDevice(i, "NVIDIA H100 80GB HBM3", f"GPU-fa4e000{i}-0000-0000-0000-00000000000{i}", 80 << 30) for i in range(4)
)


def _env(value: str | None) -> dict[str, str]:
    return {} if value is None else {"CUDA_VISIBLE_DEVICES": value}


@pytest.mark.parametrize(
    ("value", "entries"),
    [
        (None, None),  # unset: every GPU
        ("", []),  # empty: none
        ("2,0", ["2", "0"]),
        (" 2 , 0 ,", ["2", "0"]),  # spaces and a trailing comma are harmless
        ("GPU-fa4e0003,MIG-1b2c", ["GPU-fa4e0003", "MIG-1b2c"]),
        ("-1", []),  # the usual way to hide every GPU
        ("0,-1,1", ["0"]),  # CUDA stops at the first entry that is neither an index nor a UUID
        ("0,none,1", ["0"]),
    ],
)
def test_visible_devices_reads_the_variable_as_cuda_does(value: str | None, entries: list[str] | None) -> None:
    assert visible_devices(_env(value)) == entries


def test_the_own_gpu_is_the_first_listed_and_none_without_a_list() -> None:
    assert own_gpu(_env("3,0,1,2")) == "3"  # dask-cuda rotates each worker's list so that its GPU comes first
    assert own_gpu(_env("GPU-fa4e0001")) == "GPU-fa4e0001"
    assert own_gpu(_env(None)) is None  # a cpu pool's worker on a GPU machine owns none
    assert own_gpu(_env("")) is None and own_gpu(_env("-1")) is None


def test_uuids_and_mig_instances_are_told_from_indices() -> None:
    assert is_uuid("GPU-fa4e0001") and is_uuid("MIG-1b2c") and not is_uuid("3")


def test_selection_keeps_the_variables_order_and_matches_uuid_prefixes() -> None:
    assert select_visible(GPUS, _env(None)) == list(GPUS)
    assert [d.index for d in select_visible(GPUS, _env("2,0"))] == [2, 0]
    assert [d.index for d in select_visible(GPUS, _env("GPU-fa4e0003"))] == [3]
    assert select_visible(GPUS, _env("")) == []


def test_selection_of_the_own_gpu_only_takes_the_first() -> None:
    assert [d.index for d in select_visible(GPUS, _env("2,3,0"), own_only=True)] == [2]
    assert [d.index for d in select_visible(GPUS, _env(None), own_only=True)] == [0]


def test_an_entry_that_names_no_gpu_hides_the_ones_after_it_and_repeats_add_nothing() -> None:
    assert [d.index for d in select_visible(GPUS, _env("1,7,2"))] == [1]
    assert [d.index for d in select_visible(GPUS, _env("1,1,2"))] == [1, 2]


def test_selection_reads_this_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert [d.index for d in select_visible(GPUS)] == [3]


def test_the_initial_environment_is_kept_when_a_job_changes_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "_initial", None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,0,1,2")
    assert own_gpu(devices.initial_environ()) == "3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # what a job sets for the host's ranks
    assert own_gpu(devices.initial_environ()) == "3"
    monkeypatch.setattr(devices, "_initial", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert devices.initial_environ() == {}


def test_ranks_of_a_host_see_the_owned_gpus_in_local_rank_order() -> None:
    own = ["4", "5", "6"]
    visible = cuda_visible_devices(own)
    assert visible == "4,5,6"
    assert [visible.split(",")[local_rank] for local_rank in range(3)] == own  # cuda:LOCAL_RANK is the rank's own
    assert cuda_visible_devices(["GPU-a", "GPU-b"]) == "GPU-a,GPU-b"
    assert cuda_visible_devices([None, None]) is None and cuda_visible_devices(["4", None]) is None
    assert cuda_visible_devices([]) is None
    assert format_visible_devices([2, "0"]) == "2,0"


def test_importing_devices_imports_nothing_heavy() -> None:
    code = (
        "import sys; import gpugeek_jupyter.devices; "
        "print([m for m in ('pynvml', 'torch', 'dask', 'distributed', 'numpy', 'psutil') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
