"""``%gpugeek_monitor``: the live telemetry panel (or a table of the latest numbers) of a pool."""

from __future__ import annotations

import math
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ._common import chosen_pool, parse_options, pool_arguments, usage_errors

MIN_PERIOD_SECONDS = 0.05
MAX_PERIOD_SECONDS = 3600.0


def parse_period(text: str | None) -> float | None:
    """``--period`` as seconds; a one-line UsageError for anything but a number in range."""
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not MIN_PERIOD_SECONDS <= seconds <= MAX_PERIOD_SECONDS:
        raise UsageError(
            f"--period must be a number of seconds from {MIN_PERIOD_SECONDS} to {MAX_PERIOD_SECONDS:.0f}, "
            f"got {text!r} (e.g. --period 0.5)"
        )
    return seconds


@magics_class
class MonitorMagics(Magics):
    @magic_arguments()
    @pool_arguments("to monitor (default: the current pool)")
    @argument("--table", action="store_true", help="show the latest numbers as a table instead of the live panel")
    @argument("--period", default=None, help="sample every S seconds on every worker of the pool (default 1)")
    @line_magic
    def gpugeek_monitor(self, line: str) -> Any:
        """Example::

            In [1]: %gpugeek_monitor dev --table
            Out[1]:
                              time worker_name       host  gpu  cpu_pct  rss_bytes  no_gpu_reason
            0  2026-11-30 09:14:41           0  127.0.0.1 <NA>     12.0  3.1e+08  NVML library not found ...

        Live GPU telemetry of pool NAME (or ``--pool NAME``; default: the current pool), drawn inline:
        ``%gpugeek_monitor`` alone gives the live panel of the current pool, which keeps moving while
        other cells run; ``--table`` the latest numbers instead.

        The panel shows mean SM %, memory used / total and power above one line per GPU (a GPU x time
        heatmap beyond 8 GPUs); without GPUs, CPU % and RSS per worker and the reason. ``--period``
        changes the pool's sampling period. All samples: ``gpugeek_jupyter.current_pool().metrics()``.
        """
        args = parse_options(self.gpugeek_monitor, line, "dev --period 1")
        name = chosen_pool(args, "gpugeek_monitor", "dev --period 1")
        period = parse_period(args.period)
        with usage_errors():
            pool = self._pool(name)
            if args.table:
                from .. import telemetry

                if period is not None:
                    telemetry.set_period(pool, period)
                return _table(telemetry.latest(pool))
            from ..widgets.monitor import show_monitor

            show_monitor(pool, period=period)
            return None

    @staticmethod
    def _pool(name: str | None) -> Any:
        from ..errors import GpugeekError
        from ..runtime import get_pool_manager

        manager = get_pool_manager()
        if name is not None:
            return manager.get(name)
        pool = manager.current
        if pool is None:
            raise GpugeekError(
                "no current pool to monitor; launch one (e.g. %gpugeek_launch --gpu-type cpu --count 2) "
                "or name one (e.g. %gpugeek_monitor dev)"
            )
        return pool


_TABLE_COLUMNS = (
    "time",
    "worker_name",
    "host",
    "gpu",
    "gpu_name",
    "sm_util_pct",
    "mem_util_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "power_w",
    "temperature_c",
    "sm_clock_mhz",
    "pcie_rx_mb_s",
    "pcie_tx_mb_s",
    "nvlink_rx_mb_s",
    "nvlink_tx_mb_s",
    "process_gpu_mem_bytes",
    "cpu_pct",
    "rss_bytes",
    "no_gpu_reason",
    "error",
)


def _table(frame: Any) -> Any:
    """The latest rows, without the columns that are empty everywhere (e.g. GPU fields on CPUs)."""
    frame = frame[list(_TABLE_COLUMNS)]
    keep = [c for c in frame.columns if c in ("worker_name", "gpu", "time") or frame[c].notna().any()]
    return frame[keep].reset_index(drop=True)
