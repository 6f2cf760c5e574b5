"""``gg``: the helpers a ``%%gpugeek_run`` cell sees, bound to its rank.

>>> model = gg.ddp(Net())                                 # doctest: +SKIP
>>> for x, y in gg.shard(dataset, batch_size=64):         # doctest: +SKIP
...     ...
>>> ckpt = gg.checkpoint("ckpts", model=model, optimizer=opt)   # resumes from the newest  # doctest: +SKIP
>>> for step in range(ckpt.step, 1000):                   # doctest: +SKIP
...     ...; ckpt.save(step + 1)

Model parallelism (:mod:`gpugeek_jupyter.jobs.parallel`), with torch's own building blocks:

>>> mesh = gg.mesh(dp=2, tp=2)                            # 4 ranks; tp groups within a host  # doctest: +SKIP
>>> model = gg.tensor_parallel(model, gg.mlp_plan("fc1", "fc2", prefix="blocks.*.mlp"), mesh=mesh)  # doctest: +SKIP
>>> model = gg.fsdp(model, mesh=mesh["dp"])               # 2-D: FSDP over dp, TP over tp  # doctest: +SKIP
>>> ckpt = gg.checkpoint("ckpts", model=model, optimizer=opt, sharded=True)  # resumes at any size  # doctest: +SKIP
>>> pipe = gg.pipeline(nn.Sequential(...), split_points=["2"], microbatches=4, loss_fn=F.mse_loss)  # doctest: +SKIP
>>> pipe.step(x, target=y)                                # the loss on the last stage, None elsewhere  # doctest: +SKIP

Outside a job (no process group), the same calls work on one process: ``gg.ddp`` returns the model
unwrapped, ``gg.shard`` gives the whole dataset, ``gg.mesh`` of size 1 is ``None`` and
``gg.tensor_parallel`` and ``gg.pipeline`` run the whole model, so a cell can be tried locally first.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .checkpoint_dir import CheckpointBase, CheckpointPath
from .metrics import log_values
from .parallel import (
    Pipeline,
    _check_pipeline_arguments,
    apply_tensor_parallel,
    attention_plan,
    build_mesh,
    build_pipeline,
    check_plan,
    data_coordinates,
    mlp_plan,
    norm_plan,
    plan_mesh,
    warn_if_tp_crosses_hosts,
)
from .sharded_checkpoint import ShardedCheckpoint

# torch, and shard_loader which imports it, are imported where they are used: the notebook side
# imports this module too (schedules read SCHEDULED_CHECKPOINT_DIR) and must not pay torch's import
if TYPE_CHECKING:
    from .shard_loader import ShardLoader

log = logging.getLogger(__name__)

AMP_DTYPES = ("bf16", "fp16")


class Helpers:
    """The ``gg`` object: DDP/FSDP, meshes, tensor and pipeline parallelism, sharded loading,
    activation checkpointing, checkpoints (rank 0's or sharded), AMP."""

    def __init__(
        self,
        rank: int = 0,
        world_size: int = 1,
        local_rank: int = 0,
        device: Any = None,
        amp: str | None = None,
    ) -> None:
        import torch

        if amp is not None and amp not in AMP_DTYPES:
            raise ValueError(f"amp must be one of {', '.join(AMP_DTYPES)}, got {amp!r} (e.g. amp='bf16')")
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        # ranks on this host: torchrun's LOCAL_WORLD_SIZE, which every rank of a job has
        self.local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size)) if world_size > 1 else 1
        self.device = device if device is not None else torch.device("cpu")
        self.amp = amp
        # fp16 needs loss scaling; with bf16 or no AMP the scaler is disabled and passes values through
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=amp == "fp16")

    def __repr__(self) -> str:
        return f"<gg rank {self.rank}/{self.world_size} on {self.device}, amp={self.amp}>"

    @classmethod
    def from_env(cls) -> Helpers:
        """Helpers for a process started by torchrun (or a plain process: rank 0 of 1)."""
        import torch

        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
        return cls(
            rank=int(os.environ.get("RANK", 0)),
            world_size=int(os.environ.get("WORLD_SIZE", 1)),
            local_rank=local_rank,
            device=device,
        )

    # -- precision ---------------------------------------------------------------------------------
    def log(self, step: int, **values: Any) -> None:
        """Record training metrics of this rank at ``step`` (numbers: floats, ints, numpy scalars,
        one-element tensors; a NaN is kept): buffered and sent with the rank's output, never a
        collective. They are kept with the job: ``result.metrics()``,
        ``gpugeek_jupyter.job(id).metrics()``, ``GET /gpugeek/jobs/<id>/metrics``.

        >>> gg.log(step=step, loss=loss.item(), step_s=time.perf_counter() - t0)   # doctest: +SKIP
        """
        log_values(step, values)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` for this rank's device under ``--amp``; a no-op otherwise."""
        import torch

        if self.amp is None:
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.amp == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    # -- strategies --------------------------------------------------------------------------------
    def ddp(self, model: Any, **ddp_options: Any) -> Any:
        """``DistributedDataParallel(model)`` on this rank's device (the model moves there first)."""
        from torch.nn.parallel import DistributedDataParallel

        model = model.to(self.device)
        if not _distributed():
            return model
        if self.device.type == "cuda":
            ddp_options.setdefault("device_ids", [self.device.index])
        return DistributedDataParallel(model, **ddp_options)

    def fsdp(self, model: Any, shard: tuple[type, ...] | None = None, mesh: Any = None, **fsdp_options: Any) -> Any:
        """Fully sharded data parallel (``torch.distributed.fsdp.fully_shard``) over every rank, or ``mesh``.

        Parameters, gradients and optimizer state are split across ranks. Submodules of the types in
        ``shard`` (e.g. your transformer block class) become their own units; by default each
        direct child with parameters does (each module of a ``ModuleList`` or ``ModuleDict``
        child, which has no forward of its own), then the whole model. For 2-D parallelism pass the data
        dimension of the mesh a tensor-parallel model was split over: ``gg.fsdp(model,
        mesh=mesh["dp"])``. Build the model the same way on every rank (same seed): each rank keeps
        its part of its own copy.
        """
        from torch.distributed.fsdp import fully_shard

        model = model.to(self.device)
        if not _distributed():
            return model
        if mesh is None:
            mesh = self._mesh(("dp",), (self.world_size,))
        if shard:
            units = [m for m in model.modules() if isinstance(m, shard) and m is not model]
        else:
            units = _default_units(model)
        for unit in units:
            fully_shard(unit, mesh=mesh, **fsdp_options)  # type: ignore[call-overload]
        return fully_shard(model, mesh=mesh, **fsdp_options)

    # -- model parallelism -------------------------------------------------------------------------
    def mesh(self, *, pp: int | None = None, dp: int | None = None, tp: int | None = None) -> Any:
        """A ``DeviceMesh`` over every rank of the job, dimensions ``pp``, ``dp``, ``tp`` (those given).

        The sizes multiply to the world size (one may be ``-1``, the rest). Dimensions run slowest to
        fastest, so a ``tp`` group is neighbouring ranks, on one host when its rank count divides by
        ``tp`` (a warning says when it does not). ``mesh["dp"]``, ``mesh["tp"]`` are its 1-D parts.
        The same mesh asked for again, in this cell or a later one, is the same object.

        >>> mesh = gg.mesh(dp=2, tp=2)      # on 4 ranks  # doctest: +SKIP
        >>> mesh["tp"].get_local_rank()     # doctest: +SKIP
        1
        """
        names, shape = plan_mesh(self.world_size, pp=pp, dp=dp, tp=tp)
        if not _distributed():
            return None  # one process: nothing to split over
        warn_if_tp_crosses_hosts(self.rank, self.local_rank, self.local_world_size, names, shape)
        return self._mesh(names, shape)

    def _mesh(self, names: tuple[str, ...], shape: tuple[int, ...]) -> Any:
        return build_mesh(self.device.type, names, shape)

    def tensor_parallel(self, model: Any, plan: Mapping[str, Any], mesh: Any = None) -> Any:
        """Split ``model``'s layers across ranks as ``plan`` says (``parallelize_module``), in place.

        ``plan`` maps module paths (``*`` matches any child name) to ``ColwiseParallel()``,
        ``RowwiseParallel()``, ``SequenceParallel()`` and the like; ``gg.mlp_plan`` and
        ``gg.attention_plan`` give ready ones, which combine with ``|``. ``mesh`` is a 1-D mesh or one
        with a ``tp`` dimension (``gg.mesh(dp=2, tp=2)``); by default every rank is one tensor-parallel
        group. A path the model lacks is a ``ValueError`` naming the modules it has.

        >>> plan = gg.attention_plan(prefix="blocks.*.attn") | gg.mlp_plan("fc1", "fc2", prefix="blocks.*.mlp")  # doctest: +SKIP
        >>> model = gg.tensor_parallel(model, plan, mesh=gg.mesh(dp=2, tp=2))  # doctest: +SKIP
        """
        model = model.to(self.device)
        if mesh is None:
            if not _distributed():
                check_plan(model, plan)
                return model
            mesh = self._mesh(("tp",), (self.world_size,))
        return apply_tensor_parallel(model, plan, mesh)

    @staticmethod
    def mlp_plan(
        up: str | Sequence[str] = "up_proj",
        down: str = "down_proj",
        *,
        prefix: str = "",
        sequence_parallel: bool = False,
    ) -> dict[str, Any]:
        """A ready tensor-parallel plan for an MLP (:func:`gpugeek_jupyter.jobs.parallel.mlp_plan`)."""
        return mlp_plan(up, down, prefix=prefix, sequence_parallel=sequence_parallel)

    @staticmethod
    def attention_plan(
        q: str = "q_proj",
        k: str = "k_proj",
        v: str = "v_proj",
        out: str = "o_proj",
        *,
        prefix: str = "",
        sequence_parallel: bool = False,
    ) -> dict[str, Any]:
        """A ready tensor-parallel plan for attention (:func:`gpugeek_jupyter.jobs.parallel.attention_plan`)."""
        return attention_plan(q, k, v, out, prefix=prefix, sequence_parallel=sequence_parallel)

    @staticmethod
    def norm_plan(*names: str) -> dict[str, Any]:
        """``SequenceParallel`` for these norms (:func:`gpugeek_jupyter.jobs.parallel.norm_plan`)."""
        return norm_plan(*names)

    def pipeline(
        self,
        model: Any,
        split_points: Sequence[str],
        microbatches: int = 4,
        schedule: str = "1f1b",
        loss_fn: Callable[..., Any] | None = None,
        mesh: Any = None,
        example: Any = None,
    ) -> Pipeline:
        """This rank's stage of ``model`` cut before each of ``split_points``, with its schedule
        (``torch.distributed.pipelining``: ``ScheduleGPipe`` or ``Schedule1F1B``).

        One stage per rank of ``mesh`` (a 1-D mesh, e.g. ``gg.mesh(pp=2, dp=2)["pp"]``; by default
        every rank). An ``nn.Sequential`` is cut between its children (``split_points=["2"]``); another
        model is traced (``torch.distributed.pipelining.pipeline``), which needs ``example``, a batch
        of its input. ``pipe.step(x, target=y)`` returns the loss on the last stage and ``None`` on
        the others, so a cell ending with it returns the loss from the last stage's rank.

        >>> pipe = gg.pipeline(model, split_points=["2"], microbatches=4, loss_fn=F.mse_loss)  # doctest: +SKIP
        >>> opt = torch.optim.SGD(pipe.parameters(), lr=0.1)   # this stage's parameters  # doctest: +SKIP
        >>> loss = pipe.step(x, target=y); opt.step(); opt.zero_grad()  # doctest: +SKIP
        """
        examples = None if example is None else (example if isinstance(example, tuple) else (example,))
        if not _distributed():
            _check_pipeline_arguments(model, split_points, microbatches, schedule, examples)
            return Pipeline(model.to(self.device), microbatches=microbatches, loss_fn=loss_fn)
        group = None
        if mesh is not None:
            if mesh.ndim != 1:
                raise ValueError(
                    f"gg.pipeline needs a 1-D mesh, got one with dimensions {mesh.mesh_dim_names!r} (e.g. mesh=mesh['pp'])"
                )
            group = mesh.get_group()
        return build_pipeline(
            model,
            split_points,
            microbatches=microbatches,
            schedule=schedule,
            loss_fn=loss_fn,
            device=self.device,
            group=group,
            example=examples,
        )

    def grad_checkpoint(self, module: Any) -> Any:
        """Recompute ``module``'s activations in the backward pass instead of storing them (in place)."""
        from torch.utils.checkpoint import checkpoint

        forward = module.forward

        def checkpointed_forward(*args: Any, **kwargs: Any) -> Any:
            return checkpoint(forward, *args, use_reentrant=False, **kwargs)

        module.forward = checkpointed_forward
        return module

    # -- data --------------------------------------------------------------------------------------
    def shard(
        self,
        dataset: Any,
        batch_size: int = 64,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        epoch: int = 0,
        mesh: Any = None,
        **loader_options: Any,
    ) -> ShardLoader:
        """A ``DataLoader`` over this rank's shard only (a ``DistributedSampler``).

        ``dataset`` is a torch ``Dataset`` or a tuple of tensors (``(x, y)``). Pass ``epoch`` (or call
        ``loader.set_epoch(e)``) to reshuffle differently each epoch, the same way on every rank.
        ``loader.state_dict()`` is the epoch and how far all ranks have read; ``gg.checkpoint(...,
        loader=loader)`` resumes it there, at any world size.

        With tensor parallelism the ranks of a ``tp`` group must see the same batch: pass the mesh
        (``mesh=mesh``, or ``mesh["dp"]``) and the dataset is split over its ``dp`` dimension only.
        """
        from .shard_loader import ShardLoader

        replicas, index = self.world_size, self.rank
        if mesh is not None:
            replicas, index = data_coordinates(mesh)
        return ShardLoader(
            dataset,
            batch_size=batch_size,
            num_replicas=replicas,
            rank=index,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            epoch=epoch,
            **loader_options,
        )

    # -- lineage -----------------------------------------------------------------------------------
    def dataset(self, path_or_url: str | os.PathLike[str]) -> str:
        """Record that this job reads ``path_or_url`` (a file, a folder or an fsspec URL) and return
        it to read: its fingerprint (size, a content hash, or the store's ETag or version) is kept
        with the job, so ``%gpugeek_lineage`` traces a checkpoint back to the data it was trained on.

        >>> frame = pandas.read_csv(gg.dataset("/data/train.csv"))       # doctest: +SKIP
        """
        from .lineage import dataset

        # one fingerprint per host: its ranks read the same path, and hashing it once is enough
        return dataset(path_or_url, record_it=self.local_rank == 0)

    # -- checkpoints -------------------------------------------------------------------------------
    def checkpoint(
        self,
        directory: str | os.PathLike[str] | None = None,
        model: Any = None,
        optimizer: Any = None,
        keep: int = 3,
        *,
        sharded: bool = False,
        asynchronous: bool = False,
        loader: Any = None,
    ) -> Checkpoint | ShardedCheckpoint:
        """Checkpoints of ``model``/``optimizer``/step in ``directory``, resumed from the newest now.

        Every rank must call it (and ``save``) at the same point; the directory must be visible to
        every rank: one machine, a shared filesystem, or an fsspec URL such as ``s3://bucket/run``
        (see :mod:`.checkpoint_dir`). By default rank 0 writes one file
        (``step-<n>.pt``; an FSDP model is gathered to it). ``sharded=True`` writes each rank's own
        shards with ``torch.distributed.checkpoint`` (``step-<n>/``), which load at another world
        size or mesh; ``asynchronous=True`` (sharded only) writes them in the background while
        training goes on. ``loader`` (from ``gg.shard``) resumes its epoch and position too.

        Without ``directory``, a scheduled run's own folder (``GPUGEEK_CHECKPOINT_DIR``: with
        ``resume="latest"``, the one every run of its schedule shares), so ``gg.checkpoint(model=model)``
        continues where the schedule's previous run stopped.
        """
        if directory is None:
            directory = os.environ.get(SCHEDULED_CHECKPOINT_DIR) or None
            if directory is None:
                raise ValueError(
                    f"gg.checkpoint needs a directory every rank sees outside a scheduled run (only those have "
                    f"{SCHEDULED_CHECKPOINT_DIR}), e.g. gg.checkpoint('/shared/ckpts', model=model)"
                )
        if asynchronous and not sharded:
            raise ValueError(
                "asynchronous=True needs sharded=True: the rank-0 checkpoint is written in place "
                "(e.g. gg.checkpoint(directory, model=model, sharded=True, asynchronous=True))"
            )
        ckpt: Checkpoint | ShardedCheckpoint
        if sharded:
            ckpt = ShardedCheckpoint(
                directory,
                model=model,
                optimizer=optimizer,
                keep=keep,
                rank=self.rank,
                asynchronous=asynchronous,
                loader=loader,
            )
        else:
            ckpt = Checkpoint(directory, model=model, optimizer=optimizer, keep=keep, rank=self.rank, loader=loader)
        ckpt.load()
        return ckpt


SCHEDULED_CHECKPOINT_DIR = "GPUGEEK_CHECKPOINT_DIR"  # set by the agent in each scheduled run (schedules/)


class Checkpoint(CheckpointBase):
    """Atomic checkpoints: ``step-<n>.pt`` written by rank 0 under a temporary name, then renamed
    (see :mod:`.checkpoint_dir`); ``step`` is where to continue, ``extra`` what ``save`` was given."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        model: Any = None,
        optimizer: Any = None,
        keep: int = 3,
        rank: int = 0,
        loader: Any = None,
    ) -> None:
        super().__init__(
            directory, sharded=False, model=model, optimizer=optimizer, keep=keep, rank=rank, loader=loader
        )
        self._remove_unfinished()

    def __repr__(self) -> str:
        return f"<Checkpoint {self.store.location!r} step={self.step}>"

    def load(self) -> int:
        """Load the newest checkpoint into the model and optimizer; the step to continue from."""
        import torch

        name = self._agree(self.store.newest())  # rank 0 decides, so every rank loads the same one
        if name is None:
            return self.step
        path = self.store.path(name)
        with self.store.open_file(name) as f:
            state = torch.load(f, map_location="cpu", weights_only=True)
        _load_states(self.model, self.optimizer, state)
        self.step = int(state.get("step", 0))
        self.extra = dict(state.get("extra", {}))
        if self.loader is not None and state.get("loader") is not None:
            self.loader.load_state_dict(state["loader"])
        self.path = path
        log.info("resumed from %s (step %d)", path, self.step)
        _record_checkpoint("resumed_from", path, self.step)
        return self.step

    def save(self, step: int, **extra: Any) -> CheckpointPath:
        """Save model, optimizer, ``step`` and ``extra`` as ``step-<step>.pt``; every rank must call it."""
        import torch

        state = _collect_states(self.model, self.optimizer)
        state.update(step=int(step), extra=extra)
        if self.loader is not None:
            state["loader"] = self.loader.state_dict()
        final = self.store.path(self.store.name_of(step))
        if self.rank == 0:
            self.store.write_file(step, lambda f: torch.save(state, f))  # its name is only ever whole
            self.store.prune(self.keep)
            _record_checkpoint("output", final, step)
        if _distributed():
            import torch.distributed as dist

            dist.barrier()  # nobody runs ahead of a checkpoint that is not on disk yet
        self.step, self.extra, self.path = int(step), extra, final
        return final

    def wait(self) -> CheckpointPath | None:
        """Nothing to wait for: ``save`` writes in place (as the sharded checkpoint's ``wait``, so code can switch)."""
        return None


def _record_checkpoint(role: str, path: CheckpointPath, step: int) -> None:
    """Lineage: the job resumed from (``resumed_from``) or wrote (``output``) checkpoint ``path``."""
    from .lineage import checkpoint_facts, record

    record(role, path, checkpoint_facts(path, step))


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _default_units(model: Any) -> list[Any]:
    """FSDP units: the children with parameters, looking into containers that have no forward."""
    import torch

    units = []
    for child in model.children():
        if not any(True for _ in child.parameters()):
            continue
        if isinstance(child, torch.nn.ModuleList | torch.nn.ModuleDict):
            units.extend(_default_units(child))
        else:
            units.append(child)
    return units


def _is_fsdp(model: Any) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _unwrapped(model: Any) -> Any:
    from torch.nn.parallel import DistributedDataParallel

    return model.module if isinstance(model, DistributedDataParallel) else model


def _collect_states(model: Any, optimizer: Any) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if model is not None and _is_fsdp(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)  # gathered on rank 0
        optimizers = [optimizer] if optimizer is not None else []
        state["model"], optim_state = get_state_dict(model, optimizers, options=options)
        if optimizer is not None:
            state["optimizer"] = optim_state
        return state
    if model is not None:
        state["model"] = _unwrapped(model).state_dict()
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    return state


def _load_states(model: Any, optimizer: Any, state: dict[str, Any]) -> None:
    if model is not None and _is_fsdp(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        optimizers = [optimizer] if optimizer is not None else []
        set_state_dict(
            model,
            optimizers,
            model_state_dict=state.get("model", {}),
            optim_state_dict=state.get("optimizer", {}) if optimizer is not None else {},
            options=StateDictOptions(full_state_dict=True),
        )
        return
    if model is not None and "model" in state:
        _unwrapped(model).load_state_dict(state["model"])
    if optimizer is not None and "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
