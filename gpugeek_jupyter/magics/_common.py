"""Shared pieces of the magics: errors phrased for a magic (flags, not keywords) and the owner
identity of this kernel."""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError

from ..errors import GpugeekError, Surface

# keyword -> flag where a magic's flag is not "--" + the keyword with '-' for '_' ("" = positional)
FLAGS: dict[str, str] = {
    "base_pricing": "--pricing",  # %gpugeek_launch
    "script_path": "--script",  # %gpugeek_run
    "args": "--",  # %gpugeek_run --script train.py -- --lr 3e-5
    "output": "-o",
    "job_id": "--job",  # %gpugeek_cost
    "all_pools": "--all",
    "cloud_usd_per_gpu_hour": "--price",  # %gpugeek_cost --compare-owned
    "purchase_usd": "--purchase",
    "power_watts": "--watts",
    "power_usd_per_kwh": "--kwh-price",
    "overhead_usd_per_month": "--overhead",
    "amortization_months": "--amortization",
}


def magic_message(error: BaseException, flags: Mapping[str, str] | None = None) -> str:
    """``error`` as a magic user reads it: flags (``--count 4``) and magics (``%gpugeek_stop dev``)."""
    if isinstance(error, GpugeekError):
        return error.phrase(Surface.MAGIC, {**FLAGS, **(flags or {})})
    return str(error)


@contextlib.contextmanager
def usage_errors(flags: Mapping[str, str] | None = None) -> Iterator[None]:
    """Turn user-caused errors into a one-line ``UsageError`` (no traceback in the notebook), phrased
    for a magic; ``flags`` adds this magic's own keyword -> flag names to :data:`FLAGS`.

    Example: ``PoolSpec.create(count="0")`` inside gives
    ``UsageError: --count must be a whole number from 1 to 1024, got '0' (e.g. --count 4)``.
    """
    try:
        yield
    except GpugeekError as e:
        raise UsageError(magic_message(e, flags)) from None


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
