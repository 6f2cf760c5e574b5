"""Schema steps on open: a file from the first release upgrades, a newer one is refused, each step is atomic.

``fixtures/registry-v1.sqlite`` was written by the first release's code (user_version 1) and
``fixtures/registry-v1.json`` is what that code read back from it (``fixtures/make_registry_v1.py``).
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from gpugeek_jupyter.errors import GpugeekError
from gpugeek_jupyter.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Migration,
    Registry,
    _migrations,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _fixture_maker() -> Any:
    """``fixtures/make_registry_v1.py``: how the fixture was read back when it was made."""
    spec = importlib.util.spec_from_file_location("make_registry_v1", FIXTURES / "make_registry_v1.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_maker = _fixture_maker()
TABLES, raw_rows, read_back = _maker.TABLES, _maker.raw_rows, _maker.read_back

SCHEMA_QUERY = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"


@pytest.fixture
def v1_file(tmp_path: Path) -> Path:
    """A copy of the first release's registry file (opening it upgrades it)."""
    copy = tmp_path / "registry-v1.sqlite"
    shutil.copyfile(FIXTURES / "registry-v1.sqlite", copy)
    return copy


def expected() -> dict[str, Any]:
    return json.loads((FIXTURES / "registry-v1.json").read_text())


def user_version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def schema(path: Path) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return [tuple(row) for row in db.execute(SCHEMA_QUERY)]
    finally:
        db.close()


def file_at_version(path: Path, version: int) -> Path:
    """A registry file with only the first ``version`` steps applied, as that release left it."""
    db = sqlite3.connect(path, isolation_level=None)
    for step in MIGRATIONS[:version]:
        for statement in step.statements:
            db.execute(statement)
    db.execute(f"PRAGMA user_version = {version}")
    db.close()
    return path


def test_the_fixture_is_one_small_file_from_the_first_release() -> None:
    assert sorted(p.name for p in FIXTURES.glob("registry-v1.sqlite*")) == ["registry-v1.sqlite"]
    assert (FIXTURES / "registry-v1.sqlite").stat().st_size < 32 * 1024
    assert user_version(FIXTURES / "registry-v1.sqlite") == 1


def test_a_first_release_file_upgrades_to_the_latest_version_on_open(v1_file: Path) -> None:
    Registry(v1_file)
    assert user_version(v1_file) == SCHEMA_VERSION > 1


def first_release_fields(answer: Any, before: Any) -> Any:
    """``answer`` with only the fields a first-release answer ``before`` had (later releases add some)."""
    if isinstance(answer, dict) and isinstance(before, dict):
        return {k: first_release_fields(answer[k], before[k]) for k in before if k in answer}
    if isinstance(answer, list) and isinstance(before, list) and len(answer) == len(before):
        return [first_release_fields(a, b) for a, b in zip(answer, before, strict=True)]
    return answer


def test_every_row_of_a_first_release_file_reads_back_as_before(v1_file: Path) -> None:
    registry = Registry(v1_file)
    answer = json.loads(json.dumps(read_back(registry)))
    assert first_release_fields(answer, expected()["api"]) == expected()["api"]
    # fields added since are empty for old rows: their jobs were never queued, by no known process
    for job in answer["jobs"]:
        assert {k: job[k] for k in ("queued_at", "submitter", "submitter_pid")} == dict.fromkeys(
            ("queued_at", "submitter", "submitter_pid")
        )
    after = json.loads(json.dumps(raw_rows(v1_file)))
    for table in TABLES:  # every column the first release had, unchanged
        before = expected()["raw"][table]
        assert [{k: row[k] for k in old} for row, old in zip(after[table], before)] == before, table
        assert len(after[table]) == len(before), table


def test_an_upgraded_file_knows_each_pools_bytes_sent_as_the_samples_say(v1_file: Path) -> None:
    registry = Registry(v1_file)
    for pool in registry.list_pools():
        samples = registry.utilization(pool.id)
        assert registry.network_bytes(pool.id, float("-inf"), float("inf")) == sum(s.net_bytes for s in samples)
        if samples:
            last = samples[-1].at
            assert registry.network_bytes(pool.id, samples[0].at, last) == sum(s.net_bytes for s in samples[1:])


def test_an_upgraded_file_has_the_schema_of_a_fresh_one(v1_file: Path, tmp_path: Path) -> None:
    Registry(v1_file)
    Registry(tmp_path / "fresh.sqlite")
    assert schema(v1_file) == schema(tmp_path / "fresh.sqlite")


def test_a_fresh_file_gets_the_latest_version(tmp_path: Path) -> None:
    Registry(tmp_path / "fresh.sqlite")
    assert user_version(tmp_path / "fresh.sqlite") == SCHEMA_VERSION


@pytest.mark.parametrize("version", range(SCHEMA_VERSION), ids=lambda v: f"from-v{v}")
def test_a_file_at_any_older_version_upgrades_step_by_step(tmp_path: Path, version: int) -> None:
    old = file_at_version(tmp_path / "old.sqlite", version)
    registry = Registry(old)
    assert user_version(old) == SCHEMA_VERSION
    Registry(tmp_path / "fresh.sqlite")
    assert schema(old) == schema(tmp_path / "fresh.sqlite")
    pool = registry.add_pool("dev", "local", {}, {}, owner="me")  # and it works
    registry.add_utilization(pool.id, 0.5, 1, net_bytes=7)
    assert registry.network_bytes(pool.id, float("-inf"), float("inf")) == 7


def test_a_file_from_a_newer_release_is_refused_with_one_line(v1_file: Path) -> None:
    Registry(v1_file)
    db = sqlite3.connect(v1_file)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(GpugeekError) as refused:
        Registry(v1_file)
    message = str(refused.value)
    assert "\n" not in message
    assert repr(str(v1_file)) in message
    assert f"schema version {SCHEMA_VERSION + 1}, newer than version {SCHEMA_VERSION}" in message
    assert "e.g. GPUGEEK_REGISTRY=" in message
    assert user_version(v1_file) == SCHEMA_VERSION + 1  # left as it was


def test_a_failing_step_leaves_the_file_at_the_version_before(v1_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = Migration(
        SCHEMA_VERSION + 1,
        "a step that fails half-way",
        ("CREATE TABLE half_done (id INTEGER)", "CREATE INDEX nowhere ON no_such_table(x)"),
    )
    monkeypatch.setattr(_migrations, "MIGRATIONS", (*MIGRATIONS, broken))
    monkeypatch.setattr(_migrations, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        Registry(v1_file)
    assert user_version(v1_file) == SCHEMA_VERSION  # the earlier steps stay applied
    assert "half_done" not in {row[1] for row in schema(v1_file)}


def test_opening_an_up_to_date_file_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    Registry(path).add_pool("dev", "local", {}, {}, owner="me")
    watcher = sqlite3.connect(path)
    before = watcher.execute("PRAGMA data_version").fetchone()[0]
    Registry(path)
    assert watcher.execute("PRAGMA data_version").fetchone()[0] == before  # no commit by anyone else


def _open(path: str, barrier: Any) -> None:  # type: ignore[no-untyped-def]
    barrier.wait()
    Registry(path)


def test_processes_opening_an_old_file_at_once_all_get_the_latest_version(v1_file: Path) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(4)
    openers = [context.Process(target=_open, args=(str(v1_file), barrier)) for _ in range(4)]
    for opener in openers:
        opener.start()
    for opener in openers:
        opener.join(timeout=120)
    assert [o.exitcode for o in openers] == [0] * 4
    assert user_version(v1_file) == SCHEMA_VERSION
    registry = Registry(v1_file)
    answer = json.loads(json.dumps(read_back(registry)))
    assert first_release_fields(answer, expected()["api"]) == expected()["api"]  # no step ran twice


def test_a_python_whose_sqlite_is_too_old_is_told_which_version_it_needs() -> None:
    with pytest.raises(
        GpugeekError, match=r"^the registry needs SQLite 3\.35\.0 or newer, but this Python has '3\.31\.1'"
    ):
        _migrations.require_sqlite((3, 31, 1))
