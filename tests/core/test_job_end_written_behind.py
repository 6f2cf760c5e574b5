"""The end row of a brief job written behind: carried by the next write, read back at once by its
own process, seen by others within the window, and lost only to a process killed inside it."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpugeek_jupyter.store import JobStatus, Registry, _behind
from support.queue_rows import queue


@pytest.fixture
def no_writer_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread that writes what waits is kept from doing so during the test (a minute's window)."""
    monkeypatch.setattr(_behind, "WRITE_WITHIN_S", 60.0)


def finish_behind(registry: Registry, job_id: str) -> None:
    registry.finish_job(job_id, JobStatus.SUCCEEDED, 0, [0, 0], None, {"duration_s": 0.01}, behind=True)


def status_seen_by_another_connection(path: Path, job_id: str) -> str:
    with sqlite3.connect(path) as other:
        return str(other.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()[0])


def test_the_next_jobs_queue_row_carries_the_last_ones_end_in_one_transaction(
    registry: Registry, pool_id: int, no_writer_thread: None
) -> None:
    queue(registry, pool_id, "job-1")
    statements: list[str] = []
    registry._connection().set_trace_callback(statements.append)
    finish_behind(registry, "job-1")
    assert statements == []  # nothing written yet
    assert status_seen_by_another_connection(registry.path, "job-1") == "running"

    queue(registry, pool_id, "job-2")  # nobody ahead: job-1's end is in the same transaction, first

    transaction = [s.split()[0] for s in statements]
    assert transaction[0] == "BEGIN" and transaction[1] == "UPDATE" and transaction[-1] == "COMMIT"
    assert transaction.count("BEGIN") == 1
    assert status_seen_by_another_connection(registry.path, "job-1") == "succeeded"
    assert registry.job("job-2").status is JobStatus.RUNNING


def test_its_own_process_reads_the_end_at_once(registry: Registry, pool_id: int, no_writer_thread: None) -> None:
    queue(registry, pool_id, "job-1")
    finish_behind(registry, "job-1")
    assert registry.job("job-1").status is JobStatus.SUCCEEDED
    assert Registry(registry.path).job("job-1").status is JobStatus.SUCCEEDED  # another object, same file


def test_other_processes_see_the_end_within_the_window_though_nothing_else_is_written(
    registry: Registry, pool_id: int
) -> None:
    queue(registry, pool_id, "job-1")
    finish_behind(registry, "job-1")
    deadline = time.monotonic() + 10.0
    while status_seen_by_another_connection(registry.path, "job-1") != "succeeded":
        assert time.monotonic() < deadline, "the end was not written by the thread that writes what waits"
        time.sleep(0.01)


def test_a_write_that_fails_leaves_the_waiting_end_to_the_next(
    registry: Registry, pool_id: int, no_writer_thread: None
) -> None:
    queue(registry, pool_id, "job-1")
    finish_behind(registry, "job-1")
    with pytest.raises(RuntimeError), registry._write():
        raise RuntimeError("the caller's write failed")
    assert status_seen_by_another_connection(registry.path, "job-1") == "running"  # rolled back with it
    assert registry.job("job-1").status is JobStatus.SUCCEEDED


def test_an_end_waiting_when_the_process_exits_is_written(registry: Registry, pool_id: int) -> None:
    queue(registry, pool_id, "job-1")
    script = textwrap.dedent(
        f"""
        from gpugeek_jupyter.store import JobStatus, Registry, _behind
        _behind.WRITE_WITHIN_S = 60.0
        Registry({str(registry.path)!r}).finish_job("job-1", JobStatus.SUCCEEDED, 0, [0, 0], None, {{}}, behind=True)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert status_seen_by_another_connection(registry.path, "job-1") == "succeeded"


def test_a_process_killed_inside_the_window_loses_only_that_end(registry: Registry, pool_id: int) -> None:
    """The documented price: the row stays running (whoever finds it in the queue ends it)."""
    queue(registry, pool_id, "job-1")
    script = textwrap.dedent(
        f"""
        import os, signal
        from gpugeek_jupyter.store import JobStatus, Registry
        registry = Registry({str(registry.path)!r})
        registry.finish_job("job-1", JobStatus.SUCCEEDED, 0, [0, 0], None, {{}})  # written now
        registry.queue_job("job-2", {pool_id}, "shared", "cell", "0" * 64, 2, None)
        registry.finish_job("job-2", JobStatus.SUCCEEDED, 0, [0, 0], None, {{}}, behind=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    killed = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert killed.returncode == -signal.SIGKILL
    assert status_seen_by_another_connection(registry.path, "job-1") == "succeeded"
    assert status_seen_by_another_connection(registry.path, "job-2") == "running"


def test_a_registry_opened_by_another_spelling_of_its_path_reads_the_end_too(
    registry: Registry, pool_id: int, no_writer_thread: None, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path, target_is_directory=True)
    queue(registry, pool_id, "job-1")
    finish_behind(registry, "job-1")
    assert Registry(link / registry.path.name).job("job-1").status is JobStatus.SUCCEEDED
