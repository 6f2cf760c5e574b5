"""Sharded checkpoints (``gg.checkpoint(..., sharded=True)``) over ``torch.distributed.checkpoint``.

Every rank writes its own shards of the model and optimizer (DTensors of FSDP and tensor
parallelism, or its share of replicated tensors) into one directory per step; no rank gathers the
whole model. A checkpoint loads at another world size or mesh: DCP reads, for each rank, the pieces
of the saved shards that its new shards cover (save on 4 ranks, resume on 2, or on 2 x 2 after 4 x 1).

Layout: ``<dir>/step-<n>/`` holds DCP's ``.metadata`` and a ``__<rank>_0.distcp`` file per writing
rank; an interrupted save is never taken for a whole one (see :mod:`.checkpoint_dir`).

The location must be one that every rank sees: a local directory when the pool is on one machine,
else a shared filesystem (NFS, a Kubernetes ``ReadWriteMany`` PVC mounted at the same path in every
worker pod), or an fsspec URL (``s3://bucket/run``; the worker image needs the filesystem's
package, e.g. ``s3fs``, and its credentials).

With ``asynchronous=True``, ``save`` returns once the state is copied to CPU memory and the files are
written by a background thread (``dcp.async_save``) over a gloo group of its own, so training's
collectives and the checkpoint's never share a group; ``wait()`` (also called by the next ``save``
and by a new ``gg.checkpoint`` on the same directory) waits for it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
import uuid
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

from .checkpoint_dir import CheckpointBase, CheckpointPath
from .lineage import checkpoint_facts, record

log = logging.getLogger(__name__)

# One gloo group per process group for checkpoint traffic (see the module docstring).
_GROUPS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
# Saves still being written in the background, per directory, so that a new Checkpoint on the same
# directory (a cell run again) waits for them before it looks for the newest or tidies up.
_IN_FLIGHT: dict[str, list[ShardedCheckpoint]] = {}


class ShardedCheckpoint(CheckpointBase):
    """Sharded, resharding checkpoints of ``model``/``optimizer``/step (and ``loader``'s position).

    ``step`` is where to continue (0 when the directory has none); ``extra`` holds what ``save`` was
    given besides the step. Every rank must create it, ``load`` and ``save`` at the same points.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        model: Any = None,
        optimizer: Any = None,
        keep: int = 3,
        rank: int = 0,
        asynchronous: bool = False,
        loader: Any = None,
    ) -> None:
        super().__init__(directory, sharded=True, model=model, optimizer=optimizer, keep=keep, rank=rank, loader=loader)
        self.asynchronous = asynchronous
        self._pending: _PendingSave | None = None
        for earlier in list(_IN_FLIGHT.get(self.store.key, ())):
            earlier.wait()
        self._remove_unfinished()

    def __repr__(self) -> str:
        pending = ", saving" if self._pending is not None else ""
        return f"<ShardedCheckpoint {self.store.location!r} step={self.step}{pending}>"

    # -- loading ---------------------------------------------------------------------------------
    def load(self) -> int:
        """Load the newest checkpoint into the model, optimizer and loader; the step to continue from."""
        import torch
        import torch.distributed.checkpoint as dcp

        name = self._agree(self.store.newest())  # rank 0 decides, so every rank loads the same one
        if name is None:
            return self.step
        path = self.store.path(name)
        state = self._state(for_loading=True)
        group = checkpoint_group()
        with _one_process_quietly(group):
            dcp.load(state, checkpoint_id=str(path), process_group=group, no_dist=group is None)
        self._apply(state)
        meta = torch.load(io.BytesIO(state["meta"]), map_location="cpu", weights_only=True)
        self.step = int(meta.get("step", 0))
        self.extra = dict(meta.get("extra", {}))
        if self.loader is not None and meta.get("loader") is not None:
            self.loader.load_state_dict(meta["loader"])
        self.path = path
        log.info("resumed from %s (step %d)", path, self.step)
        record("resumed_from", path, checkpoint_facts(path, self.step))
        return self.step

    # -- saving ----------------------------------------------------------------------------------
    def save(self, step: int, asynchronous: bool | None = None, **extra: Any) -> CheckpointPath:
        """Save as ``step-<step>/``; every rank must call it. Returns the directory it will have.

        ``asynchronous`` (default: the checkpoint's) returns once the state is staged in memory; the
        checkpoint is whole, under its name, when ``wait()`` returns.
        """
        import torch.distributed.checkpoint as dcp

        self.wait()  # one save in flight at a time, in order
        background = self.asynchronous if asynchronous is None else asynchronous
        token = uuid.uuid4().hex[:12]
        if self.rank == 0:
            self.store.make()
            self.store.clear_for(step)
        token = self._agree(token)  # the same staging directory on every rank, once rank 0 has made room
        staging = self.store.staging(step, token)
        final = self.store.path(self.store.name_of(step))
        partial = str(self.store.path(staging))  # where DCP writes; a URL goes through its fsspec storage
        state = self._state(for_loading=False, step=step, extra=extra)
        group = checkpoint_group()
        pending = _PendingSave(self, staging, int(step), token)
        if background:
            future = dcp.async_save(state, checkpoint_id=partial, process_group=group, no_dist=group is None)
            pending.future = getattr(future, "upload_completion", future)  # an AsyncSaveResponse or a Future
            self._pending = pending
            _IN_FLIGHT.setdefault(self.store.key, []).append(self)
            if self.rank == 0:
                pending.future.add_done_callback(lambda done: pending.finish(done.exception()))
        else:
            with _one_process_quietly(group):
                dcp.save(state, checkpoint_id=partial, process_group=group, no_dist=group is None)
            if self.rank == 0:
                pending.finish(None)
            _barrier(group)  # nobody looks for the newest before it has its name
        self.step, self.extra, self.path = int(step), extra, final
        return final

    def wait(self) -> CheckpointPath | None:
        """Wait for a save still being written; the checkpoint it made (``None`` if none was pending).

        Raises what the background save raised. Every rank must call it.
        """
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        with contextlib.suppress(ValueError):
            _IN_FLIGHT.get(self.store.key, []).remove(self)
        error = None
        try:
            assert pending.future is not None
            pending.future.result()
        except BaseException as e:
            error = e
        if self.rank == 0:
            pending.finish(error)
        _barrier(checkpoint_group())
        if error is not None:
            raise RuntimeError(f"the checkpoint of step {pending.step} could not be written: {error}") from error
        return self.store.path(self.store.name_of(pending.step))

    # -- state -----------------------------------------------------------------------------------
    def _state(self, for_loading: bool, step: int = 0, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        import torch
        from torch.distributed.checkpoint.state_dict import get_state_dict

        state: dict[str, Any] = {}
        if self.model is not None:
            optimizers = [self.optimizer] if self.optimizer is not None else []
            model_state, optim_state = get_state_dict(self.model, optimizers)
            state["model"] = model_state
            if self.optimizer is not None:
                state["optimizer"] = optim_state
        if for_loading:
            state["meta"] = b""
        else:
            meta = {"step": int(step), "extra": extra or {}}
            if self.loader is not None:
                meta["loader"] = self.loader.state_dict()
            buffer = io.BytesIO()
            torch.save(meta, buffer)  # one object: read back with weights_only=True, like the rank-0 checkpoint
            state["meta"] = buffer.getvalue()
        return state

    def _apply(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        if self.model is None:
            return
        optimizers = [self.optimizer] if self.optimizer is not None else []
        set_state_dict(
            self.model,
            optimizers,
            model_state_dict=state["model"],
            optim_state_dict=state.get("optimizer", {}) if self.optimizer is not None else {},
        )


class _PendingSave:
    """One save on its way: rank 0 makes it whole (its name, see :mod:`.checkpoint_dir`) when DCP is done."""

    def __init__(self, owner: ShardedCheckpoint, staging: str, step: int, token: str) -> None:
        self.owner = owner
        self.staging = staging
        self.step = step
        self.token = token
        self.future: Any = None
        self._lock = threading.Lock()
        self._finished = False

    def finish(self, error: BaseException | None) -> None:
        """Rename (or, after ``error``, remove) the partial directory; once, from whichever thread is first."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            store = self.owner.store
            if error is None and store.commit(self.staging, self.step, self.token):
                store.prune(self.owner.keep)
                # lineage (kept when the job still runs: an asynchronous save that ends after the job
                # is on disk but not in the job's record)
                record(
                    "output",
                    store.path(store.name_of(self.step)),
                    checkpoint_facts(store.path(store.name_of(self.step)), self.step),
                )
                return
            store.remove(self.staging)  # what DCP left of it (commit already removed an unfinished one)
            final = store.path(store.name_of(self.step))
            log.warning("the checkpoint %s was not written (%s); the newest whole one stays", final, error)


def checkpoint_group() -> Any:
    """A gloo group over every rank, for DCP (``None`` outside a job: DCP then saves on one process)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    world = dist.group.WORLD
    if world not in _GROUPS:
        _GROUPS[world] = dist.new_group(backend="gloo")
    return _GROUPS[world]


@contextlib.contextmanager
def _one_process_quietly(group: Any) -> Iterator[None]:
    """Without a job, one process is what was meant: DCP's warning that it assumes so says nothing new."""
    with warnings.catch_warnings():
        if group is None:
            warnings.filterwarnings("ignore", message=r"torch\.distributed is .* single process")
        yield


def _barrier(group: Any) -> None:
    if group is not None:
        import torch.distributed as dist

        dist.barrier(group=group)
