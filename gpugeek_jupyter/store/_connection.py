"""Connections to the registry file: one per thread (and per process after a fork), WAL mode.

Writes use ``BEGIN IMMEDIATE`` with a generous ``busy_timeout`` plus a retry loop, so "database is
locked" never reaches a user. Reads run outside transactions and never write. The file, its ``-wal``
and ``-shm`` are ``0600`` in a ``0700`` directory, checked on open (see :mod:`._private`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..polling import poll_until
from ._behind import WritesBehind, apply_statements, writes_behind
from ._private import secure_registry_files

BUSY_TIMEOUT_S = 60.0
LOCK_RETRY_S = 120.0  # how long a writer keeps retrying a locked file before the error reaches the caller


def connect(path: Path) -> sqlite3.Connection:
    """A new autocommit connection to ``path`` with the registry's pragmas."""
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    db.execute("PRAGMA foreign_keys=ON")
    return db


@contextmanager
def immediate_transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` (retried while another writer holds the lock) ... ``COMMIT``, or ``ROLLBACK``."""
    held: list[sqlite3.OperationalError] = []  # the last "locked" or "busy" answer

    def began() -> bool:
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise
            held[:] = [e]
            return False
        return True

    poll_until(began, timeout=LOCK_RETRY_S, interval=0.01, what="the registry's write lock", on_timeout=lambda: held[0])
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    else:
        db.execute("COMMIT")


class Database:
    """The file and its per-thread connections; the base of every query mixin of the registry."""

    def __init__(self, path: str | os.PathLike[str], clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path).expanduser()
        secure_registry_files(self.path)
        self.clock = clock
        self._local = threading.local()
        self._file = Path(os.path.realpath(self.path))  # one file, however its path is spelled

    def _connection(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None or getattr(self._local, "pid", None) != os.getpid():
            db = connect(self.path)
            secure_registry_files(self.path)  # SQLite has made its -wal and -shm files by now
            self._local.db = db
            self._local.pid = os.getpid()
        return db

    def _behind(self) -> WritesBehind:
        return writes_behind(self._file)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction of this process's (one at a time); it first writes what waits behind."""
        behind = self._behind()
        with behind.lock:
            waiting = behind.take()
            try:
                with immediate_transaction(self._connection()) as db:
                    apply_statements(db, waiting)
                    yield db
            except BaseException:
                behind.give_back(waiting)
                raise

    def _write_behind(self, sql: str, params: dict[str, Any]) -> None:
        """Write ``sql`` a moment later, carried by another write (see :mod:`._behind`)."""
        self._behind().add(sql, params, self._write)

    def _read(self, sql: str, args: tuple[Any, ...] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        if self._behind().waiting:  # this process reads what it wrote
            with self._write():
                pass
        return self._connection().execute(sql, args).fetchall()

    def close(self) -> None:
        """Close this thread's connection (another call opens a new one)."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
