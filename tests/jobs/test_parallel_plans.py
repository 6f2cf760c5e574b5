"""Meshes, plans, pipelines and the shard loader on one process: the rules, the errors, the arithmetic."""

from __future__ import annotations

import re

import pytest
import torch

from gpugeek_jupyter.jobs.helpers import Helpers
from gpugeek_jupyter.jobs.parallel import (
    attention_plan,
    check_plan,
    data_coordinates,
    mlp_plan,
    norm_plan,
    plan_mesh,
    tp_group_within_host,
    warn_if_tp_crosses_hosts,
)
from gpugeek_jupyter.jobs.shard_loader import ShardLoader


def test_mesh_dimensions_run_pp_dp_tp_whatever_order_they_are_given_in() -> None:
    assert plan_mesh(4, tp=2, dp=2) == (("dp", "tp"), (2, 2))
    assert plan_mesh(8, tp=2, pp=2, dp=2) == (("pp", "dp", "tp"), (2, 2, 2))
    assert plan_mesh(4, tp=4) == (("tp",), (4,))


def test_one_mesh_dimension_may_be_the_rest() -> None:
    assert plan_mesh(8, dp=-1, tp=2) == (("dp", "tp"), (4, 2))
    assert plan_mesh(6, pp=2, dp=-1) == (("pp", "dp"), (2, 3))


@pytest.mark.parametrize(
    ("world", "sizes", "message"),
    [
        (
            4,
            {"dp": 2, "tp": 3},
            "gg.mesh(dp=2, tp=3): dp * tp = 6, but the job has 4 ranks; the sizes must multiply to the world size (e.g. gg.mesh(dp=2, tp=2))",
        ),
        (
            8,
            {"pp": 3, "dp": 1, "tp": 2},
            "gg.mesh(pp=3, dp=1, tp=2): pp * dp * tp = 6, but the job has 8 ranks; the sizes must multiply to the world size (e.g. gg.mesh(pp=2, dp=2, tp=2))",
        ),
        (
            4,
            {"dp": -1, "tp": 3},
            "gg.mesh(dp=-1, tp=3): the job's 4 ranks do not divide by 3 (e.g. gg.mesh(dp=2, tp=2))",
        ),
        (
            4,
            {"dp": -1, "tp": -1},
            "only one mesh dimension can be -1 (the rest), got dp=-1, tp=-1 (e.g. gg.mesh(dp=2, tp=2))",
        ),
        (4, {"tp": 0}, "tp must be a positive whole number, or -1 for the rest, got 0 (e.g. gg.mesh(tp=4))"),
        (4, {"tp": "2"}, "tp must be a positive whole number, or -1 for the rest, got '2' (e.g. gg.mesh(tp=4))"),
        (2, {}, "gg.mesh needs at least one of pp=, dp=, tp= (e.g. gg.mesh(dp=2, tp=1))"),
    ],
)
def test_a_mesh_that_does_not_fit_the_job_is_a_one_line_error_with_a_valid_example(
    world: int, sizes: dict[str, int], message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        plan_mesh(world, **sizes)
    assert str(raised.value) == message and "\n" not in message


def test_tp_groups_of_neighbouring_ranks_stay_within_hosts_whose_rank_count_tp_divides() -> None:
    # two hosts of 4 ranks: tp=2 and tp=4 stay on a host, tp=8 cannot
    on_hosts_of_4 = [(rank, rank % 4, 4) for rank in range(8)]
    assert all(tp_group_within_host(r, lr, lws, 2) for r, lr, lws in on_hosts_of_4)
    assert all(tp_group_within_host(r, lr, lws, 4) for r, lr, lws in on_hosts_of_4)
    assert not any(tp_group_within_host(r, lr, lws, 8) for r, lr, lws in on_hosts_of_4)
    # two hosts of 3 ranks, tp=2: the group of ranks 2 and 3 spans both
    assert [tp_group_within_host(r, r % 3, 3, 2) for r in range(6)] == [True, True, False, False, True, True]


def test_a_tp_group_across_hosts_is_a_warning_naming_a_size_that_fits() -> None:
    with pytest.warns(RuntimeWarning, match=r"tp=2 does not divide this host's 3 ranks: rank 2's .* \(e\.g\. tp=1\)"):
        warn_if_tp_crosses_hosts(2, 2, 3, ("dp", "tp"), (3, 2))


class _Mesh:
    """What data_coordinates reads of a DeviceMesh: names, sizes, this rank's coordinates (rank 3 of 2 x 2)."""

    def __init__(self, names: tuple[str, ...], sizes: tuple[int, ...], coordinates: tuple[int, ...]) -> None:
        self.mesh_dim_names, self.sizes, self.coordinates, self.ndim = names or None, sizes, coordinates, len(sizes)

    def __getitem__(self, name: str) -> _Mesh:
        i = (self.mesh_dim_names or ()).index(name)
        return _Mesh((name,), (self.sizes[i],), (self.coordinates[i],))

    def size(self) -> int:
        return self.sizes[0]

    def get_local_rank(self) -> int:
        return self.coordinates[0]


def test_the_data_is_split_over_the_dp_dimension_only() -> None:
    assert data_coordinates(_Mesh(("dp", "tp"), (2, 2), (1, 1))) == (2, 1)  # the tp pair reads the same half
    assert data_coordinates(_Mesh(("dp",), (4,), (3,))) == (4, 3)
    assert data_coordinates(_Mesh(("tp",), (2,), (1,))) == (1, 0)  # no dp: every rank reads every batch
    assert data_coordinates(_Mesh((), (4,), (2,))) == (4, 2)  # an unnamed 1-D mesh: data parallel
    with pytest.raises(ValueError, match=r"^a mesh of 2 unnamed dimensions has no 'dp' dimension"):
        data_coordinates(_Mesh((), (2, 2), (0, 1)))


def test_ready_plans_split_up_projections_by_columns_and_down_projections_by_rows() -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel

    plan = mlp_plan(("gate_proj", "up_proj"), "down_proj", prefix="layers.*.mlp")
    assert {k: type(v) for k, v in plan.items()} == {
        "layers.*.mlp.gate_proj": ColwiseParallel,
        "layers.*.mlp.up_proj": ColwiseParallel,
        "layers.*.mlp.down_proj": RowwiseParallel,
    }
    attention = attention_plan(prefix="attn", sequence_parallel=True)
    assert type(attention["attn"]) is PrepareModuleInput  # one all-gather of the sequence for q, k and v
    assert [type(attention[f"attn.{n}"]) for n in ("q_proj", "k_proj", "v_proj", "o_proj")] == [
        ColwiseParallel,
        ColwiseParallel,
        ColwiseParallel,
        RowwiseParallel,
    ]
    assert list(norm_plan("norm1", "norm2")) == ["norm1", "norm2"]


def _mlp_model() -> torch.nn.Module:
    block = torch.nn.Module()
    block.fc1, block.fc2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList([block])
    return model


def test_a_plan_naming_a_module_the_model_lacks_says_which_modules_it_has() -> None:
    model = _mlp_model()
    check_plan(model, mlp_plan("fc1", "fc2", prefix="blocks.*"))  # '*' matches any child
    with pytest.raises(ValueError) as raised:
        check_plan(model, mlp_plan(prefix="blocks.*"))
    assert str(raised.value) == (
        "the tensor-parallel plan names 'blocks.*.up_proj', but Module has no such module "
        "(its modules: 'blocks.0.fc1', 'blocks.0.fc2'; e.g. {'blocks.0.fc1': ColwiseParallel()})"
    )


def test_outside_a_job_mesh_is_none_and_tensor_parallel_checks_the_plan_and_keeps_the_model() -> None:
    gg = Helpers()
    assert gg.mesh(tp=1) is None
    with pytest.raises(ValueError, match=re.escape("gg.mesh(dp=2, tp=2): dp * tp = 4, but the job has 1 ranks")):
        gg.mesh(dp=2, tp=2)
    model = _mlp_model()
    assert gg.tensor_parallel(model, gg.mlp_plan("fc1", "fc2", prefix="blocks.*")) is model
    with pytest.raises(ValueError, match="names 'blocks.*.up_proj'"):
        gg.tensor_parallel(model, gg.mlp_plan(prefix="blocks.*"))


def test_outside_a_job_a_pipeline_is_the_whole_model_and_step_returns_its_loss() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    pipe = Helpers().pipeline(model, split_points=["2"], microbatches=4, loss_fn=torch.nn.functional.mse_loss)
    loss = pipe.step(x, target=y)
    assert torch.equal(loss, torch.nn.functional.mse_loss(model(x), y).detach())
    assert all(p.grad is not None for p in pipe.parameters())


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"schedule": "zb"}, "schedule must be one of 'gpipe', '1f1b', got 'zb' (e.g. schedule='1f1b')"),
        ({"microbatches": 0}, "microbatches must be a positive whole number, got 0 (e.g. microbatches=4)"),
        (
            {"split_points": "2"},
            "split_points must be a list of module names, each starting a stage, got '2' (e.g. split_points=['layers.2'])",
        ),
        (
            {"split_points": ["7"]},
            "split point '7' names no module of Sequential (its children: '0', '1', '2'; e.g. split_points=['0'])",
        ),
    ],
)
def test_pipeline_arguments_that_cannot_work_are_one_line_errors(arguments: dict[str, object], message: str) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    options: dict[str, object] = {"split_points": ["2"], **arguments}
    with pytest.raises(ValueError) as raised:
        Helpers().pipeline(model, **options)  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_a_traced_pipeline_needs_an_example_batch() -> None:
    with pytest.raises(ValueError, match=r"a Module is split by tracing its forward, which needs an example batch"):
        Helpers().pipeline(_mlp_model(), split_points=["blocks"])


def test_a_batch_that_does_not_split_into_equal_microbatches_is_refused() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 1))
    pipe = Helpers().pipeline(model, split_points=["0"], microbatches=4, loss_fn=torch.nn.functional.mse_loss)
    with pytest.raises(
        ValueError,
        match=r"^a batch of 10 \(input\) does not split into microbatches=4 equal parts.*\(e\.g\. a batch of 8, or microbatches=2\)$",
    ):
        pipe.step(torch.randn(10, 4), target=torch.randn(10, 1))


# -- the shard loader -------------------------------------------------------------------------------
def _epoch(world: int, start: int = 0, batch_size: int = 3, n: int = 24) -> list[list[int]]:
    """Each rank's samples of one epoch of ``n`` (shuffled with seed 0), starting ``start`` samples in."""
    seen = []
    for rank in range(world):
        loader = ShardLoader(torch.arange(n), batch_size=batch_size, num_replicas=world, rank=rank, seed=7)
        loader.load_state_dict({"epoch": 2, "position": start})
        seen.append([int(i) for (batch,) in loader for i in batch])
    return seen


def test_the_shard_loader_gives_the_same_shards_as_distributed_sampler() -> None:
    from torch.utils.data import DistributedSampler, TensorDataset

    dataset = TensorDataset(torch.arange(10))
    for rank in range(3):
        sampler = DistributedSampler(dataset, num_replicas=3, rank=rank, seed=7)
        sampler.set_epoch(2)
        loader = ShardLoader(dataset, batch_size=4, num_replicas=3, rank=rank, seed=7, epoch=2)
        assert [int(i) for (b,) in loader for i in b] == list(sampler) and len(loader.sampler) == len(sampler)


def test_a_loader_resumed_at_another_world_size_sees_the_rest_of_the_epoch_exactly_once() -> None:
    n, batch_size = 24, 3
    whole = sorted(i for rank in _epoch(4) for i in rank)
    assert whole == list(range(n))
    # 4 ranks read 1 batch each (12 samples), then the job resumes on 2 ranks
    first = [rank[:batch_size] for rank in _epoch(4)]
    rest = _epoch(2, start=4 * batch_size)
    assert sorted(i for part in first + rest for i in part) == list(range(n))


def test_the_loader_position_counts_every_rank_and_a_new_epoch_starts_at_zero() -> None:
    loader = ShardLoader(torch.arange(20), batch_size=2, num_replicas=2, rank=1, shuffle=False)
    batches = iter(loader)
    next(batches), next(batches)
    assert loader.state_dict() == {"epoch": 0, "position": 8}
    loader.set_epoch(0)
    assert loader.position == 8  # the same epoch: the position stays
    loader.set_epoch(1)
    assert loader.state_dict() == {"epoch": 1, "position": 0}
