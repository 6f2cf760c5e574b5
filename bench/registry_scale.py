"""How the side panel's poll scales with the registry's history.

The panel polls ``GET /gpugeek/pools`` every 2 s. This fills a registry with a year of history
(100,000 ended pools, 1,000,000 worker intervals, utilization rows for the pools that ended in the
last day) plus a few live pools heart-beating for a day, then times the poll as the handler makes it
(``GpugeekService.list_pools`` with the default query, then ``json.dumps``), median of 20, and the
size of its answer. The same poll at 5,000 ended pools shows it does not grow with history; at
5,000 pools the pre-redesign poll (every pool and every worker interval read, every model built with
the idle-spend scan) runs in the same process as the baseline of the ratios. Also: one history page,
the lost-pool sweeper when every owner is alive, and the upgrade of a version-1 file of that size.

    PYTHONPATH=. .venv/bin/python bench/registry_scale.py
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gpugeek_jupyter.config import GpugeekConfig
from gpugeek_jupyter.cost import ledger
from gpugeek_jupyter.pricing import prices_in_force
from gpugeek_jupyter.server.models import PoolCost, make_pool_model, pool_telemetry
from gpugeek_jupyter.server.queries import parse_pools_query
from gpugeek_jupyter.server.service import GpugeekService
from gpugeek_jupyter.spec import PoolSpec
from gpugeek_jupyter.store import MIGRATIONS, PoolRecord, Registry, process_started_at

DAY = 86_400.0
YEAR = 365 * DAY
HEARTBEAT = 2.0
WORKERS_PER_POOL = 10
LIVE_POOLS = 5
LIVE_WORKERS = 8
RUN_SECONDS = 3_600.0  # each ended pool ran an hour
REPEATS = 20
TARGET_MS = 20.0
TARGET_KB = 50.0
BATCH = 200_000  # rows per executemany transaction


def _v1_file(path: Path) -> None:
    """An empty registry as the first release made it: schema step 1 only, user_version 1."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    for statement in MIGRATIONS[0].statements:
        db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    db.close()


def _insert(db: sqlite3.Connection, sql: str, rows: list[tuple[Any, ...]]) -> None:
    for start in range(0, len(rows), BATCH):
        db.execute("BEGIN IMMEDIATE")
        db.executemany(sql, rows[start : start + BATCH])
        db.execute("COMMIT")


def fill(path: Path, ended: int, now: float) -> dict[str, int]:
    """``ended`` pools over the year before ``now`` (ten workers each), utilization for those that
    ended in the last day, and LIVE_POOLS live pools of this process, heart-beating now."""
    spec = PoolSpec.create(gpu_type="A100-80GB", count=WORKERS_PER_POOL, spot_fraction=0.5, backend="local", name="run")
    spec_json = json.dumps(spec.to_dict())
    prices_json = json.dumps(prices_in_force(spec))
    pid, host = os.getpid(), socket.gethostname()
    started = process_started_at(pid)
    pool_sql = (
        "INSERT INTO pools (id, name, backend, spec_json, prices_json, status, reason, owner, owner_pid, owner_host,"
        " owner_started_at, created_at, ready_at, ended_at, heartbeat_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
    )
    worker_sql = (
        "INSERT INTO workers (pool_id, worker_name, pricing, started_at, stopped_at, stop_reason) VALUES (?,?,?,?,?,?)"
    )
    util_sql = "INSERT INTO utilization (pool_id, at, mean_util, gpus, net_bytes) VALUES (?,?,?,?,?)"
    pools: list[tuple[Any, ...]] = []
    workers: list[tuple[Any, ...]] = []
    samples: list[tuple[Any, ...]] = []
    step = YEAR / ended
    for i in range(1, ended + 1):
        end = now - YEAR + i * step
        begin = end - RUN_SECONDS
        status = {8: "failed", 9: "lost"}.get(i % 10, "stopped")
        pools.append(
            (
                i,
                f"run-{i}",
                "local",
                spec_json,
                prices_json,
                status,
                "stopped by the user",
                f"kernel {i % 97}",
                pid + 1,
                host,
                0.0,
                begin,
                begin + 30,
                end,
                end,
            )
        )
        workers.extend(
            (i, str(w), "spot" if w < WORKERS_PER_POOL // 2 else "on_demand", begin, end, "pool stopped")
            for w in range(WORKERS_PER_POOL)
        )
        if end > now - DAY:
            samples.extend(
                (i, begin + k * HEARTBEAT, (k % 10) / 10, WORKERS_PER_POOL, 1000)
                for k in range(int(RUN_SECONDS / HEARTBEAT))
            )
    for j in range(LIVE_POOLS):
        pool_id = ended + 1 + j
        begin = now - DAY
        pools.append(
            (
                pool_id,
                f"live-{j}",
                "local",
                spec_json,
                prices_json,
                "ready",
                None,
                "kernel live",
                pid,
                host,
                started,
                begin,
                begin + 30,
                None,
                now,
            )
        )
        workers.extend(
            (pool_id, str(w), "spot" if w < LIVE_WORKERS // 2 else "on_demand", begin, None, None)
            for w in range(LIVE_WORKERS)
        )
        samples.extend(
            (pool_id, begin + k * HEARTBEAT, (k % 10) / 10, LIVE_WORKERS, 1000) for k in range(int(DAY / HEARTBEAT))
        )
    db = sqlite3.connect(path, isolation_level=None)
    try:
        _insert(db, pool_sql, pools)
        _insert(db, worker_sql, workers)
        _insert(db, util_sql, samples)
    finally:
        db.close()
    return {"pools": len(pools), "workers": len(workers), "utilization": len(samples)}


def service_for(registry: Registry) -> GpugeekService:
    """The server's service over ``registry``; the poll needs no pool manager beyond its registry."""
    config = GpugeekConfig(heartbeat_seconds=HEARTBEAT, lost_after_seconds=15.0, registry_path=str(registry.path))
    manager: Any = SimpleNamespace(registry=registry, owner="server")
    return GpugeekService(manager, config)


def handler_poll(service: GpugeekService, arguments: dict[str, str]) -> bytes:
    """What ``GET /gpugeek/pools`` computes: the query parsed, the service's answer, its JSON."""
    query = parse_pools_query(arguments)
    return json.dumps(service.list_pools(query.namespace, query.state, query.before, query.limit)).encode()


def old_poll(registry: Registry) -> bytes:
    """The poll before the redesign: every pool and every worker interval read, a model per name,
    each with the idle-spend scan and every utilization row of its pool."""
    now = time.time()
    newest: dict[str, PoolRecord] = {}
    for record in registry.list_pools():
        newest[record.name] = record
    intervals = registry.worker_intervals()
    models = []
    for record in sorted(newest.values(), key=lambda r: r.id):
        breakdown = ledger.pool_cost(registry, record.id, now=now, lost_after_seconds=15.0)
        cost = PoolCost(breakdown.usd_per_hour_now, breakdown.total_usd, breakdown.budget_fraction)
        registry.utilization(record.id)[-60:]  # what pool_telemetry read then
        models.append(make_pool_model(record, intervals, cost, pool_telemetry(registry, record)))
    return json.dumps({"pools": models}).encode()


def median_ms(call: Callable[[], object], repeats: int = REPEATS) -> float:
    call()  # warm the page cache and the connection
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


Row = tuple[str, str, str, str]  # measurement, registry, figure, verdict against the target


def measure(tmp: Path, ended: int, figures: dict[str, float]) -> list[Row]:
    """Every measurement at one size of history (``figures`` gets the poll's ms)."""
    path = tmp / f"registry-{ended}.sqlite"
    _v1_file(path)
    start = time.perf_counter()
    counts = fill(path, ended, time.time())
    fill_s = time.perf_counter() - start
    start = time.perf_counter()
    registry = Registry(path)  # applies schema steps 2 and 3 to the version-1 file
    upgrade_s = time.perf_counter() - start
    registry.heartbeat(list(range(ended + 1, ended + 1 + LIVE_POOLS)))  # live again after the fill
    service = service_for(registry)
    history = {"state": "ended", "limit": "50"}
    answer = handler_poll(service, {})
    shown = json.loads(answer)["pools"]
    assert sum(p["status"] == "ready" for p in shown) == LIVE_POOLS < len(shown), "live and recent pools"
    poll = median_ms(lambda: handler_poll(service, {}))
    cold = median_ms(lambda: handler_poll(service_for(registry), {}))  # a new server: nothing kept yet
    page = median_ms(lambda: handler_poll(service, history))
    cold_page = median_ms(lambda: handler_poll(service_for(registry), history))
    sweep = median_ms(lambda: registry.mark_lost_pools(15.0))
    figures[f"poll {ended}"] = poll
    label = f"{ended:,} ended pools"
    kb = len(answer) / 1024
    contents = f"{counts['pools']:,} pools, {counts['workers']:,} worker intervals, {counts['utilization']:,} samples"
    rows: list[Row] = [
        (f"fill: {contents}", label, f"{fill_s:.1f} s", ""),
        (
            "upgrade a version-1 file to the latest (indexes, net_total backfill)",
            label,
            f"{upgrade_s * 1e3:.0f} ms",
            "",
        ),
        (
            "panel poll: `GET /gpugeek/pools` (service + json.dumps), median of 20",
            label,
            f"{poll:.2f} ms",
            "ok" if poll <= TARGET_MS else f"over {TARGET_MS:.0f} ms",
        ),
        (
            f"panel poll: answer size ({len(shown)} pools: {LIVE_POOLS} live, the rest ended in the last 24 h)",
            label,
            f"{kb:.1f} KB",
            "ok" if kb <= TARGET_KB else f"over {TARGET_KB:.0f} KB",
        ),
        ("panel poll, first one of a new server (no ended pool's cost kept yet)", label, f"{cold:.2f} ms", ""),
        ("history page: `?state=ended&limit=50`, median of 20", label, f"{page:.2f} ms", ""),
        ("history page, first fetch of a new server", label, f"{cold_page:.2f} ms", ""),
        ("lost-pool sweeper, every owner alive (writes nothing), median of 20", label, f"{sweep:.3f} ms", ""),
    ]
    if ended == 5_000:
        start = time.perf_counter()
        old = old_poll(registry)
        old_s = time.perf_counter() - start
        figures["old poll 5000"] = old_s * 1e3
        figure = f"{old_s * 1e3:.0f} ms, {len(old) / 1024:.0f} KB"
        rows.append(("pre-redesign poll (all pools, all intervals, idle scan), once", label, figure, ""))
    registry.close()
    return rows


def main() -> int:
    rows: list[Row] = []
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ended in (5_000, 100_000):
            rows += measure(Path(tmp), ended, figures)
    print(f"# registry_scale, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, SQLite {sqlite3.sqlite_version}")
    print()
    print("| measurement | registry | figure | target |")
    print("|---|---|---|---|")
    for name, size, figure, verdict in rows:
        print(f"| {name} | {size} | {figure} | {verdict} |")
    print()
    growth = figures["poll 100000"] / figures["poll 5000"]
    speedup = figures["old poll 5000"] / figures["poll 5000"]
    print("| ratio | value |")
    print("|---|---|")
    print(f"| poll at 100,000 / poll at 5,000 ended pools | {growth:.2f} |")
    print(f"| pre-redesign poll / poll, both at 5,000 ended pools | {speedup:.0f} |")
    return 0 if figures["poll 100000"] <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
