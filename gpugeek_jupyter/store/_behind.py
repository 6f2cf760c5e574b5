"""Writes that reach the registry file a moment after the call that asked for them.

One write may wait: the end row of a job that succeeded quickly (``JobQueries.finish_job(...,
behind=True)``; the rule of which jobs, in :mod:`gpugeek_jupyter.jobs.record`). It is written

- by this process's next write to the file, in that write's own transaction: short jobs run one
  after another cost one transaction each (the next job's queue row carries the last one's end);
- before this process's next read, so that the process reads what it wrote;
- by a thread of this process :data:`WRITE_WITHIN_S` after it was asked for, when nothing else
  wrote it: other processes (the side panel, a kernel waiting for the pool) see the job end within
  that;
- when the process exits normally.

A process killed in that window loses it: the job's row stays ``running`` until whoever finds it
ahead in the pool's queue ends it as its dead submitter's. So only a job that ran briefly is written
this way; a longer one's end is written before its result is returned.

The same object is the lock that lets this process's threads write the file one at a time: they
wait for each other on it, not in SQLite's busy handler (which sleeps milliseconds at a time).
"""

from __future__ import annotations

import atexit
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

WRITE_WITHIN_S = 0.05  # a write behind reaches the file at most this long after it was asked for

Statement = tuple[str, dict[str, Any]]
Transaction = Callable[[], AbstractContextManager[sqlite3.Connection]]


class WritesBehind:
    """The writes behind of one registry file in this process (see the module's docstring)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # held for each write transaction of this process
        self._guard = threading.Lock()  # the list alone
        self._statements: list[Statement] = []
        self._transaction: Transaction | None = None  # how to open a write transaction (the last asker's)
        self._asked = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        atexit.register(self.write_now)

    @property
    def waiting(self) -> bool:
        """Whether a write behind has not reached the file yet."""
        return bool(self._statements)

    def add(self, sql: str, params: dict[str, Any], transaction: Transaction) -> None:
        """Write ``sql`` with ``params`` within :data:`WRITE_WITHIN_S`, in the first write transaction
        of this process that ``transaction`` (or any other) opens by then."""
        with self._guard:
            self._statements.append((sql, params))
            self._transaction = transaction
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="gpugeek-registry-behind", daemon=True)
                self._thread.start()
        self._asked.set()

    def take(self) -> list[Statement]:
        """The waiting statements, for the transaction about to be opened (under :attr:`lock`)."""
        if not self._statements:
            return []
        with self._guard:
            taken, self._statements = self._statements, []
        return taken

    def give_back(self, statements: list[Statement]) -> None:
        """Statements whose transaction was rolled back: the next one writes them."""
        if statements:
            with self._guard:
                self._statements[:0] = statements
            self._asked.set()

    def write_now(self) -> None:
        """Write what waits, in a transaction of its own (nothing when nothing waits)."""
        transaction = self._transaction
        if not self._statements or transaction is None or os.getpid() != self._pid:
            return  # a forked child's copy of its parent's statements is its parent's to write
        try:
            with transaction():
                pass  # the transaction writes the waiting statements first
        except Exception as e:  # the file is gone, or locked past every retry: said, not tried for ever
            lost = self.take()
            log.warning("registry: %d job end(s) could not be written, and are dropped: %s", len(lost), e)

    def _serve(self) -> None:
        while True:
            self._asked.wait()
            time.sleep(WRITE_WITHIN_S)  # a write of this process may carry them meanwhile
            self._asked.clear()  # before writing: a statement added from now on is waited for again
            self.write_now()


def apply_statements(db: sqlite3.Connection, statements: list[Statement]) -> None:
    """Execute waiting statements in an open transaction; one SQLite refuses is dropped, and said."""
    for sql, params in statements:
        try:
            db.execute(sql, params)
        except sqlite3.Error as e:
            log.warning("registry: a job's end could not be written (%s): %s", e, params.get("id"))


_by_file: dict[tuple[int, Path], WritesBehind] = {}
_by_file_lock = threading.Lock()


def writes_behind(path: Path) -> WritesBehind:
    """This process's writes behind of the registry file at ``path`` (one per file and process)."""
    key = (os.getpid(), path)
    found = _by_file.get(key)
    if found is None:
        with _by_file_lock:
            found = _by_file.get(key)
            if found is None:
                found = _by_file[key] = WritesBehind()
    return found
