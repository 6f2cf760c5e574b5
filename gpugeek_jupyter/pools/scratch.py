"""The temporary folders of a user's pools: one private root, removed with what made it.

Left to themselves, a local pool's processes leave folders in the shared temporary directory after
the user's server has stopped: dask's ``dask-scratch-space`` (``-<uid>`` when another user made the
plain one first), torch's error files, and multiprocessing's ``pymp-*`` folder of every process that
was killed before its exit handlers ran. Here everything of a local pool lives under one root of
this user's::

    <tmp>/gpugeek-jobs-<uid>/                 0700, this user's; removed when nothing is left in it
        proc-<pid>-XXXX/                      one per process that launches pools (kernel, script,
            owner.lock                        server, agent): flock held while it lives; names its
                                              multiprocessing folder (the pool forkserver's socket)
            pool-<name>-XXXX/                 one per pool: the scheduler's, nannies' and workers'
                                              dask local directory and the workers' TMPDIR (spill
                                              files, torch's error files, the ranks' own pymp-*)

A pool's folder goes when the pool stops (after its workers are gone); a process's folder goes at
its exit, and multiprocessing removes its own ``pymp-*`` then. A process that was killed leaves its
folder with its lock free: the next launch, pool stop or server stop of the same user removes it and
the ``pymp-*`` folder it names (only a ``pymp-*`` folder directly in the temporary directory and
owned by this user). The lock, not a process id, says whether a folder is in use: a folder whose
lock is held is never touched, and another user's root is never entered (it is not this uid's).
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import multiprocessing.util
import os
import re
import shutil
import stat
import tempfile
import threading
from pathlib import Path

log = logging.getLogger(__name__)

PROCESS_PREFIX = "proc-"
POOL_PREFIX = "pool-"
LOCK_FILE = "owner.lock"
_MULTIPROCESSING_PREFIX = "pymp-"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")

_lock = threading.Lock()
_process_folder: Path | None = None
_lock_fd: int | None = None
_owner_pid: int | None = None


def scratch_root(temporary_directory: str | None = None) -> Path:
    """This user's root in the temporary directory (whether or not it exists)."""
    return Path(temporary_directory or tempfile.gettempdir()) / f"gpugeek-jobs-{os.geteuid()}"


def _own_private_directory(path: Path) -> bool:
    """``path`` made (or found) as a real directory of this user's, narrowed to 0700; False when it is
    someone else's or not a directory (it is then left alone)."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError as e:
        log.info("could not make %s: %s", path, e)
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        log.warning(
            "%s is not a directory of this user's (uid %d); pools keep their files elsewhere", path, info.st_uid
        )
        return False
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return True


def process_folder() -> Path | None:
    """This process's folder under the root, made at the first call (with its lock taken and the
    leftovers of killed processes removed first); None when no private root can be had here."""
    global _process_folder, _lock_fd, _owner_pid
    with _lock:
        if _process_folder is not None and _owner_pid == os.getpid() and _process_folder.is_dir():
            return _process_folder
        root = scratch_root()
        if not _own_private_directory(root):
            return None
        _prune(root)
        try:
            # made under another name and renamed once locked: a pruner never sees it without its lock
            staging = Path(tempfile.mkdtemp(prefix=f".new-{os.getpid()}-", dir=root))
            fd = os.open(staging / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            folder = root / f"{PROCESS_PREFIX}{staging.name.removeprefix('.new-')}"
            staging.rename(folder)
        except OSError as e:
            log.warning("pools of this process keep their temporary files in %s: %s", tempfile.gettempdir(), e)
            return None
        _process_folder, _lock_fd, _owner_pid = folder, fd, os.getpid()
        _name_multiprocessing_folder()
        return folder


def _name_multiprocessing_folder() -> None:
    """Write this process's multiprocessing folder into its lock file, for whoever finds the folder
    after this process was killed (multiprocessing removes it itself at a normal exit)."""
    if _lock_fd is None:
        return
    try:
        path = multiprocessing.util.get_temp_dir()  # the pool forkserver's socket is there
        os.ftruncate(_lock_fd, 0)
        os.pwrite(_lock_fd, os.fsencode(path), 0)
    except OSError as e:
        log.info("could not note this process's multiprocessing folder: %s", e)


def new_pool_folder(name: str) -> Path | None:
    """A new folder for pool ``name``'s temporary files, inside this process's; None when this process
    has none (the pool then uses the temporary directory, as dask does)."""
    folder = process_folder()
    if folder is None:
        return None
    try:
        return Path(tempfile.mkdtemp(prefix=f"{POOL_PREFIX}{_UNSAFE.sub('_', name)[:40]}-", dir=folder))
    except OSError as e:
        log.warning("pool %s keeps its temporary files in %s: %s", name, tempfile.gettempdir(), e)
        return None


def remove_pool_folder(folder: Path | None) -> None:
    """Remove a stopped pool's folder (its workers are gone), then what killed processes left."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    prune_scratch()


def prune_scratch() -> None:
    """Remove the folders of this user's processes that are gone (their lock is free) and the
    multiprocessing folders they name; the root too when nothing is left in it."""
    root = scratch_root()
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return
    with _lock:
        _prune(root)
        try:
            root.rmdir()  # only when empty: another live process's folder keeps it
        except OSError:
            pass


def _prune(root: Path) -> None:
    try:
        entries = [e for e in root.iterdir() if e.name.startswith(PROCESS_PREFIX)]
    except OSError:
        return
    for entry in entries:
        if entry == _process_folder and _owner_pid == os.getpid():
            continue
        named = _abandoned(entry)
        if named is None:
            continue  # in use, or not ours
        leftover = _removable_multiprocessing_folder(named)
        if leftover is not None:
            shutil.rmtree(leftover, ignore_errors=True)
        shutil.rmtree(entry, ignore_errors=True)


def _abandoned(entry: Path) -> str | None:
    """What the lock file of a process folder whose owner is gone names ("" if nothing); None when the
    folder is in use (its lock is held), has no lock, or is not this user's."""
    try:
        info = os.lstat(entry)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            return None
        fd = os.open(entry / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # its process lives
        return os.fsdecode(os.read(fd, 4096)).strip()
    finally:
        os.close(fd)


def _removable_multiprocessing_folder(path: str) -> Path | None:
    """``path`` when it is a ``pymp-*`` folder directly in the temporary directory, of this user's."""
    if not path:
        return None
    candidate = Path(path)
    if candidate.parent != Path(tempfile.gettempdir()) or not candidate.name.startswith(_MULTIPROCESSING_PREFIX):
        return None
    try:
        info = os.lstat(candidate)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return None
    return candidate


def _remove_process_folder() -> None:
    """At this process's exit: its folder goes (its pools' are gone by then), the lock with it."""
    global _process_folder, _lock_fd
    with _lock:
        folder, fd = _process_folder, _lock_fd
        if folder is None or _owner_pid != os.getpid():
            return
        _process_folder, _lock_fd = None, None
    shutil.rmtree(folder, ignore_errors=True)
    if fd is not None:
        os.close(fd)
    prune_scratch()


_removal_registered = False


def remove_process_folder_at_exit() -> None:
    """Have this process's folder removed at its exit, once. A pool manager calls it before it
    registers its own shutdown: atexit runs handlers last in, first out, so the folder goes after
    the pools have stopped (before, the folder went under their scheduler and workers, which still
    held their folders there, when the manager was made before this module was imported)."""
    global _removal_registered
    with _lock:
        if not _removal_registered:
            _removal_registered = True
            atexit.register(_remove_process_folder)


remove_process_folder_at_exit()  # a process that makes folders without a manager removes them too
