"""What set_library_log_level keeps of dask's logs: at the default ERROR, not the scheduler's errors
about broadcasts that met a closing comm, nor a worker's about a heartbeat that met one (a stopping
pool's workers and scheduler going away); turned up, all."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import pytest

from gpugeek_jupyter.logs import set_library_log_level

CLOSED = "broadcast to tls://127.0.0.1:36199 failed: CommClosedError: in <TLS (closed) Scheduler Broadcast>: Stream is closed"
OTHER = "broadcast to tls://127.0.0.1:36199 failed: ValueError: bad message"
HEARTBEAT = "Failed to communicate with scheduler during heartbeat."


@contextlib.contextmanager
def library_level(level: str, caplog: pytest.LogCaptureFixture, logger: str) -> Iterator[logging.Logger]:
    """``logger`` with the libraries' level set to ``level`` and its errors captured; ERROR after."""
    set_library_log_level(level)
    try:
        with caplog.at_level(logging.ERROR, logger=logger):
            yield logging.getLogger(logger)
    finally:
        set_library_log_level("ERROR")


@pytest.mark.parametrize(("level", "kept"), [("ERROR", [OTHER]), ("INFO", [CLOSED, OTHER])])
def test_closed_comm_broadcast_errors_are_left_out_only_at_the_default_level(
    level: str, kept: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    with library_level(level, caplog, "distributed.scheduler") as scheduler:
        scheduler.error(CLOSED)
        scheduler.error(OTHER)
    assert [r.getMessage() for r in caplog.records if r.name == "distributed.scheduler"] == kept


@pytest.mark.parametrize(("level", "kept"), [("ERROR", ["refused"]), ("INFO", ["closed", "refused"])])
def test_a_workers_heartbeat_that_met_a_closed_comm_is_left_out_only_at_the_default_level(
    level: str, kept: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    from distributed.comm.core import CommClosedError

    closed = CommClosedError("in <TCP (closed) ConnectionPool.heartbeat_worker>: Stream is closed")
    with library_level(level, caplog, "distributed.worker") as worker:
        for error in (closed, ConnectionRefusedError("Connection refused")):
            try:
                raise error
            except OSError:
                worker.exception(HEARTBEAT)  # as dask's Worker.heartbeat logs it
    errors = [r.exc_info[1] for r in caplog.records if r.name == "distributed.worker" and r.exc_info]
    assert ["closed" if "closed" in str(e) else "refused" for e in errors] == kept
