"""Where a pool's dashboard socket is: one Unix socket per pool, in a directory only its owner can enter.

A local or Slurm pool's scheduler serves its HTTP application (the dask dashboard, ``/metrics``,
the JSON and info pages) on no TCP port, only on::

    <registry dir>/gpugeek-dashboards/<pool id>.sock     (the socket 0600, its directory 0700)

(:mod:`.private_http` makes the scheduler do so.) The same user's Jupyter server, which shares the
registry, finds the socket by the pool's id (:func:`owned_dashboard_socket`, which checks that it
and its directory are this user's) and serves it behind the Jupyter login. Another user cannot
enter the directory, so cannot connect. The socket goes when the scheduler closes; those of pools
that ended otherwise (a killed kernel) are removed at the next launch, as TLS credentials are.

This module imports neither dask nor tornado: the server reads it for every dashboard request.

>>> owned_dashboard_socket(registry, registry.live_pool("dev"))   # doctest: +SKIP
PosixPath('/home/me/.local/share/jupyter/runtime/gpugeek-dashboards/7.sock')
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import GpugeekError, NotFoundError, Phrase, Value
from ..store import make_private_directory

if TYPE_CHECKING:
    from ..store import PoolRecord, Registry

log = logging.getLogger(__name__)

DASHBOARD_DIRECTORY = "gpugeek-dashboards"
SOCKET_SUFFIX = ".sock"
SOCKET_MODE = 0o600
# sockaddr_un's sun_path holds 108 bytes on Linux, 104 on macOS, the terminating NUL included
MAX_SOCKET_PATH = 103


def dashboard_directory(registry: Registry) -> Path:
    """The directory of every pool's dashboard socket, beside ``registry``'s file."""
    return registry.path.parent / DASHBOARD_DIRECTORY


def dashboard_socket_path(registry: Registry, pool_id: int) -> Path:
    """Where pool ``pool_id``'s scheduler serves its dashboard (whether or not it does now)."""
    return dashboard_directory(registry) / f"{int(pool_id)}{SOCKET_SUFFIX}"


def _private_directory_problem(directory: Path) -> str | None:
    """Why ``directory`` cannot hold a socket only this user may open, or None."""
    try:
        info = os.lstat(directory)
    except OSError as e:
        return f"{directory} cannot be read ({e})"
    if not stat.S_ISDIR(info.st_mode):
        return f"{directory} is not a directory"
    if info.st_uid != os.geteuid():
        return f"{directory} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()})"
    if stat.S_IMODE(info.st_mode) & 0o077:
        return f"{directory} is mode {oct(stat.S_IMODE(info.st_mode))}, open to other users"
    return None


def prepare_dashboard_socket(registry: Registry, pool_id: int) -> Path | None:
    """The socket path for pool ``pool_id``'s dashboard, its ``0700`` directory made and anything
    left at the path removed; None (with a warning: the pool then has no dashboard) when the path is
    too long for a Unix socket or the directory cannot be made private."""
    path = dashboard_socket_path(registry, pool_id)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        log.warning(
            "pool %d has no dashboard: its socket path %s is longer than a Unix socket allows (%d bytes); "
            "set GPUGEEK_REGISTRY to a file in a shorter directory",
            pool_id,
            path,
            MAX_SOCKET_PATH,
        )
        return None
    try:
        make_private_directory(path.parent)
    except OSError as e:
        log.warning("pool %d has no dashboard: %s cannot be made (%s)", pool_id, path.parent, e)
        return None
    problem = _private_directory_problem(path.parent)
    if problem:
        log.warning("pool %d has no dashboard: %s", pool_id, problem)
        return None
    remove_dashboard_socket(registry, pool_id)  # a registry made anew restarts ids
    return path


def remove_dashboard_socket(registry: Registry, pool_id: int) -> None:
    """Delete pool ``pool_id``'s socket file (nothing happens when there is none)."""
    path = dashboard_socket_path(registry, pool_id)
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            path.unlink()
    except FileNotFoundError:
        return
    except OSError as e:  # a later launch under this id removes it; nothing listens on it anyway
        log.warning("could not remove the dashboard socket %s: %s", path, e)


def prune_dashboard_sockets(registry: Registry) -> None:
    """Delete the sockets of pools that are no longer live (their owner died without removing them)."""
    try:
        entries = [e for e in dashboard_directory(registry).iterdir() if e.name.endswith(SOCKET_SUFFIX)]
    except FileNotFoundError:
        return
    if not entries:
        return
    live = {p.id for p in registry.list_pools(live_only=True)}
    for entry in entries:
        stem = entry.name.removesuffix(SOCKET_SUFFIX)
        if stem.isdigit() and int(stem) not in live:
            remove_dashboard_socket(registry, int(stem))


def owned_dashboard_socket(registry: Registry, record: PoolRecord) -> Path:
    """The socket of ``record``'s dashboard, checked to be this user's, in a directory of this
    user's that no one else can enter; NotFoundError when the pool serves none here, GpugeekError
    when what is there is not this user's."""
    path = dashboard_socket_path(registry, record.id)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise NotFoundError(
            Phrase(
                "pool {name} serves no dashboard here (only local and Slurm pools launched with this registry do)",
                name=Value(record.name),
            )
        ) from None
    problem = _private_directory_problem(path.parent)
    if problem is None and not stat.S_ISSOCK(info.st_mode):
        problem = f"{path} is not a socket"
    if problem is None and info.st_uid != os.geteuid():
        problem = f"{path} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()})"
    if problem:
        raise GpugeekError(
            Phrase(
                "the dashboard of pool {name} is not served from here: {problem}",
                name=Value(record.name),
                problem=problem,
            )
        )
    return path
