"""The level of the libraries' logs in processes that run pools (``GpugeekConfig.log_level``).

dask logs a worker's restart, a closed comm at shutdown or a reaped process as warnings, and tornado
and bokeh add their own: lines that read as failures after a launch, a job and a stop that all
worked. Pools set these libraries' loggers to ``log_level`` (``ERROR`` unless configured) in the
launching process and in every local worker (whose nanny passes the level on as
``GPUGEEK_LOG_LEVEL``); turning it up to ``INFO`` shows dask's own account again. At ``ERROR`` the
scheduler's errors about broadcasts that met a closing comm are left out too (the workers of a
stopping pool), and so are a worker's about a heartbeat that met its scheduler's comm closing. Our own loggers (``gpugeek_jupyter.*``) are left alone.
"""

from __future__ import annotations

import logging

LIBRARY_LOGGERS = ("distributed", "tornado", "bokeh")
LOG_LEVEL_VARIABLE = "GPUGEEK_LOG_LEVEL"


class _ClosedCommBroadcasts(logging.Filter):
    """dask's scheduler logs every broadcast that met a comm closing under it as an ERROR (``broadcast
    to tls://...: failed: CommClosedError``): at a pool's stop, or a script's exit with its pool still
    up, that is the workers going away, which the pool's own account already says."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("broadcast to ") and "CommClosedError" in message)


_BROADCAST_FILTER = _ClosedCommBroadcasts()


class _ClosedCommHeartbeats(logging.Filter):
    """A worker logs a heartbeat that met its scheduler's comm closing as an ERROR with a traceback
    (``Failed to communicate with scheduler during heartbeat.``): at a pool's stop, the scheduler
    going away first; the worker then closes or reconnects on its own, and a scheduler lost for
    real is what the pool's own account says (the pool is marked lost)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("Failed to communicate with scheduler during heartbeat"):
            return True
        error = record.exc_info[1] if record.exc_info else None
        from distributed.comm.core import CommClosedError

        return not isinstance(error, CommClosedError)


_HEARTBEAT_FILTER = _ClosedCommHeartbeats()


def set_library_log_level(level: str) -> None:
    """Set dask's, tornado's and bokeh's loggers (and those of their children that dask configured
    with a level of their own, such as ``distributed.client``) to ``level``."""
    number = logging.getLevelName(level.upper())
    if not isinstance(number, int):
        raise ValueError(f"log level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got {level!r}")
    import distributed  # noqa: F401  # importing it configures its loggers: set them afterwards

    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(number)
    for name, noise in (("distributed.scheduler", _BROADCAST_FILTER), ("distributed.worker", _HEARTBEAT_FILTER)):
        noisy = logging.getLogger(name)
        if number >= logging.ERROR:  # dask's own account turned up (INFO, DEBUG) keeps every line
            if noise not in noisy.filters:
                noisy.addFilter(noise)
        else:
            noisy.removeFilter(noise)
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if (
            isinstance(logger, logging.Logger)
            and name.split(".", 1)[0] in LIBRARY_LOGGERS
            and logger.level != logging.NOTSET
        ):
            logger.setLevel(number)
