"""Which process owns a pool: a pid plus its start time identifies a process uniquely on its host."""

from __future__ import annotations

import os


def process_started_at(pid: int) -> float:
    """The start time of ``pid`` (0.0 if it is gone); with the pid it identifies a process uniquely."""
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0


def process_is_alive(pid: int, started_at: float) -> bool:
    """Whether the process ``pid`` that started at ``started_at`` still runs (a reused pid does not count)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        return bool(abs(proc.create_time() - started_at) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def notebook_label() -> str | None:
    """This process's notebook as people name it, ``"notebook train.ipynb"``: the kernel's
    ``JPY_SESSION_NAME``, which Jupyter sets to the notebook's path; None outside a notebook."""
    notebook = os.environ.get("JPY_SESSION_NAME")
    return f"notebook {os.path.basename(notebook)}" if notebook else None
