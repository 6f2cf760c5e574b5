"""A real PostgreSQL server for a test module: initdb into a fresh directory, started as the OS user
``postgres`` on a loopback port, stopped by its postmaster's pid (tests/cost/test_team_ledger.py)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.processes import kill, wait_until_gone


def postgres_unavailable() -> str | None:
    """Why a PostgreSQL server cannot be started here, or None."""
    if os.geteuid() != 0:
        return "needs root, to run PostgreSQL as the postgres user"
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        return "needs PostgreSQL's server (apt-get install -y postgresql)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "needs the OS user 'postgres'"
    try:
        import psycopg  # noqa: F401
        import sqlalchemy  # noqa: F401
    except ImportError as e:
        return f"needs the team extra (pip install 'gpugeek-jupyter[team]'): {e}"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def postgres_server() -> Iterator[str]:
    """A running PostgreSQL server; yields its SQLAlchemy URL (database ``postgres``, trust auth)."""
    bindir = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
    postgres = pwd.getpwnam("postgres")
    data = Path(tempfile.mkdtemp(prefix="gpugeek-pg-"))
    os.chown(data, postgres.pw_uid, postgres.pw_gid)
    port = _free_port()
    as_postgres = ["runuser", "-u", "postgres", "--"]
    pid: int | None = None
    try:
        subprocess.run(
            [*as_postgres, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            [*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log"), "-w"]
            + ["-o", f"-k {data} -p {port} -c listen_addresses=127.0.0.1", "start"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        pid = int((data / "postmaster.pid").read_text().split()[0])
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGINT)  # PostgreSQL's fast shutdown
            if wait_until_gone([pid], 30):
                kill([pid])
                time.sleep(0.5)
        shutil.rmtree(data, ignore_errors=True)
