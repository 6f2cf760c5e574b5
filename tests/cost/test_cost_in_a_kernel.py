"""Cost as a notebook user meets it, in real IPython kernels: a killed kernel, the magic, the notices."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from gpugeek_jupyter.cost.tco import cost_report
from gpugeek_jupyter.store import PoolStatus, Registry
from support.kernel import KernelSession

pytestmark = pytest.mark.slow

HEARTBEAT = 0.5
# A beat comes every period plus the time the beat itself takes (registry write, worker sync, one
# utilization row from the collected telemetry); on this shared 2-core machine that work takes well
# under this much.
BEAT_WORK_ALLOWANCE = 0.5
# Utilization rows come from telemetry samples: a pool that spends its budget in ~2 s needs them
# faster than the default 1 s to have the two rows an idle share is priced from.
TELEMETRY_PERIOD = 0.25


def _kernel(registry_path: Path) -> KernelSession:
    return KernelSession(
        env={
            "GPUGEEK_REGISTRY": str(registry_path),
            "GPUGEEK_HEARTBEAT": str(HEARTBEAT),
            "GPUGEEK_PRELOAD_TORCH": "0",
            "GPUGEEK_TELEMETRY_PERIOD": str(TELEMETRY_PERIOD),
        }
    )


def _kill_leftovers(pids: list[int]) -> None:
    """The pool's own nanny and worker processes, orphaned by the kill: end them by pid."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_kernel_sigkill_mid_pool_costs_the_time_it_really_ran_within_a_heartbeat(isolated_registry: Path) -> None:
    session = _kernel(isolated_registry)
    leftovers: list[int] = []
    try:
        started = session.run(
            "import gpugeek_jupyter\n"
            "pool = gpugeek_jupyter.launch(gpu_type='cpu', count=2, name='doomed', price=3600, spot_fraction=0.5)\n"
            "print(pool.status.value)"
        )
        assert started.error is None and "ready" in started.stdout, started.text
        registry = Registry(isolated_registry)
        record = registry.latest_pool("doomed")
        deadline = time.monotonic() + 30
        while registry.pool_by_id(record.id).heartbeat_at - record.created_at < 2.2 and time.monotonic() < deadline:
            time.sleep(0.05)
        leftovers = [p.pid for p in psutil.Process(session.pid).children(recursive=True)]
        killed_at = time.time()
        os.kill(session.pid, signal.SIGKILL)
    finally:
        _kill_leftovers(leftovers)
        session.shutdown()  # the kernel is gone; this closes the channels and reaps it

    (cost,) = cost_report(registry, pool="doomed", jobs=False)  # marks the dead owner's pool lost
    assert cost.status == PoolStatus.LOST.value
    intervals = registry.worker_intervals(record.id)
    assert len(intervals) == 2
    for interval in intervals:
        assert interval.stopped_at is not None
        assert 0 <= killed_at - interval.stopped_at <= HEARTBEAT + BEAT_WORK_ALLOWANCE
    ran = sum(killed_at - i.started_at for i in intervals)  # worker-seconds until the kill, USD 1 each
    assert 0 <= ran - cost.compute_usd <= 2 * (HEARTBEAT + BEAT_WORK_ALLOWANCE)
    assert cost.compute_usd == pytest.approx(sum(i.stopped_at - i.started_at for i in intervals), abs=1e-6)


def test_the_notebook_hears_about_the_budget_once_and_the_magic_reports_it(isolated_registry: Path) -> None:
    session = _kernel(isolated_registry)
    try:
        assert session.run("%load_ext gpugeek_jupyter").error is None
        launched = session.run(
            "import time\n"
            "pool = %gpugeek_launch --gpu-type cpu --count 1 --name costly --price 1800 --budget 1 --quiet\n"
            "deadline = time.monotonic() + 30\n"
            "while pool.status.is_live and time.monotonic() < deadline:\n"
            "    time.sleep(0.1)\n"
            "time.sleep(0.2)\n"  # let the last notice's stream message go out
            "print(pool.status.value)",
            timeout=90,
        )
        assert launched.error is None, launched.text
        assert launched.stdout.strip().endswith("stopped")
        assert launched.stderr.count("gpugeek: pool 'costly' has spent") == 1, launched.stderr
        assert launched.stderr.count("gpugeek: pool 'costly' spent its budget") == 1, launched.stderr

        csv_path = Path(tempfile.mkdtemp()) / "report.csv"  # never the working directory (the repository)
        report = session.run(f"%gpugeek_cost costly --csv {csv_path} -o frame\nprint(round(frame.total_usd[0], 2))")
        assert report.error is None, report.text
        assert "costly" in report.text
        assert "pool costly, compute USD " in report.stdout and ": idle " in report.stdout
        assert f"wrote 1 rows to {csv_path}" in report.stdout and csv_path.exists()
        assert float(report.stdout.strip().splitlines()[-1]) >= 1.0

        owned = session.run("%gpugeek_tco --gpu-type H100-80GB --hours-per-month 200")
        assert owned.error is None, owned.text
        assert "1 x H100-80GB for 200 h/month (27% utilization)" in owned.stdout
        assert "20% (yours)" not in owned.text and "27% (yours)" in owned.text

        bad = session.run("%gpugeek_cost --all --since yesterday")
        # IPython shows a magic's UsageError as one line on the stream, without a traceback
        assert bad.stderr.strip() == (
            "UsageError: --since 'yesterday' is not a date (e.g. --since 2026-11-01 or --since 2026-11-01T09:30)"
        )
    finally:
        session.shutdown()
