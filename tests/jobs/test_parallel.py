"""Tensor, 2-D (FSDP x TP), sequence and pipeline parallelism on real pools (gloo on CPU), against one process.

Each parallel run is compared with the same model trained in this test process on the whole batch,
step by step. Tolerance: the losses agree to ``rtol=1e-5, atol=1e-6`` (float32; the ranks sum
partial products in another order than one process does, which moves the last bits only).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from gpugeek_jupyter.jobs import run_cell
from support.pools import attached_pool, owned_local_pool

pytestmark = pytest.mark.slow

LOSS_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}

MODEL = """
import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.head_dim = dim // heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (torch.nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (p(x).view(b, s, -1, self.head_dim).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, s, -1))


class MLP(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.up_proj, self.down_proj = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.down_proj(F.gelu(self.up_proj(x)))


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.attn = torch.nn.LayerNorm(dim), Attention(dim, heads)
        self.norm2, self.mlp = torch.nn.LayerNorm(dim), MLP(dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=32, dim=16, heads=4, layers=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.norm, self.head = torch.nn.LayerNorm(dim), torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def lm_loss(logits, tokens):
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


TP_PLAN_NAMES = ("blocks.*.attn", "blocks.*.mlp")
"""

STEPS = 4


def notebook() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(MODEL, namespace)
    generator = torch.Generator().manual_seed(3)
    namespace["batches"] = [torch.randint(0, 32, (4, 8), generator=generator) for _ in range(STEPS)]
    return namespace


def one_process_losses(namespace: dict[str, Any]) -> list[float]:
    torch.manual_seed(0)
    model = namespace["TinyLM"]()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for tokens in namespace["batches"]:
        opt.zero_grad()
        loss = namespace["lm_loss"](model(tokens), tokens)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


TRAIN = """
opt = torch.optim.SGD(model.parameters(), lr=0.5)
losses = []
for tokens in batches:
    part = tokens.chunk(dp_size)[dp_rank]
    opt.zero_grad()
    loss = lm_loss(model(part), part)
    loss.backward()
    opt.step()
    losses.append(loss.item())
losses
"""


@pytest.fixture(scope="module")
def four_rank_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real 4-worker local cpu pool for the module, owned by its own manager."""
    with owned_local_pool(tmp_path_factory, "parallel-4", count=4) as owned:
        yield owned


@pytest.fixture
def pool4(four_rank_cluster: Any) -> Iterator[Any]:
    """The 4-worker pool attached by address, as a user would (with its TLS settings while attaching)."""
    with attached_pool(four_rank_cluster, "parallel") as attached:
        yield attached


# -- meshes -----------------------------------------------------------------------------------------
def test_mesh_puts_neighbouring_ranks_in_a_tp_group_and_is_the_same_object_in_a_later_cell(pool4: Any) -> None:
    first = run_cell(pool4, "mesh = gg.mesh(dp=2, tp=2)\n(mesh['tp'].mesh.tolist(), mesh['dp'].mesh.tolist())", {})
    assert first.ok, first.report()
    assert first.values == [([0, 1], [0, 2]), ([0, 1], [1, 3]), ([2, 3], [0, 2]), ([2, 3], [1, 3])]
    again = run_cell(pool4, "mesh is gg.mesh(tp=2, dp=2)", {})
    assert again.values == [True] * 4


def test_a_mesh_that_does_not_fit_the_pool_fails_every_rank_with_one_line(pool4: Any) -> None:
    result = run_cell(pool4, "gg.mesh(dp=2, tp=3)", {})
    assert not result.ok
    one_line = (
        "ValueError: gg.mesh(dp=2, tp=3): dp * tp = 6, but the job has 4 ranks; the sizes must multiply "
        "to the world size (e.g. gg.mesh(dp=2, tp=2))"
    )
    # the first rank to fail stops the others: one still on its way to the same line is "stopped"
    errors = {r.error for r in result.ranks}
    assert one_line in errors and errors <= {one_line, "stopped"}, errors
    assert result.failure is not None and one_line in result.failure


# -- tensor parallelism -----------------------------------------------------------------------------
def test_tensor_parallel_on_4_ranks_gives_the_loss_trajectory_of_one_process(pool4: Any) -> None:
    namespace = notebook()
    cell = (
        "torch.manual_seed(0)\n"
        "plan = gg.attention_plan(prefix='blocks.*.attn') | gg.mlp_plan(prefix='blocks.*.mlp')\n"
        "model = gg.tensor_parallel(TinyLM(), plan, mesh=gg.mesh(tp=4))\n"
        "dp_size, dp_rank = 1, 0\n" + TRAIN
    )
    result = run_cell(pool4, cell, namespace)
    assert result.ok, result.report()
    expected = one_process_losses(namespace)
    for losses in result.values:  # every rank of the tp group sees the same loss
        torch.testing.assert_close(losses, expected, **LOSS_TOLERANCE)


FSDP_BY_TP = (
    "torch.manual_seed(0)\n"
    "mesh = gg.mesh(dp=2, tp=2)\n"
    "plan = gg.attention_plan(prefix='blocks.*.attn') | gg.mlp_plan(prefix='blocks.*.mlp')\n"
    "model = gg.fsdp(gg.tensor_parallel(TinyLM(), plan, mesh=mesh), mesh=mesh['dp'])\n"
    "dp_size, dp_rank = 2, mesh['dp'].get_local_rank()\n" + TRAIN
)


def test_fsdp_over_tp_on_2x2_gives_the_loss_trajectory_of_one_process(pool4: Any) -> None:
    namespace = notebook()
    result = run_cell(pool4, FSDP_BY_TP, namespace)
    assert result.ok, result.report()
    expected = one_process_losses(namespace)
    by_rank = result.values
    for tp_pair in ((0, 1), (2, 3)):  # ranks of one tp group see the same half of the batch
        assert by_rank[tp_pair[0]] == by_rank[tp_pair[1]]
    mean_over_dp = [(a + b) / 2 for a, b in zip(by_rank[0], by_rank[2])]  # equal halves: the whole batch's mean
    torch.testing.assert_close(mean_over_dp, expected, **LOSS_TOLERANCE)


def test_a_2d_model_built_after_the_process_group_was_rebuilt_uses_the_new_groups(pool4: Any) -> None:
    # DTensor caches sharding decisions by mesh, and a mesh of a new group equals the old one: the
    # caches are cleared with the new group's first mesh, so nothing reaches for the old groups
    namespace = notebook()
    first = run_cell(pool4, FSDP_BY_TP, namespace)
    assert first.ok, first.report()
    assert not run_cell(pool4, "raise RuntimeError('the process group is rebuilt after a failure')", {}).ok
    again = run_cell(pool4, FSDP_BY_TP, namespace)
    assert again.ok, again.report()
    assert again.values == first.values


def test_fsdp_over_tp_shards_each_parameter_over_both_dimensions(pool4: Any) -> None:
    namespace = notebook()
    cell = (
        "torch.manual_seed(0)\n"
        "mesh = gg.mesh(dp=2, tp=2)\n"
        "model = gg.fsdp(gg.tensor_parallel(TinyLM(), gg.mlp_plan(prefix='blocks.*.mlp'), mesh=mesh), mesh=mesh['dp'])\n"
        "w = model.blocks[0].mlp.up_proj.weight\n"
        "(tuple(w.shape), tuple(w.to_local().shape), [(type(p).__name__, p.dim) for p in w.placements])"
    )
    result = run_cell(pool4, cell, namespace)
    assert result.ok, result.report()
    for shape, local, placements in result.values:
        assert shape == (64, 16) and local == (16, 16)  # a quarter on each rank: split by tp, then by dp
        assert placements == [("_StridedShard", 0), ("Shard", 0)]  # dp's shards of tp's shards


def test_sequence_parallel_blocks_give_the_loss_trajectory_of_one_process(pool: Any) -> None:
    namespace = notebook()
    namespace["hidden"] = [torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(s)) for s in range(STEPS)]
    reference = _sequence_parallel_reference(namespace)
    cell = (
        "torch.manual_seed(0)\n"
        "blocks = torch.nn.Sequential(Block(16, 4), Block(16, 4))\n"
        "plan = gg.norm_plan('*.norm1', '*.norm2')\n"
        "plan |= gg.attention_plan(prefix='*.attn', sequence_parallel=True)\n"
        "plan |= gg.mlp_plan(prefix='*.mlp', sequence_parallel=True)\n"
        "blocks = gg.tensor_parallel(blocks, plan, mesh=gg.mesh(tp=2))\n"
        "opt = torch.optim.SGD(blocks.parameters(), lr=0.5)\n"
        "losses = []\n"
        "for x in hidden:\n"
        "    part = x.chunk(world_size, dim=1)[rank]  # this rank's half of the sequence\n"
        "    opt.zero_grad()\n"
        "    out = blocks(part)\n"
        "    out = out.to_local() if hasattr(out, 'to_local') else out\n"
        "    loss = out.square().sum() / x.numel()  # the ranks' parts add up to the whole mean\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    total = loss.detach().clone()\n"
        "    dist.all_reduce(total)\n"
        "    losses.append(total.item())\n"
        "losses"
    )
    result = run_cell(pool, cell, namespace)
    assert result.ok, result.report()
    for losses in result.values:
        torch.testing.assert_close(losses, reference, **LOSS_TOLERANCE)


def _sequence_parallel_reference(namespace: dict[str, Any]) -> list[float]:
    torch.manual_seed(0)
    blocks = torch.nn.Sequential(namespace["Block"](16, 4), namespace["Block"](16, 4))
    opt = torch.optim.SGD(blocks.parameters(), lr=0.5)
    losses = []
    for x in namespace["hidden"]:
        opt.zero_grad()
        loss = blocks(x).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_a_plan_naming_a_module_the_model_lacks_fails_with_the_modules_it_has(pool: Any) -> None:
    namespace = notebook()
    result = run_cell(pool, "gg.tensor_parallel(TinyLM(), gg.mlp_plan('fc1', 'fc2', prefix='blocks.*.mlp'))", namespace)
    assert not result.ok
    error = result.ranks[0].error or ""
    assert error.startswith(
        "ValueError: the tensor-parallel plan names 'blocks.*.mlp.fc1', but TinyLM has no such module"
    )
    assert "'blocks.0.mlp.up_proj'" in error and "\n" not in error


# -- pipelines --------------------------------------------------------------------------------------
PIPELINE_MODEL = """
def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
    )
"""


def _pipeline_notebook() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__main__", "torch": torch}
    exec(PIPELINE_MODEL, namespace)
    generator = torch.Generator().manual_seed(5)
    namespace["data"] = [
        (torch.randn(8, 8, generator=generator), torch.randn(8, 1, generator=generator)) for _ in range(3)
    ]
    return namespace


def _unsplit_losses(namespace: dict[str, Any]) -> list[float]:
    model = namespace["make_model"]()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in namespace["data"]:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_pipeline_of_2_stages_gives_the_loss_of_the_unsplit_model(pool: Any, schedule: str) -> None:
    namespace = _pipeline_notebook()
    cell = (
        f"pipe = gg.pipeline(make_model(), split_points=['2'], microbatches=4, schedule={schedule!r},\n"
        "                   loss_fn=torch.nn.functional.mse_loss)\n"
        "opt = torch.optim.SGD(pipe.parameters(), lr=0.1)\n"
        "losses = []\n"
        "for x, y in data:\n"
        "    opt.zero_grad()\n"
        "    losses.append(pipe.step(x, target=y))\n"
        "    opt.step()\n"
        "(repr(pipe), [None if l is None else l.item() for l in losses])"
    )
    result = run_cell(pool, cell, namespace)
    assert result.ok, result.report()
    (first_repr, first_losses), (last_repr, last_losses) = result.values
    assert first_repr == "<Pipeline stage 1/2, 4 microbatches, 288 parameters here>"  # Linear(8, 32)
    assert last_repr == "<Pipeline stage 2/2, 4 microbatches, 1089 parameters here>"
    assert first_losses == [None] * 3
    torch.testing.assert_close(last_losses, _unsplit_losses(namespace), **LOSS_TOLERANCE)


def test_the_cell_value_of_a_pipeline_step_is_the_loss_on_the_last_stage_and_none_before(pool: Any) -> None:
    namespace = _pipeline_notebook()
    cell = (
        "pipe = gg.pipeline(make_model(), split_points=['2'], microbatches=2, loss_fn=torch.nn.functional.mse_loss)\n"
        "x, y = data[0]\n"
        "pipe.step(x, target=y)"
    )
    result = run_cell(pool, cell, namespace)
    assert result.ok, result.report()
    first, last = result.values
    assert first is None
    torch.testing.assert_close(last.item(), _unsplit_losses(namespace)[0], **LOSS_TOLERANCE)


def test_a_pipeline_over_the_pp_dimension_of_a_mesh_runs_one_pipeline_per_dp_replica(pool4: Any) -> None:
    namespace = _pipeline_notebook()
    cell = (
        "mesh = gg.mesh(pp=2, dp=2)\n"
        "pipe = gg.pipeline(make_model(), split_points=['2'], microbatches=2, mesh=mesh['pp'],\n"
        "                   loss_fn=torch.nn.functional.mse_loss)\n"
        "x, y = data[0]\n"
        "loss = pipe.step(x, target=y)\n"
        "(mesh['pp'].mesh.tolist(), pipe.stage_index, None if loss is None else loss.item())"
    )
    result = run_cell(pool4, cell, namespace)
    assert result.ok, result.report()
    groups = [group for group, _, _ in result.values]
    assert groups == [[0, 2], [1, 3], [0, 2], [1, 3]]  # pp is the slow dimension: stages 2 ranks apart
    assert [stage for _, stage, _ in result.values] == [0, 0, 1, 1]
    expected = _unsplit_losses(namespace)[0]
    for _, stage, loss in result.values:
        if stage == 0:
            assert loss is None
        else:
            torch.testing.assert_close(loss, expected, **LOSS_TOLERANCE)


def test_a_traced_pipeline_splits_a_model_that_is_not_sequential(pool: Any) -> None:
    namespace = notebook()
    cell = (
        "torch.manual_seed(0)\n"
        "model = TinyLM()\n"
        "pipe = gg.pipeline(model, split_points=['blocks.1'], microbatches=2, loss_fn=lm_loss, example=batches[0])\n"
        "opt = torch.optim.SGD(pipe.parameters(), lr=0.5)\n"
        "losses = []\n"
        "for tokens in batches:\n"
        "    opt.zero_grad()\n"
        "    loss = pipe.step(tokens, target=tokens)\n"
        "    opt.step()\n"
        "    losses.append(None if loss is None else loss.item())\n"
        "losses"
    )
    result = run_cell(pool, cell, namespace)
    assert result.ok, result.report()
    assert result.values[0] == [None] * STEPS
    # lm_loss of each microbatch of 2 sequences, averaged: the whole batch's mean, as all sequences are alike in length
    torch.testing.assert_close(result.values[1], one_process_losses(namespace), **LOSS_TOLERANCE)


# -- GPU paths --------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_tensor_parallel_over_nccl_gives_the_loss_trajectory_of_one_process() -> None:
    import gpugeek_jupyter
    from gpugeek_jupyter.catalog import load_catalog
    from gpugeek_jupyter.nvml import discover_gpus

    found = discover_gpus().devices
    if len(found) < 2:
        pytest.skip(f"tensor parallelism over NCCL needs 2 GPUs, this machine has {len(found)}")
    catalog = load_catalog()
    gpu_type = next(g.name for g in catalog.gpus.values() if not g.is_cpu and g.matches_nvml_name(found[0].name))
    gpu_pool = gpugeek_jupyter.launch(gpu_type=gpu_type, count=2, name="gpu-tp")
    try:
        namespace = notebook()
        cell = (
            "torch.manual_seed(0)\n"
            "plan = gg.attention_plan(prefix='blocks.*.attn') | gg.mlp_plan(prefix='blocks.*.mlp')\n"
            "model = gg.tensor_parallel(TinyLM(), plan, mesh=gg.mesh(tp=2))\n"
            "batches = [b.to(device) for b in batches]\n"
            "dp_size, dp_rank = 1, 0\n" + TRAIN
        )
        result = run_cell(gpu_pool, cell, namespace)
        assert result.ok, result.report()
        for losses in result.values:  # TF32 and other kernels on the GPU: a looser bound than on CPU
            torch.testing.assert_close(losses, one_process_losses(namespace), rtol=1e-3, atol=1e-4)
    finally:
        gpu_pool.stop()
