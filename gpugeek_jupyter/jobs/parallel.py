"""Model parallelism for cells: device meshes, tensor parallelism and pipelines, from torch's own parts.

``gg.mesh``, ``gg.tensor_parallel`` and ``gg.pipeline`` (:mod:`gpugeek_jupyter.jobs.helpers`) call
these; they run on the ranks and hold no state but a cache of meshes per process group.

>>> plan_mesh(4, dp=2, tp=2)
(('dp', 'tp'), (2, 2))
>>> plan_mesh(8, pp=2, dp=-1, tp=2)
(('pp', 'dp', 'tp'), (2, 2, 2))
>>> sorted(mlp_plan("fc1", "fc2", prefix="blocks.*.mlp"))
['blocks.*.mlp.fc1', 'blocks.*.mlp.fc2']

**Layout.** A mesh's dimensions run from slowest to fastest, ``pp``, ``dp``, ``tp``, over the ranks in
order. A pool numbers the ranks of one host contiguously (:mod:`gpugeek_jupyter.jobs.layout`), so a
``tp`` group, ``tp`` neighbouring ranks, lies within one host whenever each host's rank count is a
multiple of ``tp``: tensor parallelism's all-reduces, one per layer, stay on the host's fast links
(NVLink, shared memory) and only ``dp``'s gradient reductions and ``pp``'s activations cross hosts.
"""

from __future__ import annotations

import fnmatch
import logging
import math
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

MESH_DIMS = ("pp", "dp", "tp")  # slowest to fastest
SCHEDULES = ("gpipe", "1f1b")

# Meshes per process group: building one creates sub-groups (a collective), so a cell that asks for
# the same mesh again gets the one it made before. Keyed weakly by the default group: a rebuilt
# group (after a failure) is a new key, and its old meshes go with the old group.
log = logging.getLogger(__name__)

_MESHES: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()


# -- device meshes ----------------------------------------------------------------------------------
def plan_mesh(
    world_size: int, *, pp: int | None = None, dp: int | None = None, tp: int | None = None
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The dimension names and sizes of a mesh over ``world_size`` ranks; one size may be ``-1`` (the rest).

    Pure, so every rank computes the same answer; raises ``ValueError`` with one line otherwise.
    """
    given = {name: size for name, size in (("pp", pp), ("dp", dp), ("tp", tp)) if size is not None}
    if not given:
        raise ValueError(f"gg.mesh needs at least one of pp=, dp=, tp= (e.g. {_example(world_size, ('dp', 'tp'))})")
    names = tuple(given)
    for name, size in given.items():
        if isinstance(size, bool) or not isinstance(size, int) or (size < 1 and size != -1):
            raise ValueError(
                f"{name} must be a positive whole number, or -1 for the rest, got {size!r} "
                f"(e.g. {_example(world_size, names)})"
            )
    rest = [name for name, size in given.items() if size == -1]
    if len(rest) > 1:
        raise ValueError(
            f"only one mesh dimension can be -1 (the rest), got {', '.join(f'{n}=-1' for n in rest)} "
            f"(e.g. {_example(world_size, names)})"
        )
    known = math.prod(size for size in given.values() if size != -1)
    if rest:
        if world_size % known:
            raise ValueError(
                f"{_call(given)}: the job's {world_size} ranks do not divide by {known} "
                f"(e.g. {_example(world_size, names)})"
            )
        given[rest[0]] = world_size // known
    elif known != world_size:
        product = " * ".join(names)
        raise ValueError(
            f"{_call(given)}: {product} = {known}, but the job has {world_size} ranks; "
            f"the sizes must multiply to the world size (e.g. {_example(world_size, names)})"
        )
    return names, tuple(given[name] for name in names)


def _call(given: Mapping[str, int]) -> str:
    return "gg.mesh(" + ", ".join(f"{name}={size!r}" for name, size in given.items()) + ")"


def _example(world_size: int, names: Sequence[str]) -> str:
    """A valid call for ``world_size`` with these dimensions: inner ones 2 where that divides, the rest outermost."""
    sizes = [1] * len(names)
    left = world_size
    for i in range(len(names) - 1, 0, -1):
        if left % 2 == 0 and left > 2:
            sizes[i], left = 2, left // 2
    sizes[0] = left
    return _call(dict(zip(names, sizes)))


def tp_group_within_host(rank: int, local_rank: int, local_world_size: int, tp: int) -> bool:
    """Whether the ``tp`` group of ``rank`` (``tp`` neighbouring ranks) lies on this rank's host.

    >>> tp_group_within_host(rank=5, local_rank=1, local_world_size=4, tp=2)   # ranks 4-5 on hosts of 4
    True
    >>> tp_group_within_host(rank=3, local_rank=0, local_world_size=3, tp=2)   # ranks 2-3: hosts 0-2, 3-5
    False
    """
    first = local_rank - rank % tp  # the group's first rank, as a local rank of this host
    return first >= 0 and first + tp <= local_world_size


def build_mesh(device_type: str, names: tuple[str, ...], shape: tuple[int, ...]) -> Any:
    """``init_device_mesh`` over every rank of the job, the same object again for the same mesh."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.group.WORLD
    if world not in _MESHES:  # the first mesh since the process group was (re)built
        forget_meshes()
    meshes = _MESHES.setdefault(world, {})
    key = (device_type, names, shape)
    if key not in meshes:
        meshes[key] = init_device_mesh(device_type, shape, mesh_dim_names=names)
    return meshes[key]


def forget_meshes() -> None:
    """Drop meshes of earlier process groups, here and in DTensor's caches.

    A ``DeviceMesh`` compares equal to one of the same shape, names and ranks made over an earlier
    process group, so DTensor's caches (sharding propagation, redistribution plans, topology),
    keyed by meshes, would hand a new model's operations the old mesh, whose groups are gone or,
    worse, whose group names now belong to other groups. A worker outlives its process groups (a
    torchrun rank does not), so the caches are cleared whenever a group's first mesh is made.
    """
    _MESHES.clear()
    try:
        from torch.distributed.tensor._collective_utils import MeshTopoInfo
        from torch.distributed.tensor._redistribute import _gen_transform_infos
        from torch.distributed.tensor.debug import _clear_sharding_prop_cache
    except ImportError as e:  # another torch: its caches may differ; say what could not be cleared
        log.warning("could not clear DTensor's caches of meshes (%s); meshes of an earlier process group may linger", e)
        return
    _clear_sharding_prop_cache()  # the Python cache and the C++ fast path's
    _gen_transform_infos.cache_clear()
    MeshTopoInfo.build_from_mesh.cache_clear()


def warn_if_tp_crosses_hosts(
    rank: int, local_rank: int, local_world_size: int, names: Sequence[str], shape: Sequence[int]
) -> None:
    if "tp" not in names:
        return
    tp = shape[list(names).index("tp")]
    if tp > 1 and not tp_group_within_host(rank, local_rank, local_world_size, tp):
        warnings.warn(
            f"tp={tp} does not divide this host's {local_world_size} ranks: rank {rank}'s tensor-parallel group "
            f"spans hosts, and each layer's all-reduce crosses the network (e.g. tp={math.gcd(tp, local_world_size)})",
            RuntimeWarning,
            stacklevel=3,
        )


def data_coordinates(mesh: Any) -> tuple[int, int]:
    """How many data-parallel replicas ``mesh`` has, and which one this rank is (its ``dp`` dimension).

    A mesh without a ``dp`` dimension (``gg.mesh(tp=2)``) has one replica: every rank reads the same
    batches. An unnamed 1-D mesh is taken as data-parallel.
    """
    names = tuple(mesh.mesh_dim_names or ())
    if "dp" in names:
        dp = mesh["dp"] if mesh.ndim > 1 else mesh
        return int(dp.size()), int(dp.get_local_rank())
    if names:
        return 1, 0
    if mesh.ndim > 1:
        raise ValueError(
            f"a mesh of {mesh.ndim} unnamed dimensions has no 'dp' dimension to split the data over "
            f"(e.g. mesh=gg.mesh(dp=2, tp=2))"
        )
    return int(mesh.size()), int(mesh.get_local_rank())


# -- tensor parallelism -----------------------------------------------------------------------------
def _joined(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def mlp_plan(
    up: str | Sequence[str] = "up_proj",
    down: str = "down_proj",
    *,
    prefix: str = "",
    sequence_parallel: bool = False,
) -> dict[str, Any]:
    """A tensor-parallel plan for an MLP block: ``up`` (one name, or several such as ``("gate_proj",
    "up_proj")``) split by output features, ``down`` by input features, one all-reduce per block.

    ``prefix`` is the block's path in the model and may hold ``*`` (``"layers.*.mlp"``). With
    ``sequence_parallel`` the block takes and returns activations split along the sequence (dim 1):
    its input is all-gathered once and its output reduce-scattered (the norms around it get
    ``SequenceParallel`` from :func:`norm_plan`).
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel

    ups = [up] if isinstance(up, str) else list(up)
    plan: dict[str, Any] = {}
    if sequence_parallel:
        plan[prefix] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    for name in ups:
        plan[_joined(prefix, name)] = ColwiseParallel()
    plan[_joined(prefix, down)] = RowwiseParallel(output_layouts=Shard(1)) if sequence_parallel else RowwiseParallel()
    return plan


def attention_plan(
    q: str = "q_proj",
    k: str = "k_proj",
    v: str = "v_proj",
    out: str = "o_proj",
    *,
    prefix: str = "",
    sequence_parallel: bool = False,
) -> dict[str, Any]:
    """A tensor-parallel plan for attention: ``q``/``k``/``v`` split by output features (each rank
    computes its share of the heads), ``out`` by input features, one all-reduce per block.

    The attention code must reshape with the heads it has, not the model's total: ``q.view(b, s, -1,
    head_dim)``. ``prefix`` and ``sequence_parallel`` as for :func:`mlp_plan`.
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel

    plan: dict[str, Any] = {}
    if sequence_parallel:
        plan[prefix] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    for name in (q, k, v):
        plan[_joined(prefix, name)] = ColwiseParallel()
    plan[_joined(prefix, out)] = RowwiseParallel(output_layouts=Shard(1)) if sequence_parallel else RowwiseParallel()
    return plan


def norm_plan(*names: str) -> dict[str, Any]:
    """``SequenceParallel`` for norm (or dropout) modules: they run on each rank's part of the sequence.

    Their input is each rank's slice of the sequence (dim 1); their output a DTensor sharded so.
    """
    from torch.distributed.tensor.parallel import SequenceParallel

    return {name: SequenceParallel() for name in names}


def _matches(model: Any, path: str) -> bool:
    """Whether ``path`` (atoms may hold ``*``, as ``parallelize_module`` reads them) names a submodule."""
    if path == "":
        return True
    modules = [model]
    for atom in path.split("."):
        modules = [child for m in modules for name, child in m.named_children() if fnmatch.fnmatch(name, atom)]
        if not modules:
            return False
    return True


def check_plan(model: Any, plan: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` for the first module ``plan`` names that ``model`` lacks, with names it has."""
    for path in plan:
        if not isinstance(path, str):
            raise ValueError(
                f"a tensor-parallel plan maps module paths to styles, got the key {path!r} (e.g. {{'mlp.up_proj': ColwiseParallel()}})"
            )
        if _matches(model, path):
            continue
        leaves = [name for name, m in model.named_modules() if name and not any(True for _ in m.children())]
        shown = ", ".join(repr(n) for n in leaves[:8]) + (", ..." if len(leaves) > 8 else "")
        suggestion = leaves[0] if leaves else "fc1"
        raise ValueError(
            f"the tensor-parallel plan names {path!r}, but {type(model).__name__} has no such module "
            f"(its modules: {shown or 'none'}; e.g. {{{suggestion!r}: ColwiseParallel()}})"
        )


def apply_tensor_parallel(model: Any, plan: Mapping[str, Any], mesh: Any) -> Any:
    """``parallelize_module(model, mesh, plan)`` after :func:`check_plan`; ``mesh`` 1-D, or with a ``tp`` dimension."""
    from torch.distributed.tensor.parallel import parallelize_module

    check_plan(model, plan)
    return parallelize_module(model, tp_submesh(mesh), dict(plan))


def tp_submesh(mesh: Any) -> Any:
    if mesh.ndim == 1:
        return mesh
    names = tuple(mesh.mesh_dim_names or ())
    if "tp" not in names:
        raise ValueError(
            f"tensor_parallel needs a 1-D mesh or one with a 'tp' dimension, got dimensions {names!r} "
            f"(e.g. mesh=gg.mesh(dp=2, tp=2))"
        )
    return mesh["tp"]


# -- pipelines --------------------------------------------------------------------------------------
class Pipeline:
    """One rank's stage of a pipeline, and the schedule that runs it (``gg.pipeline``).

    ``module`` is this rank's part of the model (give its ``parameters()`` to the optimizer);
    ``step(*inputs, target=y)`` runs one batch through every stage in ``microbatches`` pieces, forward
    and backward, and returns the mean loss over the microbatches on the last stage, ``None`` on the
    others. Every rank calls ``step`` with the same arguments; only the first stage reads the
    inputs and only the last the target.
    """

    def __init__(
        self,
        module: Any,
        *,
        stage_index: int = 0,
        num_stages: int = 1,
        microbatches: int = 1,
        schedule: Any = None,
        loss_fn: Callable[..., Any] | None = None,
    ) -> None:
        self.module = module
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.microbatches = microbatches
        self.schedule = schedule
        self.loss_fn = loss_fn

    def __repr__(self) -> str:
        return (
            f"<Pipeline stage {self.stage_index + 1}/{self.num_stages}, {self.microbatches} microbatches, "
            f"{sum(p.numel() for p in self.module.parameters())} parameters here>"
        )

    @property
    def is_first(self) -> bool:
        return self.stage_index == 0

    @property
    def is_last(self) -> bool:
        return self.stage_index == self.num_stages - 1

    def parameters(self) -> Iterator[Any]:
        return iter(self.module.parameters())

    def step(self, *inputs: Any, target: Any = None) -> Any:
        """One training step's forward and backward; the mean loss on the last stage, else ``None``."""
        import torch

        if self.is_first:
            _check_divides(inputs, self.microbatches, "input")
        if self.is_last and target is not None:
            _check_divides((target,), self.microbatches, "target")
        if self.schedule is None:  # one process: the whole model, the whole batch
            output = self.module(*inputs)
            if self.loss_fn is None:
                return output
            loss = self.loss_fn(output, target)
            loss.backward()
            return loss.detach()
        losses: list[Any] = []
        args = inputs if self.is_first else ()
        if self.is_last:
            output = self.schedule.step(*args, target=target, losses=losses)
            return torch.stack(losses).mean().detach() if losses else output
        self.schedule.step(*args)
        return None


def _check_divides(tensors: Sequence[Any], microbatches: int, what: str) -> None:
    for tensor in tensors:
        size = tensor.shape[0] if getattr(tensor, "ndim", 0) else None
        if size is not None and size % microbatches:
            fits = max(d for d in range(1, microbatches + 1) if size % d == 0)
            even = size - size % microbatches or microbatches
            raise ValueError(
                f"a batch of {size} ({what}) does not split into microbatches={microbatches} equal parts, so the "
                f"pipeline's loss would not be the whole batch's (e.g. a batch of {even}, or microbatches={fits})"
            )


def build_pipeline(
    model: Any,
    split_points: Sequence[str],
    *,
    microbatches: int,
    schedule: str,
    loss_fn: Callable[..., Any] | None,
    device: Any,
    group: Any,
    example: tuple[Any, ...] | None,
) -> Pipeline:
    """This rank's stage of ``model`` cut at ``split_points`` (each starts a stage) and its schedule."""
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    _check_pipeline_arguments(model, split_points, microbatches, schedule, example)
    num_stages = len(split_points) + 1
    group_size = dist.get_world_size(group)
    if group_size != num_stages:
        raise ValueError(
            f"{len(split_points)} split points make {num_stages} stages, but the pipeline's group has {group_size} "
            f"ranks; one stage runs per rank (e.g. split_points of {group_size - 1} names, or mesh=gg.mesh(pp={num_stages}, dp=...)['pp'])"
        )
    stage_index = dist.get_rank(group)
    if example is None:  # an nn.Sequential: cut between its children, no tracing
        module = _sequential_stage(model, split_points, stage_index).to(device)
        stage: Any = PipelineStage(module, stage_index, num_stages, device, group=group)
    else:
        from torch.distributed.pipelining import SplitPoint, pipeline

        chunk = tuple(t.tensor_split(microbatches)[0] if hasattr(t, "tensor_split") else t for t in example)
        pipe = pipeline(model, mb_args=chunk, split_spec={p: SplitPoint.BEGINNING for p in split_points})
        stage = pipe.build_stage(stage_index, device, group)
        module = stage.submod
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    runner = kind(stage, microbatches, loss_fn=loss_fn)
    return Pipeline(
        module,
        stage_index=stage_index,
        num_stages=num_stages,
        microbatches=microbatches,
        schedule=runner,
        loss_fn=loss_fn,
    )


def _check_pipeline_arguments(
    model: Any, split_points: Sequence[str], microbatches: int, schedule: str, example: tuple[Any, ...] | None
) -> None:
    import torch

    if schedule not in SCHEDULES:
        raise ValueError(
            f"schedule must be one of {', '.join(map(repr, SCHEDULES))}, got {schedule!r} (e.g. schedule='1f1b')"
        )
    if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
        raise ValueError(f"microbatches must be a positive whole number, got {microbatches!r} (e.g. microbatches=4)")
    if isinstance(split_points, str) or not split_points:
        raise ValueError(
            f"split_points must be a list of module names, each starting a stage, got {split_points!r} (e.g. split_points=['layers.2'])"
        )
    for point in split_points:
        if not isinstance(point, str) or not _matches(model, point) or "*" in point:
            children = ", ".join(repr(n) for n, _ in list(model.named_children())[:8])
            raise ValueError(
                f"split point {point!r} names no module of {type(model).__name__} (its children: {children}; "
                f"e.g. split_points=[{next(iter(dict(model.named_children())), '1')!r}])"
            )
    if example is None and not isinstance(model, torch.nn.Sequential):
        raise ValueError(
            f"a {type(model).__name__} is split by tracing its forward, which needs an example batch "
            f"(e.g. gg.pipeline(model, split_points={list(split_points)!r}, example=x)); an nn.Sequential needs none"
        )


def _sequential_stage(model: Any, split_points: Sequence[str], stage_index: int) -> Any:
    """The children of ``model`` (an ``nn.Sequential``) from one split point to the next, names kept."""
    import torch

    names = [name for name, _ in model.named_children()]
    for point in split_points:
        if point not in names:
            raise ValueError(
                f"split points of an nn.Sequential are its children's names, got {point!r} (e.g. split_points=[{names[len(names) // 2]!r}])"
            )
    cuts = [0, *(names.index(p) for p in split_points), len(names)]
    if cuts != sorted(cuts) or len(set(cuts)) != len(cuts):
        raise ValueError(
            f"split points must be in the model's order, each after the last, got {list(split_points)!r} (e.g. split_points=[{names[len(names) // 2]!r}])"
        )
    children = OrderedDict((name, getattr(model, name)) for name in names[cuts[stage_index] : cuts[stage_index + 1]])
    return torch.nn.Sequential(children)  # the model's own names: checkpoints of stages do not collide
