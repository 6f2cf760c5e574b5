"""Scripts run as under ``torchrun --nproc_per_node=N script.py ARGS``, unchanged.

Each rank runs the script in its worker with torchrun's environment (:mod:`.env`),
``sys.argv == [script_path, *args, *hyperparams as --name value]`` (``True`` the bare ``--name``,
``False`` left out), ``__name__ == "__main__"``, ``__file__`` absolute, the script's folder first
on ``sys.path``, and the working directory of the caller (when the worker can see it).
``SystemExit(0)`` or falling off the end is success; any other exit status, or an exception
(status 1, like the interpreter), fails the job.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import Phrase, SpecError, Value
from .payload import ScriptCode

_HYPERPARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class ScriptProgram:
    code: ScriptCode
    sha256: str
    hyperparams: dict[str, Any]


def hyperparams_to_args(hyperparams: Mapping[str, Any] | None) -> list[str]:
    """``{"batch_size": 256, "lr": 3e-5}`` -> ``["--batch_size", "256", "--lr", "3e-05"]``.

    A list or tuple gives several values (``--layers 2 4``). ``True`` and ``None`` give the bare
    flag (``{"fp16": True}`` -> ``["--fp16"]``, for argparse's ``store_true``) and ``False`` gives
    nothing, so a switch that is off is simply not passed.
    """
    args: list[str] = []
    for name, value in (hyperparams or {}).items():
        if not isinstance(name, str) or not _HYPERPARAM_NAME.match(name):
            raise SpecError(
                Phrase("hyperparameter name {name} must be {rule} (e.g. {example})", name=Value(name)),
                field="hyperparams",
                value=hyperparams,
                rule="letters, digits, '_', '-' or '.'",
                example={"batch_size": 256},
            )
        if value is False:
            continue
        args.append(f"--{name}")
        if value is None or value is True:
            continue
        if isinstance(value, list | tuple):
            args.extend(str(v) for v in value)
        else:
            args.append(str(value))
    return args


def prepare_script(
    script_path: str | os.PathLike[str],
    args: Sequence[str] = (),
    hyperparams: Mapping[str, Any] | None = None,
    cwd: str | None = None,
) -> ScriptProgram:
    """Read the script and build its command line; SpecError when it cannot be read."""
    path = os.fspath(script_path)
    cwd = cwd or os.getcwd()
    abspath = os.path.abspath(os.path.join(cwd, path))
    try:
        with open(abspath, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise SpecError(
            Phrase(
                "cannot read script {value} ({why}; looked in {cwd}); give a path from the notebook's folder, "
                "e.g. {example}",
                why=str(e.strerror),
                cwd=cwd,
            ),
            field="script_path",
            value=path,
            rule="a readable file",
            example="train.py",
        ) from e
    if isinstance(args, str):
        raise SpecError(field="args", value=args, rule="a list of strings, not one string", example=["--epochs", "3"])
    argv = [str(a) for a in args] + hyperparams_to_args(hyperparams)
    code = ScriptCode(path=path, abspath=abspath, source=raw.decode("utf-8"), args=tuple(argv), cwd=cwd)
    return ScriptProgram(code=code, sha256=hashlib.sha256(raw).hexdigest(), hyperparams=dict(hyperparams or {}))
