"""``torch.distributed.init_process_group`` as a cell on the ranks sees it.

A cell starts with the pool's process group up, kept warm from cell to cell; a torchrun script
builds its own. Code pasted from a script calls ``dist.init_process_group("gloo")`` first, which torch
refuses when a group is up ("trying to initialize the default process group twice"). While a cell
runs on a rank thread, the call is therefore taken as asking for the group the cell already has:

- the group is up and runs the backend asked for (or none is named): the call keeps it and returns,
  as torchrun's ranks would find it just made; its other arguments (``timeout``, ``init_method``, ...)
  applied when the group was built, so they are left as they were;
- the group is up on another backend: an error naming both, with the ways that work
  (``dist.new_group(backend=...)`` makes a second group over the same ranks);
- the cell destroyed the group earlier (``dist.destroy_process_group()``): the call builds it again,
  together on every rank, on the backend asked for; ``rank`` and ``world_size``, when given, must be
  the rank's own.

A group the cell destroys (``dist.destroy_process_group()``, a script's last line) is held until
the next cell starts, and freed then (see ``_destroyed``). Outside a cell (a script, the worker's own
code) both calls are torch's, untouched.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

Rebuild = Callable[[str | None, dict[str, Any]], None]  # (backend or None, torch's other arguments)

_cell = threading.local()  # .rebuild: the running cell's way to build its group again, on its rank thread
_installed: list[Callable[..., Any]] = []  # torch's own function, once the cell's is in place
# the groups cells destroyed, held until the next cell starts: a gloo group freed right after its last
# collective (a script's DDP model going out of scope after destroy_process_group) can freeze the
# worker, its destructor holding the GIL while it waits for its own thread, which needs the GIL to
# drop what that collective left; by the next cell that thread is long done
_destroyed: list[Any] = []


def install() -> None:
    """Put the cell's ``init_process_group`` and ``destroy_process_group`` in ``torch.distributed``
    (once per worker process)."""
    if _installed:
        return
    import torch.distributed as dist

    torchs = dist.init_process_group
    _installed.append(torchs)

    @functools.wraps(torchs)
    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        rebuild: Rebuild | None = getattr(_cell, "rebuild", None)
        if rebuild is None:
            return torchs(backend, *args, **kwargs)
        return _in_a_cell(rebuild, backend, args, kwargs)

    torchs_destroy = dist.destroy_process_group

    @functools.wraps(torchs_destroy)
    def destroy_process_group(group: Any = None) -> None:
        if getattr(_cell, "rebuild", None) is not None:
            _destroyed.extend(_groups(group))
        torchs_destroy(group)

    dist.init_process_group = init_process_group
    dist.destroy_process_group = destroy_process_group


def _groups(group: Any) -> list[Any]:
    """The process groups ``destroy_process_group(group)`` ends: ``None``, every one."""
    import torch.distributed.distributed_c10d as c10d

    world: Any = c10d._world
    return list(world.pg_map) if group is None else [group]


def torch_init_process_group() -> Callable[..., Any]:
    """torch's own ``init_process_group`` (for the rank's own builds of the group)."""
    import torch.distributed as dist

    return _installed[0] if _installed else dist.init_process_group


@contextlib.contextmanager
def in_cell(rebuild: Rebuild) -> Iterator[None]:
    """While a cell's code runs on this thread, ``dist.init_process_group`` means the cell's group;
    the groups earlier cells destroyed are let go first."""
    _destroyed.clear()
    _cell.rebuild = rebuild
    try:
        yield
    finally:
        _cell.rebuild = None


_PARAMETERS = ("init_method", "timeout", "world_size", "rank", "store", "group_name", "pg_options", "device_id")


def _in_a_cell(rebuild: Rebuild, backend: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    import torch.distributed as dist

    arguments = dict(zip(_PARAMETERS, args, strict=False)) | kwargs  # as torch takes them, by position too
    asked = None if backend is None else str(backend)
    if not dist.is_initialized():
        _check_place(arguments, dist)
        rebuild(asked, {k: v for k, v in arguments.items() if k in ("timeout", "pg_options", "device_id")})
        return
    have = str(dist.get_backend())
    if asked is not None and not _backends(asked) <= _backends(have):
        raise ValueError(
            f"init_process_group({asked!r}) in a cell: this pool's process group is already up on {have!r} "
            f"(a cell starts with it); leave the call out, or make a second group over the same ranks, "
            f"e.g. dist.new_group(backend={asked!r})"
        )
    _check_place(arguments, dist)


def _check_place(arguments: dict[str, Any], dist: Any) -> None:
    """``rank`` and ``world_size``, when the call names them, must be this rank's (torchrun's)."""
    import os

    own = {"rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"])}
    for name, value in own.items():
        given = arguments.get(name, -1)
        if given not in (-1, None, value):
            raise ValueError(
                f"init_process_group({name}={given!r}) in a cell: this rank is rank {own['rank']} of "
                f"{own['world_size']} (the pool's ranks, torchrun's RANK and WORLD_SIZE); leave {name} out, "
                f"or pass {name}={value}"
            )


def _backends(name: str) -> set[str]:
    """The backends a name asks for: ``"gloo"``, ``"cpu:gloo,cuda:nccl"`` -> ``{"gloo", "nccl"}``."""
    return {part.rsplit(":", 1)[-1].strip().lower() for part in name.split(",") if part.strip()}
