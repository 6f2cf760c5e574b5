"""The telemetry record: one row per GPU (or per CPU-only worker) per sample.

Workers send rows as plain tuples in :data:`SAMPLE_FIELDS` order (cheap to pickle); the notebook adds
the worker's identity (:data:`WORKER_FIELDS`) and keeps them as numpy columns. Units follow
``nvidia-smi dmon``: percentages, bytes, watts, degrees C, MHz, MB/s.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

NO_GPU = -1  # the ``gpu`` value of a CPU row (shown as <NA> in ``Pool.metrics()``)

# (name, kind, meaning); kind is "f" (float, NaN when unknown), "i" (int) or "o" (str or None)
SAMPLE_SCHEMA: tuple[tuple[str, str, str], ...] = (
    ("time", "f", "when the worker took the sample (seconds since the epoch, the worker's clock)"),
    ("gpu", "i", "NVML index of the GPU; -1 (<NA> in DataFrames) for a worker without one"),
    ("gpu_name", "o", "GPU product name"),
    ("gpu_uuid", "o", "GPU UUID"),
    ("sm_util_pct", "f", "SM (GPU) utilization %, as dmon 'sm'"),
    ("mem_util_pct", "f", "memory-controller utilization %, as dmon 'mem'"),
    ("mem_used_bytes", "f", "GPU memory used, all processes"),
    ("mem_total_bytes", "f", "GPU memory total"),
    ("power_w", "f", "board power draw, W"),
    ("temperature_c", "f", "GPU temperature, degrees C"),
    ("sm_clock_mhz", "f", "SM clock, MHz"),
    ("pcie_rx_mb_s", "f", "PCIe receive, MB/s"),
    ("pcie_tx_mb_s", "f", "PCIe transmit, MB/s"),
    ("nvlink_rx_mb_s", "f", "NVLink receive, all links, MB/s (NaN where the device has no NVLink)"),
    ("nvlink_tx_mb_s", "f", "NVLink transmit, all links, MB/s (NaN where the device has no NVLink)"),
    ("process_gpu_mem_bytes", "f", "GPU memory held by the worker process and its child processes"),
    ("cpu_pct", "f", "CPU % of the worker process and its children since the previous sample (100 = one core)"),
    (
        "overhead_cpu_pct",
        "f",
        "the part of cpu_pct spent by the worker's own machinery, not by its work: dask's "
        "event-loop thread (heartbeats, client.run calls such as this collection) and profiler, and this sampler",
    ),
    ("rss_bytes", "f", "resident memory of the worker process and its children"),
    ("no_gpu_reason", "o", "why this row has no GPU (e.g. 'NVML library not found ...'), else None"),
    ("error", "o", "what could not be read in this sample, else None"),
)
SAMPLE_FIELDS: tuple[str, ...] = tuple(name for name, _, _ in SAMPLE_SCHEMA)

WORKER_SCHEMA: tuple[tuple[str, str, str], ...] = (
    ("worker", "o", "dask worker address"),
    ("worker_name", "o", "dask worker name (the rank for local pools)"),
    ("host", "o", "host name of the worker"),
)
WORKER_FIELDS: tuple[str, ...] = tuple(name for name, _, _ in WORKER_SCHEMA)

SCHEMA: tuple[tuple[str, str, str], ...] = (SAMPLE_SCHEMA[0], *WORKER_SCHEMA, *SAMPLE_SCHEMA[1:])
COLUMNS: tuple[str, ...] = tuple(name for name, _, _ in SCHEMA)
KINDS: dict[str, str] = {name: kind for name, kind, _ in SCHEMA}
STRING_COLUMNS: tuple[str, ...] = tuple(name for name, kind, _ in SCHEMA if kind == "o")

_DTYPES = {"f": np.float64, "i": np.int64, "o": object}

Columns = dict[str, np.ndarray]  # one batch of rows, column-wise


_UNKNOWN = {"f": math.nan, "i": NO_GPU, "o": None}


def sample_row(time: float, **fields: Any) -> tuple[Any, ...]:
    """One row as a worker sends it (:data:`SAMPLE_FIELDS` order): ``time`` and ``fields`` by name,
    every other field unknown (NaN, None; ``gpu`` is :data:`NO_GPU`).

    >>> row = sample_row(1.8e9, cpu_pct=50.0)
    >>> dict(zip(SAMPLE_FIELDS, row))["cpu_pct"], dict(zip(SAMPLE_FIELDS, row))["gpu"]
    (50.0, -1)
    """
    unknown = set(fields) - set(SAMPLE_FIELDS)
    if unknown:
        raise ValueError(
            f"not sample fields: {', '.join(sorted(unknown))} (e.g. sm_util_pct, cpu_pct; see SAMPLE_SCHEMA)"
        )
    return tuple(time if name == "time" else fields.get(name, _UNKNOWN[kind]) for name, kind, _ in SAMPLE_SCHEMA)


def empty_columns() -> Columns:
    return {name: np.empty(0, dtype=_DTYPES[kind]) for name, kind, _ in SCHEMA}


def columns_from_rows(rows: list[tuple[Any, ...]], worker: str, worker_name: str, host: str) -> Columns:
    """Columns for ``rows`` (tuples in SAMPLE_FIELDS order) sent by one worker."""
    n = len(rows)
    if n == 0:
        return empty_columns()
    by_field = list(zip(*rows))
    columns: Columns = {}
    for name, values in zip(SAMPLE_FIELDS, by_field):
        kind = KINDS[name]
        if kind == "o":
            array = np.empty(n, dtype=object)
            array[:] = values
        else:
            try:
                array = np.array(values, dtype=_DTYPES[kind])
            except TypeError:  # a None among floats means "not read"
                array = np.array([np.nan if v is None else v for v in values], dtype=_DTYPES[kind])
        columns[name] = array
    for name, value in (("worker", worker), ("worker_name", worker_name), ("host", host)):
        array = np.empty(n, dtype=object)
        array[:] = [value] * n
        columns[name] = array
    return {name: columns[name] for name in COLUMNS}


def concat_columns(batches: list[Columns]) -> Columns:
    batches = [b for b in batches if len(b["time"])]
    if not batches:
        return empty_columns()
    if len(batches) == 1:
        return batches[0]
    return {name: np.concatenate([b[name] for b in batches]) for name in COLUMNS}


def select(columns: Columns, mask: np.ndarray) -> Columns:
    return {name: values[mask] for name, values in columns.items()}


def to_frame(columns: Columns):  # type: ignore[no-untyped-def]
    """A pandas DataFrame with ``time`` as UTC timestamps and ``gpu`` as a nullable integer."""
    import pandas as pd

    data: dict[str, Any] = {}
    for name in COLUMNS:
        values = columns[name]
        if name == "time":
            data[name] = pd.to_datetime(values, unit="s", utc=True)
        elif name == "gpu":
            data[name] = pd.array(np.where(values == NO_GPU, 0, values), dtype="Int64")
            data[name][values == NO_GPU] = pd.NA
        else:
            data[name] = values
    return pd.DataFrame(data, columns=list(COLUMNS))
