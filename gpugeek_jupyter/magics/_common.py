"""Shared pieces of the magics: errors phrased for a magic (flags, not keywords) and the owner
identity of this kernel."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from ..errors import GpugeekError, SpecError, Surface

# keyword -> flag where a magic's flag is not "--" + the keyword with '-' for '_' ("" = positional).
# Options are named as the Python keywords and JSON fields are (tests/core/test_vocabulary.py), so
# only these two differ: a variable to store into, and a script's own arguments.
FLAGS: dict[str, str] = {
    "out": "-o",  # %%gpugeek_run -o losses, %gpugeek_cost -o report
    "args": "--",  # %gpugeek_run --script-path train.py -- --lr 3e-5
}

# the positional form of --pool (%gpugeek_stop dev == %gpugeek_stop --pool dev)
POOL_POSITIONAL = "pool_name"


def pool_arguments(what: str, positional: bool = True) -> Callable[[Any], Any]:
    """The pool a magic acts on, the same way in every magic: ``--pool NAME``, or NAME as a plain
    word where that reads naturally (``%gpugeek_stop dev``); ``what`` ends the help text."""

    def decorate(magic: Any) -> Any:
        if positional:
            magic = argument(POOL_POSITIONAL, nargs="?", default=None, metavar="NAME", help="same as --pool NAME")(
                magic
            )
        return argument("--pool", default=None, metavar="NAME", help=f"name of the pool {what}")(magic)

    return decorate


def chosen_pool(args: Any, magic: str, example: str) -> str | None:
    """The pool named by ``--pool NAME`` or the NAME word (None: neither); naming two is an error."""
    word, flag = getattr(args, POOL_POSITIONAL, None), args.pool
    if word is not None and flag is not None and word != flag:
        raise UsageError(f"two pools named, {word!r} and --pool {flag!r}: name one (e.g. %{magic} {example})")
    return flag if flag is not None else word


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


PARSED_LINES_KEPT = 64  # a notebook runs the same few option lines again and again

_parsed: dict[tuple[Any, str], argparse.Namespace] = {}  # (parser, line) -> its options, newest last
_parsed_lock = threading.Lock()


def parse_options(magic: Any, line: str, example: str) -> Any:
    """Parse a magic's line like a shell would (quotes removed); bad options are a one-line UsageError.

    A line parsed before is not parsed again (argparse and shlex cost ~50 µs, on every cell's way
    to its ranks): the caller gets its own copy of the options, lists included."""
    key = (magic.parser, line)
    with _parsed_lock:
        known = _parsed.pop(key, None)
        if known is not None:
            _parsed[key] = known  # the newest again
    if known is None:
        known = _parse(magic, line, example)
        with _parsed_lock:
            _parsed[key] = known
            while len(_parsed) > PARSED_LINES_KEPT:
                del _parsed[next(iter(_parsed))]
    return argparse.Namespace(**{k: list(v) if isinstance(v, list) else v for k, v in vars(known).items()})


def _parse(magic: Any, line: str, example: str) -> argparse.Namespace:
    try:
        words = shlex.split(line)
    except ValueError as e:
        raise UsageError(f"cannot parse options {line!r}: {e} (e.g. {example})") from None
    try:
        return magic.parser.parse_args(words)  # type: ignore[no-any-return]
    except UsageError as e:
        name = magic.__name__
        raise UsageError(f"{e} (see %{name}? for the options; e.g. %{name} {example})") from None


def option_number(text: str | None, field: str, example: float, integer: bool = False) -> Any:
    """The number an option was given (``None`` when it was not): an int when written as one, so that
    a check further on names it as typed (``-3``, not ``-3.0``); ``integer``: only a whole number."""
    if text is None:
        return None
    try:
        return int(str(text))
    except ValueError:
        if integer:
            raise SpecError(field=field, value=text, rule="a whole number", example=example) from None
    try:
        return float(str(text))
    except ValueError:
        raise SpecError(field=field, value=text, rule="a number", example=example) from None


def local_time(timestamp: float, seconds: bool = True) -> str:
    """A registry or ledger time as the notebook's local date and time (``2026-12-05 14:02:07``)."""
    import datetime as dt

    return dt.datetime.fromtimestamp(float(timestamp)).strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def kernel_owner() -> str:
    """'kernel <id>' when running in a Jupyter kernel, else 'pid <pid>'."""
    try:
        from ipykernel import get_connection_file

        stem = Path(get_connection_file()).stem  # kernel-<id>
        return "kernel " + stem.removeprefix("kernel-")
    except Exception:
        return f"pid {os.getpid()}"
