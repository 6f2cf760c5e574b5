"""Slurm's commands, run with a timeout; their failures as one line (a slurmctld that does not answer,
a command that cannot run), and the line of their stderr that says what is wrong."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from ...errors import BackendUnavailableError, GpugeekError

COMMANDS = ("sbatch", "squeue", "scancel")
COMMAND_TIMEOUT_S = 30.0


def missing_commands() -> list[str]:
    return [c for c in COMMANDS if shutil.which(c) is None]


def run_command(
    *argv: str, timeout: float = COMMAND_TIMEOUT_S, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=stdin)
    except subprocess.TimeoutExpired as e:
        raise BackendUnavailableError(
            f"Slurm's {argv[0]} did not answer within {timeout:.0f} s: is slurmctld up? (scontrol ping)"
        ) from e
    except OSError as e:
        raise BackendUnavailableError(f"could not run Slurm's {argv[0]}: {e}") from e


def partitions() -> list[str]:
    try:
        answer = run_command("sinfo", "-h", "-o", "%P", timeout=10)
    except GpugeekError:
        return []
    return [p.rstrip("*") for p in answer.stdout.split()]


def first_error_line(stderr: str) -> str:
    """The line of a Slurm command's stderr that says what is wrong: its first ``error:`` line (it
    names the value: ``invalid partition specified: gpu``), else its last ``failure`` line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    failures = [line for line in lines if "failure" in line.lower()]
    chosen = errors[0] if errors else (failures or lines or ["no message"])[-1]
    return re.sub(r"^(\w+: )?(error: )?", "", chosen)


def short_path() -> str:
    path = os.environ.get("PATH", "")
    return "PATH=" + (path if len(path) <= 60 else path[:57] + "...")
