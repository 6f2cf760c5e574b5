"""One thread's stack as JSON-ready frames: what a rank answers to ``%gpugeek_where``.

Runs inside a rank on a worker (:func:`.rank.stack_rank` calls it); :mod:`.where` groups the answers
on the driver's side. Kept apart from both so neither imports the other.
"""

from __future__ import annotations

import linecache
import os
import sysconfig
import types
from typing import Any

from .cell import CELL_FILENAME
from .diagnose import _is_library_file

MAX_FRAMES = 64  # innermost frames a rank sends (deep recursion is cut)
CELL_NAME = "cell"  # how the %%gpugeek_run cell's file is shown: cell:3


def stack_frames(frame: types.FrameType | None, user_filename: str) -> list[dict[str, Any]]:
    """The stack from ``frame`` outwards, innermost first: ``file``, its short ``name``, ``line``,
    ``function``, the source ``code`` and whether it is ``user`` code (``user_filename``, the job's
    cell or script, or any file outside the libraries)."""
    frames: list[dict[str, Any]] = []
    while frame is not None and len(frames) < MAX_FRAMES:
        filename, line = frame.f_code.co_filename, frame.f_lineno or 0
        user = filename == user_filename or not _is_library_file(filename)
        frames.append(
            {
                "file": filename,
                "name": _short_name(filename, user),
                "line": line,
                "function": frame.f_code.co_name,
                "code": linecache.getline(filename, line).strip(),
                "user": user,
            }
        )
        frame = frame.f_back
    return frames


def _short_name(filename: str, user: bool) -> str:
    """``cell``, ``train.py`` for user files; a library file from its package: ``torch/nn/modules/module.py``."""
    if filename == CELL_FILENAME:
        return CELL_NAME
    if filename.startswith("<"):
        return filename
    if user:
        return os.path.basename(filename)
    normalized = filename.replace(os.sep, "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in normalized:
            return normalized.rsplit(marker, 1)[1]
    if "/gpugeek_jupyter/" in normalized:
        return "gpugeek_jupyter/" + normalized.rsplit("/gpugeek_jupyter/", 1)[1]
    for root in _library_roots():
        if normalized.startswith(root):
            return normalized[len(root) :]
    return os.path.basename(filename)


def _library_roots() -> list[str]:
    paths = {sysconfig.get_paths().get(key, "") for key in ("stdlib", "platstdlib")}
    return sorted((p.replace(os.sep, "/").rstrip("/") + "/" for p in paths if p), key=len, reverse=True)
