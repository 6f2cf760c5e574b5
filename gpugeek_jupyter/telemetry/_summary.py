"""Summaries of sample columns: the per-job record and the latest row of every GPU/worker."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._schema import NO_GPU, Columns, select

TIMELINE_POINTS = 60  # a job's summary carries at most this many points per curve


def _number(value: Any) -> float | None:
    value = float(value)
    return None if math.isnan(value) else round(value, 3)


def _reduce(function: Any, values: np.ndarray) -> float | None:
    finite = values[~np.isnan(values)]
    return _number(function(finite)) if len(finite) else None


def summarize(columns: Columns, started_at: float, ended_at: float) -> dict[str, Any]:
    """A JSON-ready summary of the samples taken between ``started_at`` and ``ended_at``.

    Mean and peak SM %, the peak memory used on any one GPU, power, CPU and RSS, and a downsampled
    timeline (at most :data:`TIMELINE_POINTS` points) of mean SM % (CPU % without GPUs).
    """
    gpu_rows = columns["gpu"] != NO_GPU
    gpu = select(columns, gpu_rows)
    reasons = [r for r in columns["no_gpu_reason"][~gpu_rows] if r]
    errors = [e for e in columns["error"] if e]
    summary: dict[str, Any] = {
        "started_at": started_at,
        "ended_at": ended_at,
        "rows": int(len(columns["time"])),
        "workers": int(len(set(columns["worker"]))),
        "gpus": int(len(set(zip(gpu["worker"], gpu["gpu"])))),
        "sm_util_mean_pct": _reduce(np.mean, gpu["sm_util_pct"]),
        "sm_util_peak_pct": _reduce(np.max, gpu["sm_util_pct"]),
        "mem_used_peak_bytes": _reduce(np.max, gpu["mem_used_bytes"]),
        "mem_total_bytes": _reduce(np.max, gpu["mem_total_bytes"]),
        "process_gpu_mem_peak_bytes": _reduce(np.max, gpu["process_gpu_mem_bytes"]),
        "power_mean_w": _reduce(np.mean, gpu["power_w"]),
        "power_peak_w": _reduce(np.max, gpu["power_w"]),
        "cpu_mean_pct": _reduce(np.mean, columns["cpu_pct"]),
        "cpu_peak_pct": _reduce(np.max, columns["cpu_pct"]),
        "rss_peak_bytes": _reduce(np.max, columns["rss_bytes"]),
        "no_gpu_reason": reasons[0] if reasons and not len(gpu["time"]) else None,
        "sample_errors": len(errors),
        "last_error": errors[-1] if errors else None,
        "timeline": _timeline(gpu if len(gpu["time"]) else columns, started_at, ended_at),
    }
    return summary


def _timeline(columns: Columns, started_at: float, ended_at: float) -> dict[str, list[float | None]]:
    """Bucket means: seconds since the start, and SM % (or CPU % for CPU rows)."""
    times = columns["time"]
    if not len(times) or ended_at <= started_at:
        return {"t": [], "util_pct": []}
    values = columns["sm_util_pct"] if (columns["gpu"] != NO_GPU).any() else columns["cpu_pct"]
    buckets = min(TIMELINE_POINTS, len(times))
    width = (ended_at - started_at) / buckets
    index = np.clip(((times - started_at) / width).astype(np.int64), 0, buckets - 1)
    finite = ~np.isnan(values)
    sums = np.bincount(index[finite], weights=values[finite], minlength=buckets)
    counts = np.bincount(index[finite], minlength=buckets)
    t: list[float | None] = []
    util: list[float | None] = []
    for bucket in range(buckets):
        if counts[bucket]:
            t.append(round((bucket + 0.5) * width, 3))
            util.append(round(float(sums[bucket] / counts[bucket]), 2))
    return {"t": t, "util_pct": util}


def latest_rows(columns: Columns) -> Columns:
    """The rows of each worker's newest sample (one per GPU, or its CPU row), by worker name then GPU."""
    newest: dict[str, float] = {}
    for worker, t in zip(columns["worker"], columns["time"].tolist()):
        if t > newest.get(worker, -math.inf):
            newest[worker] = t
    keep = [p for p, (w, t) in enumerate(zip(columns["worker"], columns["time"].tolist())) if t == newest[w]]
    order = sorted(keep, key=lambda p: (_rank(str(columns["worker_name"][p])), int(columns["gpu"][p])))
    return select(columns, np.array(order, dtype=np.int64))


def _rank(name: str) -> tuple[int, Any]:
    return (0, int(name)) if str(name).isdigit() else (1, str(name))
