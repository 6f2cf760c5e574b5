"""Dask worker preload for pool workers: warm up imports off the critical path.

Importing torch takes ~1.4 s; doing it in a background thread as the worker starts means the first
job on a fresh pool finds it imported (or half imported: the import lock makes the job wait only
for the rest). Disabled with GPUGEEK_PRELOAD_TORCH=0.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)


def _import_torch() -> None:
    try:
        import torch  # noqa: F401
        import torch.distributed  # noqa: F401
    except Exception as e:  # a job will report the same error properly; this is only a warm-up
        log.info("torch warm-up import failed on this worker: %s", e)


def dask_setup(worker) -> None:  # type: ignore[no-untyped-def]
    if os.environ.get("GPUGEEK_PRELOAD_TORCH", "1").lower() in ("0", "false", "no"):
        return
    threading.Thread(target=_import_torch, name="gpugeek-torch-warmup", daemon=True).start()
