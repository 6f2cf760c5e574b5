"""What set_library_log_level keeps of dask's scheduler log: at the default ERROR, not its errors
about broadcasts that met a closing comm (a stopping pool's workers going away); turned up, all."""

from __future__ import annotations

import logging

import pytest

from gpugeek_jupyter.logs import set_library_log_level

CLOSED = "broadcast to tls://127.0.0.1:36199 failed: CommClosedError: in <TLS (closed) Scheduler Broadcast>: Stream is closed"
OTHER = "broadcast to tls://127.0.0.1:36199 failed: ValueError: bad message"


@pytest.mark.parametrize(("level", "kept"), [("ERROR", [OTHER]), ("INFO", [CLOSED, OTHER])])
def test_closed_comm_broadcast_errors_are_left_out_only_at_the_default_level(
    level: str, kept: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = logging.getLogger("distributed.scheduler")
    set_library_log_level(level)
    try:
        with caplog.at_level(logging.ERROR, logger="distributed.scheduler"):
            scheduler.error(CLOSED)
            scheduler.error(OTHER)
    finally:
        set_library_log_level("ERROR")
    assert [r.getMessage() for r in caplog.records if r.name == "distributed.scheduler"] == kept


HEARTBEAT = "Failed to communicate with scheduler during heartbeat."


def _heartbeat_error(worker: logging.Logger, error: BaseException) -> None:
    try:
        raise error
    except OSError:
        worker.exception(HEARTBEAT)


@pytest.mark.parametrize(("level", "kept"), [("ERROR", ["refused"]), ("INFO", ["closed", "refused"])])
def test_a_workers_heartbeat_that_met_a_closed_comm_is_left_out_only_at_the_default_level(
    level: str, kept: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    from distributed.comm.core import CommClosedError

    worker = logging.getLogger("distributed.worker")
    set_library_log_level(level)
    try:
        with caplog.at_level(logging.ERROR, logger="distributed.worker"):
            _heartbeat_error(
                worker, CommClosedError("in <TCP (closed) ConnectionPool.heartbeat_worker>: Stream is closed")
            )
            _heartbeat_error(worker, ConnectionRefusedError("Connection refused"))
    finally:
        set_library_log_level("ERROR")
    errors = [r.exc_info[1] for r in caplog.records if r.name == "distributed.worker" and r.exc_info]
    assert ["closed" if "closed" in str(e) else "refused" for e in errors] == kept
