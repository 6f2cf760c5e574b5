"""Sharded checkpoints (``gg.checkpoint(..., sharded=True)``, torch.distributed.checkpoint) that reshard.

On real pools: saved on 4 ranks (FSDP x TP, 2 x 2), loaded on 2 (FSDP), with bit-identical
parameters and optimizer state, and the step and the loader's position resumed; saved on 4 x 1,
loaded on 2 x 2 (the same job size, another mesh). On one process: the directory's rules.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from gpugeek_jupyter.jobs import run_cell
from gpugeek_jupyter.jobs.helpers import Helpers
from support.pools import attached_pool, owned_local_pool

MODEL = '''
import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up_proj, self.down_proj = torch.nn.Linear(8, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.down_proj(torch.relu(self.up_proj(x)))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([MLP(), MLP()])
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def full_state(model, optimizer):
    """Every parameter and optimizer tensor, whole (gathered from every rank's shards), on rank 0's CPU."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(model, [optimizer], options=StateDictOptions(full_state_dict=True, cpu_offload=True))
'''

TRAIN = """
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
loader = gg.shard(data, batch_size=2, mesh=mesh)
ckpt = gg.checkpoint(directory, model=model, optimizer=opt, sharded=True, loader=loader, asynchronous=asynchronous)
resumed_at, batches = ckpt.step, iter(loader)
for step in range(ckpt.step, ckpt.step + 3):
    x, y = next(batches)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    ckpt.save(step + 1)
ckpt.wait()
(resumed_at, ckpt.step, loader.state_dict(), full_state(model, opt))
"""

RESUME = """
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
loader = gg.shard(data, batch_size=2, mesh=mesh)
ckpt = gg.checkpoint(directory, model=model, optimizer=opt, sharded=True, loader=loader)
(ckpt.step, loader.state_dict(), full_state(model, opt))
"""


def notebook(directory: Path, asynchronous: bool = False) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(MODEL, namespace)
    generator = torch.Generator().manual_seed(2)
    namespace.update(
        data=(torch.randn(64, 8, generator=generator), torch.randn(64, 1, generator=generator)),
        directory=str(directory),
        asynchronous=asynchronous,
    )
    return namespace


def assert_identical(saved: Any, loaded: Any) -> None:
    """Same keys, same tensors bit for bit (nested dicts and lists of the state dicts)."""
    if isinstance(saved, torch.Tensor):
        assert isinstance(loaded, torch.Tensor) and torch.equal(saved, loaded)
    elif isinstance(saved, dict):
        assert saved.keys() == loaded.keys()
        for key in saved:
            assert_identical(saved[key], loaded[key])
    elif isinstance(saved, list | tuple):
        assert len(saved) == len(loaded)
        for a, b in zip(saved, loaded):
            assert_identical(a, b)
    else:
        assert saved == loaded


@pytest.fixture(scope="module")
def four_rank_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real 4-worker local cpu pool for the module, owned by its own manager."""
    with owned_local_pool(tmp_path_factory, "checkpoint-4", count=4) as owned:
        yield owned


@pytest.fixture
def pool4(four_rank_cluster: Any) -> Iterator[Any]:
    """The 4-worker pool attached by address, as a user would (with its TLS settings while attaching)."""
    with attached_pool(four_rank_cluster, "checkpoint") as attached:
        yield attached


FSDP_BY_TP = (
    "torch.manual_seed(0)\n"
    "mesh = gg.mesh(dp=2, tp=2)\n"
    "model = gg.fsdp(gg.tensor_parallel(Net(), gg.mlp_plan(prefix='blocks.*'), mesh=mesh), mesh=mesh['dp'])\n"
)
FSDP_ONLY = "torch.manual_seed(1)\nmesh = gg.mesh(dp=world_size)\nmodel = gg.fsdp(Net())\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("asynchronous", "as_url"), [(False, False), (True, False), (False, True)], ids=["save", "async_save", "fsspec_url"]
)
def test_a_checkpoint_saved_on_4_ranks_loads_on_2_with_bit_identical_parameters(
    pool4: Any, pool: Any, tmp_path: Path, asynchronous: bool, as_url: bool
) -> None:
    # as_url: the location as an fsspec URL (file://, fsspec's local filesystem), the path an object
    # store takes: DCP writes through its fsspec storage, each step in place, whole with its .metadata
    namespace = notebook(tmp_path, asynchronous=asynchronous)
    if as_url:
        namespace["directory"] = tmp_path.as_uri()
    saved = run_cell(pool4, FSDP_BY_TP + TRAIN, namespace, rank0=True)
    assert saved.ok, saved.report()
    resumed_at, step, position, (model_state, optim_state) = saved.values[0]
    assert (resumed_at, step, position) == (0, 3, {"epoch": 0, "position": 12})  # 3 steps x 2 rows x 2 dp replicas
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000001", "step-000000002", "step-000000003"]
    shards = sorted(p.name for p in (tmp_path / "step-000000003").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp"]  # each rank its own

    loaded = run_cell(pool, FSDP_ONLY + RESUME, namespace, rank0=True)  # another seed: all must come from the files
    assert loaded.ok, loaded.report()
    loaded_step, loaded_position, (loaded_model, loaded_optim) = loaded.values[0]
    assert (loaded_step, loaded_position) == (3, {"epoch": 0, "position": 12})
    assert_identical(model_state, loaded_model)
    assert_identical(optim_state, loaded_optim)


@pytest.mark.slow
def test_a_checkpoint_of_4_x_1_loads_on_a_2_x_2_mesh_and_training_continues_from_its_position(
    pool4: Any, tmp_path: Path
) -> None:
    namespace = notebook(tmp_path)
    saved = run_cell(pool4, FSDP_ONLY + TRAIN, namespace, rank0=True)
    assert saved.ok, saved.report()
    _, _, position, (model_state, optim_state) = saved.values[0]
    assert position == {"epoch": 0, "position": 24}  # 3 steps x 2 rows x 4 replicas
    loaded = run_cell(pool4, FSDP_BY_TP + RESUME, namespace, rank0=True)
    assert loaded.ok, loaded.report()
    step, loaded_position, (loaded_model, loaded_optim) = loaded.values[0]
    assert (step, loaded_position) == (3, position)
    assert_identical(model_state, loaded_model)
    assert_identical(optim_state, loaded_optim)
    resumed = run_cell(pool4, FSDP_BY_TP + TRAIN, namespace, rank0=True)
    assert resumed.ok, resumed.report()
    resumed_at, step, position, _ = resumed.values[0]
    assert (resumed_at, step, position) == (3, 6, {"epoch": 0, "position": 24 + 3 * 2 * 2})


@pytest.mark.slow
def test_an_asynchronous_save_writes_the_state_as_it_was_when_save_returned(pool: Any, tmp_path: Path) -> None:
    cell = (
        "torch.manual_seed(0)\n"
        "model = gg.fsdp(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64)))\n"
        "ckpt = gg.checkpoint(directory, model=model, sharded=True, asynchronous=True)\n"
        "ckpt.save(1)\n"
        "before = {k: v.full_tensor().clone() for k, v in model.state_dict().items()}\n"
        "with torch.no_grad():\n"
        "    for p in model.parameters():\n"
        "        p.add_(1.0)  # training goes on while the files are written\n"
        "done = ckpt.wait()\n"
        "again = gg.checkpoint(directory, model=model, sharded=True)\n"
        "after = {k: v.full_tensor() for k, v in model.state_dict().items()}\n"
        "(done.name, again.step, all(torch.equal(before[k], after[k]) for k in before))"
    )
    result = run_cell(pool, cell, {"directory": str(tmp_path), "torch": torch})
    assert result.ok, result.report()
    assert result.values == [("step-000000001", 1, True)] * 2


# -- one process ------------------------------------------------------------------------------------
def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2)


def test_an_interrupted_save_is_ignored_and_removed_and_the_newest_whole_one_loads(tmp_path: Path) -> None:
    gg = Helpers()
    gg.checkpoint(tmp_path, model=_model(), sharded=True).save(4)
    (tmp_path / "step-000000009").mkdir()  # no .metadata: DCP never finished it
    (tmp_path / ".step-000000009.partial-0123abcd").mkdir()
    model = torch.nn.Linear(4, 2)
    ckpt = gg.checkpoint(tmp_path, model=model, sharded=True)
    assert ckpt.step == 4 and ckpt.path == tmp_path / "step-000000004"
    assert torch.equal(model.weight, _model().weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000004", "step-000000009"]


def test_sharded_checkpoints_keep_the_newest_and_a_step_saved_again_is_replaced_whole(tmp_path: Path) -> None:
    model = _model()
    ckpt = Helpers().checkpoint(tmp_path, model=model, sharded=True, keep=2)
    for step in (1, 2, 3):
        ckpt.save(step, note=f"step {step}")
    with torch.no_grad():
        model.weight.fill_(7.0)
    ckpt.save(3, note="again")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000002", "step-000000003"]
    fresh = torch.nn.Linear(4, 2)
    resumed = Helpers().checkpoint(tmp_path, model=fresh, sharded=True)
    assert resumed.step == 3 and resumed.extra == {"note": "again"} and bool((fresh.weight == 7.0).all())


def test_a_rank0_checkpoint_resumes_the_loader_position_too(tmp_path: Path) -> None:
    gg = Helpers()
    loader = gg.shard(torch.arange(20), batch_size=4, shuffle=False)
    batches = iter(loader)
    next(batches), next(batches)
    ckpt = gg.checkpoint(tmp_path, model=_model(), loader=loader)
    ckpt.save(2)
    assert ckpt.wait() is None  # written in place: code that switches sharded= on and off runs the same
    fresh = gg.shard(torch.arange(20), batch_size=4, shuffle=False)
    assert gg.checkpoint(tmp_path, model=_model(), loader=fresh).step == 2
    assert [b.tolist() for (b,) in fresh] == [[8, 9, 10, 11], [12, 13, 14, 15], [16, 17, 18, 19]]
    assert os.listdir(tmp_path) == ["step-000000002.pt"]


def test_asynchronous_needs_sharded() -> None:
    with pytest.raises(ValueError) as raised:
        Helpers().checkpoint("ckpts", model=_model(), asynchronous=True)
    assert str(raised.value) == (
        "asynchronous=True needs sharded=True: the rank-0 checkpoint is written in place "
        "(e.g. gg.checkpoint(directory, model=model, sharded=True, asynchronous=True))"
    )


# -- an fsspec location, in one process: fsspec's in-memory filesystem, as an object store behaves
# (no rename of a directory; objects appear whole when closed) -------------------------------------
@pytest.fixture
def memory_url() -> Iterator[str]:
    import fsspec

    url = f"memory://checkpoints-{os.getpid()}-{id(object())}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


@pytest.mark.parametrize("sharded", [True, False], ids=["sharded", "rank0"])
def test_checkpoints_at_an_fsspec_url_resume_keep_the_newest_and_ignore_an_unfinished_save(
    memory_url: str, sharded: bool
) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    model = _model()
    ckpt = Helpers().checkpoint(memory_url, model=model, sharded=sharded, keep=2)
    for step in (1, 2, 3):
        saved = ckpt.save(step, note=f"step {step}")
    suffix = "" if sharded else ".pt"
    assert saved == f"{memory_url.replace('memory://', 'memory:///')}/step-000000003{suffix}"
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(memory_url, detail=False))
    assert names == [f"step-000000002{suffix}", f"step-000000003{suffix}"]
    # a save that did not finish: DCP's shards without its .metadata (sharded), a temporary object (rank 0)
    if sharded:
        fs.pipe(f"{memory_url}/step-000000009/__0_0.distcp", b"half")
    else:
        fs.pipe(f"{memory_url}/.step-000000009.pt.tmp-0123abcd", b"half")
    with torch.no_grad():
        model.weight.fill_(5.0)
    fresh = torch.nn.Linear(4, 2)
    resumed = Helpers().checkpoint(memory_url, model=fresh, sharded=sharded)
    assert resumed.step == 3 and resumed.extra == {"note": "step 3"}
    assert torch.equal(fresh.weight, _model().weight)  # the saved values, not the 5.0 set after
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(memory_url, detail=False))
    assert names == [f"step-000000002{suffix}", f"step-000000003{suffix}"], names  # the unfinished one removed


def test_a_sharded_step_saved_again_at_an_fsspec_url_is_replaced(memory_url: str) -> None:
    model = _model()
    ckpt = Helpers().checkpoint(memory_url, model=model, sharded=True)
    ckpt.save(1)
    with torch.no_grad():
        model.weight.fill_(7.0)
    ckpt.save(1, note="again")
    fresh = torch.nn.Linear(4, 2)
    resumed = Helpers().checkpoint(memory_url, model=fresh, sharded=True)
    assert resumed.step == 1 and resumed.extra == {"note": "again"} and bool((fresh.weight == 7.0).all())


def test_a_url_whose_filesystem_is_not_installed_is_one_error_naming_it() -> None:
    with pytest.raises(ValueError) as raised:
        Helpers().checkpoint("nosuchfs://bucket/run", model=_model(), sharded=True)
    message = str(raised.value)
    assert message.startswith("checkpoint location 'nosuchfs://bucket/run' cannot be opened on this worker")
    assert "e.g. gg.checkpoint('/shared/ckpts', ...)" in message and "\n" not in message


def test_without_a_directory_a_scheduled_run_checkpoints_in_its_schedules_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gg = Helpers()
    monkeypatch.setenv("GPUGEEK_CHECKPOINT_DIR", str(tmp_path))
    gg.checkpoint(model=_model()).save(3)
    assert gg.checkpoint(model=torch.nn.Linear(4, 2)).step == 3  # the next run resumes there
    assert [p.name for p in tmp_path.iterdir()] == ["step-000000003.pt"]
    monkeypatch.delenv("GPUGEEK_CHECKPOINT_DIR")
    with pytest.raises(ValueError) as raised:
        gg.checkpoint(model=_model())
    assert str(raised.value) == (
        "gg.checkpoint needs a directory every rank sees outside a scheduled run (only those have "
        "GPUGEEK_CHECKPOINT_DIR), e.g. gg.checkpoint('/shared/ckpts', model=model)"
    )
