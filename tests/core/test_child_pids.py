"""``children.child_pids``: every process below this one, read from Linux's per-thread lists."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from gpugeek_jupyter.jobs import children


def test_children_and_grandchildren_of_every_thread_are_listed_and_ended_ones_are_not() -> None:
    before = children.child_pids()  # the suite's own (a forkserver, servers) are not this test's
    started: list[subprocess.Popen[bytes]] = []

    def start_one() -> None:  # from a thread of its own: Linux lists a child under the thread that made it
        grandchild = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
        started.append(subprocess.Popen([sys.executable, "-c", grandchild]))

    thread = threading.Thread(target=start_one)
    thread.start()
    thread.join()  # its list is gone with it: Linux hands its children to another thread of the process
    direct = started[0].pid
    deadline = time.monotonic() + 30
    while len(found := children.child_pids() - before) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert direct in found
        assert len(found) == 2  # the child and its sleep
    finally:
        children.end_new_children(before, "the test is over")
        started[0].wait(timeout=30)
    assert direct not in children.child_pids()


def test_known_children_list_again_only_once_a_process_was_started(monkeypatch) -> None:
    listings: list[int] = []
    real = children.child_pids

    def counted() -> set[int]:
        listings.append(1)
        return real()

    monkeypatch.setattr(children, "child_pids", counted)
    known = children.KnownChildren()
    before = known.now()
    assert known.now() == before and len(listings) == 1  # nothing started since: the same list, not read again
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert child.pid in known.now()
        assert len(listings) == 2
    finally:
        child.kill()
        child.wait(timeout=30)


def test_known_children_without_the_kernels_last_pid_list_every_time(monkeypatch, tmp_path) -> None:
    listings: list[int] = []
    monkeypatch.setattr(children, "child_pids", lambda: listings.append(1) or set())
    known = children.KnownChildren(stamp_path=str(tmp_path / "no-such-file"))
    known.now()
    known.now()
    assert len(listings) == 2


def test_known_children_last_is_the_list_as_taken(monkeypatch) -> None:
    listings: list[int] = []
    monkeypatch.setattr(children, "child_pids", lambda: listings.append(1) or {1234})
    known = children.KnownChildren()
    assert known.last() == {1234} and len(listings) == 1  # taken the first time
    child = subprocess.Popen(["true"])
    child.wait(timeout=30)
    assert known.last() == {1234} and len(listings) == 1  # a process was started since: still not read
