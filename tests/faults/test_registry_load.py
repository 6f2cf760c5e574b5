"""The registry under load: many writers and readers at once."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

from gpugeek_jupyter.store import Registry

WRITERS = 10
WRITES_EACH = 1000


def _writer(path: str, n: int, barrier, errors) -> None:  # type: ignore[no-untyped-def]
    registry = Registry(path)
    pool = registry.add_pool(f"load-{n}", "local", {"count": 1}, {"on_demand": 1.0}, owner=f"writer {n}")
    barrier.wait()
    for i in range(WRITES_EACH):
        try:
            registry.open_worker_interval(pool.id, str(i), "on_demand", started_at=float(i))
        except sqlite3.OperationalError as e:  # "database is locked" must never escape
            errors.put(f"writer {n}: {e}")


def _reader(path: str, barrier, stop, errors) -> None:  # type: ignore[no-untyped-def]
    registry = Registry(path)
    barrier.wait()
    while not stop.is_set():
        try:
            registry.list_pools()
            registry.worker_intervals()
        except sqlite3.OperationalError as e:
            errors.put(f"reader: {e}")


def test_registry_under_load_loses_no_row(tmp_path: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    """Registry under load: 10 processes x 1,000 writes, concurrent readers"""
    path = str(tmp_path / "load.sqlite")
    Registry(path)
    ctx = multiprocessing.get_context("spawn")
    barrier, stop, errors = ctx.Barrier(WRITERS + 2), ctx.Event(), ctx.Queue()
    readers = [ctx.Process(target=_reader, args=(path, barrier, stop, errors)) for _ in range(2)]
    writers = [ctx.Process(target=_writer, args=(path, n, barrier, errors)) for n in range(WRITERS)]
    for p in readers + writers:
        p.start()
    for p in writers:
        p.join(timeout=300)
    stop.set()
    for p in readers:
        p.join(timeout=30)
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    rows = Registry(path).worker_intervals()
    lost = WRITERS * WRITES_EACH - len(rows)
    scenario.record(survived=not problems and all(p.exitcode == 0 for p in readers + writers), data_lost=lost)
    assert problems == []
    assert [p.exitcode for p in writers + readers] == [0] * (WRITERS + 2)
    assert lost == 0
    per_pool = {}
    for row in rows:
        per_pool[row.pool_id] = per_pool.get(row.pool_id, 0) + 1
    assert sorted(per_pool.values()) == [WRITES_EACH] * WRITERS
