"""Imported by the pool forkserver only (see :mod:`.worker_origin`), and so by every worker it forks.

multiprocessing prepares a forked-from-the-server child as it prepares a spawned one: it re-runs
the launching program's ``__main__`` (``runpy.run_path(main, run_name="__mp_main__")``) before it
unpickles the process object. A dask worker's target lives in ``distributed``, never in
``__main__``, and re-running a user's script there would run everything it does before it launches
a pool, in every worker, again (and launch pools from inside the workers). So children that are dask
workers skip that step; any other child of this server is prepared as usual.
"""

from __future__ import annotations

import multiprocessing.spawn as _spawn
from collections.abc import Mapping
from typing import Any

from .worker_origin import DASK_WORKER_PROCESS_NAME, WARM_UP_PROCESS_NAME

_WITHOUT_MAIN = (DASK_WORKER_PROCESS_NAME, WARM_UP_PROCESS_NAME)
_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")
_prepare = _spawn.prepare


def _prepare_without_main(data: Mapping[str, Any]) -> None:
    if data.get("name") in _WITHOUT_MAIN:
        data = {key: value for key, value in data.items() if key not in _MAIN_KEYS}
    _prepare(data)


if getattr(_spawn.prepare, "__module__", None) != __name__:
    _spawn.prepare = _prepare_without_main
