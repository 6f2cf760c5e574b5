"""Shared pieces of the magics: error translation and the owner identity of this kernel."""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError

from ..errors import GpugeekError, SpecError


@contextlib.contextmanager
def usage_errors() -> Iterator[None]:
    """Turn user-caused errors into a one-line ``UsageError`` (no traceback in the notebook)."""
    try:
        yield
    except SpecError as e:
        raise UsageError(str(e)) from None
    except GpugeekError as e:
        raise UsageError(str(e)) from None


def parse_options(magic: Any, line: str, example: str) -> Any:
    """Parse a magic's line like a shell would (quotes removed); bad options are a one-line UsageError."""
    try:
        words = shlex.split(line)
    except ValueError as e:
        raise UsageError(f"cannot parse options {line!r}: {e} (e.g. {example})") from None
    try:
        return magic.parser.parse_args(words)
    except UsageError as e:
        name = magic.__name__
        raise UsageError(f"{e} (see %{name}? for the options; e.g. %{name} {example})") from None


def kernel_owner() -> str:
    """'kernel <id>' when running in a Jupyter kernel, else 'pid <pid>'."""
    try:
        from ipykernel import get_connection_file

        stem = Path(get_connection_file()).stem  # kernel-<id>
        return "kernel " + stem.removeprefix("kernel-")
    except Exception:
        return f"pid {os.getpid()}"
