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
