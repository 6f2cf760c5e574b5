"""Private state: files only their owner can read, in directories only their owner can enter.

The registry lists every pool's scheduler address, and its directory holds each pool's TLS
credentials and every job's logs, so on a shared host (JupyterHub, a login node, a Slurm node)
nothing of it may be readable by another user. Files are created ``0600`` (SQLite gives its
``-wal`` and ``-shm`` files the database file's mode), directories ``0700``; both are checked
on open and repaired when they are this user's, with one warning per path and process; only the
registry's own folder, chosen by the user, is refused instead when it is this user's and open to
others (:class:`~gpugeek_jupyter.errors.RegistryFolderOpenError`, naming the ``chmod`` that fixes it).

A directory that is shared by design (sticky, like ``/tmp``), the home directory or another
user's is never changed: its files stay ``0600`` and the warning says to move the registry.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

from ..errors import RegistryFolderOpenError

log = logging.getLogger(__name__)

PRIVATE_DIRECTORY_MODE = 0o700
PRIVATE_FILE_MODE = 0o600

_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(path: Path, message: str, *args: object) -> None:
    with _warned_lock:
        if str(path) in _warned:
            return
        _warned.add(str(path))
    log.warning(message, *args)


def _is_open_to_others(mode: int) -> bool:
    return bool(stat.S_IMODE(mode) & 0o077)


def make_private_directory(path: Path) -> Path:
    """``path`` as a directory only this user can enter: created ``0700`` (parents as usual), or an
    existing one of this user's narrowed to ``0700`` with one warning. Returns ``path``."""
    try:
        path.mkdir(mode=PRIVATE_DIRECTORY_MODE, parents=False)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=PRIVATE_DIRECTORY_MODE, exist_ok=True)
    except FileExistsError:
        pass
    check_private_directory(path)
    return path


def check_private_directory(path: Path) -> None:
    """Narrow this user's directory ``path`` to ``0700`` if it is wider (warning once); leave a
    shared, home or foreign directory as it is, warning once that other users can list it."""
    info = path.stat()
    if not _is_open_to_others(info.st_mode):
        return
    mode = stat.S_IMODE(info.st_mode)
    shared = bool(info.st_mode & stat.S_ISVTX) or info.st_uid != os.geteuid() or _is_home(path)
    if shared:
        _warn_once(
            path,
            "%s is mode %s and shared with other users (%s): gpugeek keeps its files there 0600, but other "
            "users can list them; set GPUGEEK_REGISTRY to a file in a private directory "
            "(e.g. ~/.local/share/jupyter/runtime/gpugeek.sqlite)",
            path,
            oct(mode),
            "another user's" if info.st_uid != os.geteuid() else "sticky" if info.st_mode & stat.S_ISVTX else "home",
        )
        return
    os.chmod(path, PRIVATE_DIRECTORY_MODE)
    _warn_once(path, "%s was mode %s, open to other users; made it 0700", path, oct(mode))


def _is_home(path: Path) -> bool:
    try:
        return path.resolve() == Path.home().resolve()
    except (OSError, RuntimeError):
        return False


def make_private_file(path: Path) -> None:
    """Create ``path`` empty and ``0600`` if it does not exist; narrow it to ``0600`` if it is this
    user's and wider (warning once). Never follows a symbolic link at ``path``."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except FileExistsError:
        check_private_file(path)
    else:
        os.close(fd)


def check_private_file(path: Path) -> None:
    """Narrow this user's file ``path`` to ``0600`` if it is wider, warning once; a missing file is fine."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode) or not _is_open_to_others(info.st_mode):
        return
    if info.st_uid != os.geteuid():
        _warn_once(
            path, "%s belongs to uid %d and is mode %s; other users can read it", path, info.st_uid, oct(info.st_mode)
        )
        return
    os.chmod(path, PRIVATE_FILE_MODE)
    _warn_once(path, "%s was mode %s, readable by other users; made it 0600", path, oct(stat.S_IMODE(info.st_mode)))


def write_private_file(path: Path, data: bytes) -> None:
    """Write ``data`` to a new ``0600`` file ``path`` (never an existing file, never through a link)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def refuse_open_registry_directory(folder: Path) -> None:
    """Raise :class:`RegistryFolderOpenError` if ``folder``, the registry's own, exists, is this
    user's and open to others: the user chose it, so it is never narrowed behind their back. A
    shared, home or foreign folder keeps its warning (:func:`check_private_directory`); a missing
    one is created ``0700``."""
    try:
        info = folder.stat()
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISDIR(info.st_mode):
        return  # not a folder at all: creating the registry says so
    if not _is_open_to_others(info.st_mode) or info.st_mode & stat.S_ISVTX or info.st_uid != os.geteuid():
        return
    if _is_home(folder):
        return
    raise RegistryFolderOpenError.of(folder, stat.S_IMODE(info.st_mode))


def secure_registry_files(path: Path) -> None:
    """The registry's directory ``0700`` (an existing one of this user's open to others is refused),
    the database file created ``0600`` before SQLite opens it (so that SQLite gives its ``-wal`` and
    ``-shm`` files that mode too), existing files narrowed."""
    refuse_open_registry_directory(path.parent)
    make_private_directory(path.parent)
    make_private_file(path)
    for suffix in SQLITE_COMPANIONS:
        check_private_file(path.with_name(path.name + suffix))
