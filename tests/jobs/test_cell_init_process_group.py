"""A cell that calls ``dist.init_process_group`` itself, as code pasted from a torchrun script does, on
a real 2-worker pool (gloo on CPU): it gets the cell's group, kept warm or built again."""

from __future__ import annotations

from typing import Any

import pytest

from gpugeek_jupyter.jobs import run_cell
from gpugeek_jupyter.jobs.rank_group_init import _backends

TORCHRUN_SCRIPT = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
dist.destroy_process_group()
total.item()
"""


def _ok(result: Any) -> list[Any]:
    assert result.ok, result.report()
    return list(result.values)


def test_a_pasted_torchrun_script_runs_as_a_cell_again_and_again(pool: Any) -> None:
    assert _ok(run_cell(pool, "kept = rank\nwarm = id(dist.group.WORLD)", {})) == [None, None]
    for _ in range(3):  # it destroys the group at its end: the next cell's call builds it again
        assert _ok(run_cell(pool, TORCHRUN_SCRIPT, {}, timeout=60)) == [3.0, 3.0]
    assert _ok(run_cell(pool, "dist.barrier()\n(kept, dist.get_world_size())", {}, timeout=60)) == [(0, 2), (1, 2)]


def test_the_call_keeps_the_warm_group_when_it_asks_for_its_backend(pool: Any) -> None:
    _ok(run_cell(pool, "warm = id(dist.group.WORLD)", {}))
    calls = [
        'dist.init_process_group("gloo")',
        "dist.init_process_group()",
        'dist.init_process_group(backend="gloo", init_method="env://", rank=rank, world_size=2)',
        'dist.init_process_group("gloo", "env://", datetime.timedelta(minutes=5))',
        'from torch.distributed import init_process_group\ninit_process_group(backend="gloo")',
    ]
    for call in calls:
        cell = f"import datetime\n{call}\ndist.barrier()\nid(dist.group.WORLD) == warm"
        assert _ok(run_cell(pool, cell, {}, timeout=60)) == [True, True], call


def test_a_cell_that_destroys_and_builds_its_group_keeps_the_one_it_built(pool: Any) -> None:
    cell = (
        "dist.destroy_process_group()\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.ones(1)\n"
        "dist.all_reduce(t)\n"
        "mine = id(dist.group.WORLD)\n"
        "t.item()"
    )
    assert _ok(run_cell(pool, "import torch\n" + cell, {}, timeout=60)) == [2.0, 2.0]
    assert _ok(run_cell(pool, "dist.barrier()\nid(dist.group.WORLD) == mine", {}, timeout=60)) == [True, True]


def test_a_group_a_cell_destroys_is_held_until_the_next_cell_starts(pool: Any) -> None:
    """A gloo group freed right after its last collective can freeze its worker (its destructor holds
    the GIL while it waits for its own thread, which needs the GIL): the cell's is freed later."""
    held = "from gpugeek_jupyter.jobs import rank_group_init\nlen(rank_group_init._destroyed)"
    assert _ok(run_cell(pool, "dist.barrier()\ndist.destroy_process_group()\n" + held, {}, timeout=60)) == [1, 1]
    assert _ok(run_cell(pool, "dist.barrier()\n" + held, {}, timeout=60)) == [0, 0]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            'dist.init_process_group("nccl")',
            "init_process_group('nccl') in a cell: this pool's process group is already up on 'gloo' (a cell "
            "starts with it); leave the call out, or make a second group over the same ranks, e.g. "
            "dist.new_group(backend='nccl')",
        ),
        (
            'dist.init_process_group("gloo", rank=5, world_size=2)',
            "init_process_group(rank=5) in a cell: this rank is rank 0 of 2 (the pool's ranks, torchrun's RANK "
            "and WORLD_SIZE); leave rank out, or pass rank=0",
        ),
        (
            'dist.init_process_group("gloo", world_size=8)',
            "init_process_group(world_size=8) in a cell: this rank is rank 0 of 2",
        ),
    ],
)
def test_a_call_that_asks_for_another_group_fails_naming_what_it_asked(pool: Any, call: str, message: str) -> None:
    result = run_cell(pool, call, {}, timeout=60)
    assert not result.ok
    assert message in (result.failure or ""), result.failure
    assert _ok(run_cell(pool, "dist.barrier()\nrank", {}, timeout=60)) == [0, 1]  # the warm group is still there


def test_the_same_call_from_a_script_is_torchs_own(pool: Any, tmp_path: Any) -> None:
    from gpugeek_jupyter.jobs import run_script

    script = tmp_path / "train.py"
    script.write_text(TORCHRUN_SCRIPT.replace("total.item()", "print('total', total.item())"))
    result = run_script(pool, str(script), timeout=60)
    assert result.ok, result.report()
    assert "total 3.0" in result.output[0]
    assert _ok(run_cell(pool, TORCHRUN_SCRIPT, {}, timeout=60)) == [3.0, 3.0]


def test_backend_names_are_read_as_torch_writes_them() -> None:
    assert _backends("gloo") == {"gloo"}
    assert _backends("cpu:gloo,cuda:nccl") == {"gloo", "nccl"}
    assert _backends(" NCCL ") == {"nccl"}
