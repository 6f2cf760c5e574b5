"""What a failed or stuck rank tells the user: its traceback without our frames, where it waits."""

from __future__ import annotations

import linecache
import os
import sys
import traceback
import types
from collections.abc import Iterator
from typing import Any

_PEER_FAILURE_MARKS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "NCCL communicator was aborted",
    "ProcessGroup abort",
)


def is_peer_failure(e: BaseException) -> bool:
    """The error only says that another rank went away (its sockets closed)."""
    text = str(e)
    return isinstance(e, RuntimeError | ConnectionError | OSError) and any(m in text for m in _PEER_FAILURE_MARKS)


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def format_user_traceback(e: BaseException) -> str:
    """The traceback from the user's first frame on: the runner's own frames are dropped."""
    te = traceback.TracebackException.from_exception(e)
    for part in _chain(te):
        frames = list(part.stack)
        for i, frame in enumerate(frames):
            if not _is_framework_file(frame.filename):
                part.stack = traceback.StackSummary.from_list(frames[i:])
                break
    return "".join(te.format())


def _chain(te: traceback.TracebackException) -> Iterator[traceback.TracebackException]:
    seen: set[int] = set()
    stack = [te]
    while stack:
        part = stack.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        yield part
        stack.extend(p for p in (part.__cause__, part.__context__) if p is not None)


_FRAMEWORK_FILES = tuple(os.path.join("gpugeek_jupyter", "jobs", f) for f in ("rank.py", "capture.py", "diagnose.py"))


def _is_framework_file(filename: str) -> bool:
    return filename.endswith(_FRAMEWORK_FILES)


_COLLECTIVE_FILES = (
    os.path.join("torch", "distributed", "distributed_c10d.py"),
    os.path.join("torch", "distributed", "c10d_logger.py"),
)


def describe_stack(frame: types.FrameType | None, user_filename: str) -> dict[str, Any]:
    """Where a thread is: ``{"collective": "dist.barrier()" | None, "at": "line 3: time.sleep(60)"}``,
    and for a torch.distributed call whose group is known, ``"peers"``: the global ranks it needs."""
    frames = []
    while frame is not None:  # innermost first
        frames.append(frame)
        frame = frame.f_back
    collective, peers = None, None
    for f in frames:  # the outermost public torch.distributed function wins
        name, filename = f.f_code.co_name, f.f_code.co_filename
        if filename.endswith(_COLLECTIVE_FILES) and not name.startswith("_") and name != "wrapper":
            collective, peers = f"dist.{name}()", _peers(name, f.f_locals)
        elif filename.endswith(_BACKWARD_FILE) and name == "_engine_run_backward" and collective is None:
            collective = "backward() (gradient all-reduce)"  # which group (if any) is not known here
    at = None
    for f in frames:
        filename = f.f_code.co_filename
        if filename == user_filename or not _is_library_file(filename):
            line = linecache.getline(filename, f.f_lineno).strip()
            where = "line" if filename == user_filename else f"{filename}, line"
            at = f"{where} {f.f_lineno}" + (f": {line}" if line else "")
            break
    described: dict[str, Any] = {"collective": collective, "at": at}
    if peers is not None:
        described["peers"] = peers
    return described


def _peers(function: str, arguments: dict[str, Any]) -> list[int] | None:
    """The global ranks a torch.distributed call waits for: its group's (the world's when none is
    given), the one peer of a point-to-point receive or send; None when that cannot be told."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if function in ("send", "recv"):
            peer = arguments.get("dst" if function == "send" else "src")
            return [int(peer)] if isinstance(peer, int) and arguments.get("group") is None else None
        group = arguments.get("group")
        if group is None or group is dist.GroupMember.WORLD:
            return list(range(dist.get_world_size()))
        return [int(r) for r in dist.get_process_group_ranks(group)]
    except Exception:  # a group torch no longer knows, or no group at all: say nothing
        return None


_BACKWARD_FILE = os.path.join("torch", "autograd", "graph.py")


def _is_library_file(filename: str) -> bool:
    return (
        _is_framework_file(filename)
        or "site-packages" in filename
        or filename.startswith((sys.prefix, sys.base_prefix))
        or filename.startswith("<frozen")
    )
