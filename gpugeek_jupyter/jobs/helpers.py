"""``gg``: the helpers a ``%%gpugeek_run`` cell sees, bound to its rank.

>>> model = gg.ddp(Net())                                 # doctest: +SKIP
>>> for x, y in gg.shard(dataset, batch_size=64):         # doctest: +SKIP
...     ...
>>> ckpt = gg.checkpoint("ckpts", model=model, optimizer=opt)   # resumes from the newest  # doctest: +SKIP
>>> for step in range(ckpt.step, 1000):                   # doctest: +SKIP
...     ...; ckpt.save(step + 1)

Outside a job (no process group), the same calls work on one process: ``gg.ddp`` returns the model
unwrapped and ``gg.shard`` gives the whole dataset, so a cell can be tried locally first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

AMP_DTYPES = ("bf16", "fp16")
_CHECKPOINT_NAME = re.compile(r"^step-(\d+)\.pt$")


class Helpers:
    """The ``gg`` object: DDP/FSDP wrapping, sharded loading, activation checkpointing, checkpoints, AMP."""

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

    def fsdp(self, model: Any, shard: tuple[type, ...] | None = None, **fsdp_options: Any) -> Any:
        """Fully sharded data parallel (``torch.distributed.fsdp.fully_shard``) over every rank.

        Parameters, gradients and optimizer state are split across ranks. Submodules of the types in
        ``shard`` (e.g. your transformer block class) become their own units; by default each
        direct child with parameters does, then the whole model.
        """
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        model = model.to(self.device)
        if not _distributed():
            return model
        mesh = init_device_mesh(self.device.type, (self.world_size,))
        if shard:
            units = [m for m in model.modules() if isinstance(m, shard) and m is not model]
        else:
            units = [m for m in model.children() if any(True for _ in m.parameters())]
        for unit in units:
            fully_shard(unit, mesh=mesh, **fsdp_options)  # type: ignore[call-overload]
        return fully_shard(model, mesh=mesh, **fsdp_options)

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
        **loader_options: Any,
    ) -> Any:
        """A ``DataLoader`` over this rank's shard only (``DistributedSampler``).

        ``dataset`` is a torch ``Dataset`` or a tuple of tensors (``(x, y)``). Pass ``epoch`` to
        reshuffle differently each epoch, the same way on every rank.
        """
        import torch
        from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

        if isinstance(dataset, tuple | list) and dataset and all(isinstance(t, torch.Tensor) for t in dataset):
            dataset = TensorDataset(*dataset)
        sampler: DistributedSampler[Any] = DistributedSampler(
            dataset, num_replicas=self.world_size, rank=self.rank, shuffle=shuffle, seed=seed, drop_last=drop_last
        )
        sampler.set_epoch(epoch)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, **loader_options)

    # -- checkpoints -------------------------------------------------------------------------------
    def checkpoint(
        self, directory: str | os.PathLike[str], model: Any = None, optimizer: Any = None, keep: int = 3
    ) -> Checkpoint:
        """Checkpoints of ``model``/``optimizer``/step in ``directory``, resumed from the newest now.

        Every rank must call it (and ``save``) at the same point; the directory must be visible to
        every rank (one machine, or a shared filesystem).
        """
        ckpt = Checkpoint(directory, model=model, optimizer=optimizer, keep=keep, rank=self.rank)
        ckpt.load()
        return ckpt


class Checkpoint:
    """Atomic checkpoints: ``step-<n>.pt`` written by rank 0 to a temporary name, then renamed.

    ``step`` is where to continue (0 when the directory has none); ``extra`` holds what ``save``
    was given besides the step.
    """

    def __init__(
        self, directory: str | os.PathLike[str], model: Any = None, optimizer: Any = None, keep: int = 3, rank: int = 0
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep} (e.g. keep=3)")
        self.directory = Path(directory)
        self.model = model
        self.optimizer = optimizer
        self.keep = keep
        self.rank = rank
        self.step = 0
        self.extra: dict[str, Any] = {}
        self.path: Path | None = None  # the file loaded or saved last

    def __repr__(self) -> str:
        return f"<Checkpoint {str(self.directory)!r} step={self.step}>"

    def newest(self) -> Path | None:
        """The checkpoint with the highest step in the directory (temporary files are ignored)."""
        if not self.directory.is_dir():
            return None
        found = [(int(m.group(1)), p) for p in self.directory.iterdir() if (m := _CHECKPOINT_NAME.match(p.name))]
        return max(found)[1] if found else None

    def load(self) -> int:
        """Load the newest checkpoint into the model and optimizer; the step to continue from."""
        import torch

        newest = self.newest()
        name = _agree(newest.name if newest else None)  # rank 0 decides, so every rank loads the same one
        if name is None:
            return self.step
        path = self.directory / name
        state = torch.load(path, map_location="cpu", weights_only=True)
        _load_states(self.model, self.optimizer, state)
        self.step = int(state.get("step", 0))
        self.extra = dict(state.get("extra", {}))
        self.path = path
        log.info("resumed from %s (step %d)", path, self.step)
        return self.step

    def save(self, step: int, **extra: Any) -> Path:
        """Save model, optimizer, ``step`` and ``extra`` as ``step-<step>.pt``; every rank must call it."""
        import torch

        state = _collect_states(self.model, self.optimizer)
        state.update(step=int(step), extra=extra)
        final = self.directory / f"step-{int(step):09d}.pt"
        if self.rank == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            temporary = final.with_name(f".{final.name}.tmp-{os.getpid()}")
            with open(temporary, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, final)  # readers see the old file or the whole new one
            self._prune()
        if _distributed():
            import torch.distributed as dist

            dist.barrier()  # nobody runs ahead of a checkpoint that is not on disk yet
        self.step, self.extra, self.path = int(step), extra, final
        return final

    def _prune(self) -> None:
        found = sorted((int(m.group(1)), p) for p in self.directory.iterdir() if (m := _CHECKPOINT_NAME.match(p.name)))
        for _, old in found[: -self.keep]:
            with contextlib.suppress(OSError):
                old.unlink()


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _agree(value: Any) -> Any:
    """Rank 0's ``value`` on every rank."""
    if not _distributed():
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


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
