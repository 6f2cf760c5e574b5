"""A rank's output below Python, labelled: file descriptors 1 and 2 of the worker, while a job runs.

Python's ``print`` reaches the notebook through ``sys.stdout`` (:mod:`.capture`); what is written
to the descriptors themselves does not: ``os.write(1, ...)``, ``sys.stdout.buffer``, a C or C++
library (NCCL's and gloo's own lines, ``printf``), a child process that shares them. While a job
runs, descriptors 1 and 2 of the worker point at two files of its own (as torchrun's
``--redirects`` puts a rank's streams in files), read every :data:`POLL_S` on the worker's event loop
and sent as the rank's ``stdout`` and ``stderr``, so they are labelled, grouped and kept in the
job's logs like its prints. At the job's end C's own buffers are flushed (``fflush``), the
descriptors put back and the rest read.

Files, not pipes: a worker that dies (a segfault, an abort) has its last words on disk, in
``<temp dir>/gpugeek-ranks-<uid>/<pid>.err`` (a local pool's temp dir is its own), where nobody
needs to be reading at that moment. The driver, told the file at the group's build
(:func:`stderr_file`), shows them with the rank's death when the worker ran on its host
(:func:`last_words`); the files of a worker that ended are removed by the next worker to start there.

What stays the worker's own: its event loop's output (dask's logging, which goes through
``sys.stderr`` and is routed to the worker's real descriptors, see :func:`passthrough`). Text
written below Python and by ``print`` at about the same moment can arrive in another order.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

POLL_S = 0.05  # the files are read this often while a job runs
IDLE_POLLS = 40  # ... and the reading goes on this many times after a job (2 s), for the next one
READ_BYTES = 1 << 20  # at most this much of a file at a time
STREAMS = (("stdout", 1), ("stderr", 2))


class Writer(Protocol):
    def write(self, stream: str, text: str) -> None: ...


class _Loop(Protocol):
    def call_soon_threadsafe(self, callback: Any, *args: Any) -> Any: ...

    def call_later(self, delay: float, callback: Any, *args: Any) -> Any: ...


class _Stream:
    """One descriptor's file: where the descriptor points while a job runs, and how far it was read."""

    def __init__(self, name: str, fd: int, path: Path) -> None:
        self.name = name
        self.fd = fd  # 1 or 2
        self.path = path
        self.file = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self.saved = os.dup(fd)  # the worker's own descriptor, put back after each job
        self.read_to = 0
        self.decoder = _decoder()

    def redirect(self) -> None:
        if self.read_to or os.fstat(self.file).st_size:  # most jobs write nothing here: no truncate then
            os.ftruncate(self.file, 0)
        self.read_to = 0
        self.decoder = _decoder()
        os.dup2(self.file, self.fd)

    def restore(self) -> None:
        os.dup2(self.saved, self.fd)

    def read_new(self, final: bool = False) -> str:
        chunks: list[str] = []
        while True:
            data = os.pread(self.file, READ_BYTES, self.read_to)
            if not data:
                break
            self.read_to += len(data)
            chunks.append(self.decoder.decode(data))
        if final:
            chunks.append(self.decoder.decode(b"", final=True))
        return "".join(chunks)


def _decoder() -> Any:
    import codecs

    return codecs.getincrementaldecoder("utf-8")(errors="replace")


class DescriptorCapture:
    """This worker process's two files; :meth:`begin` and :meth:`end` bracket each job."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        pid = os.getpid()
        self.streams = [_Stream(name, fd, folder / f"{pid}.{name[3:]}") for name, fd in STREAMS]  # stderr_file()
        self._writer: Writer | None = None
        self._loop: _Loop | None = None
        self._lock = threading.Lock()
        self._polling = False
        self._idle_polls = 0

    def begin(self, writer: Writer, loop: _Loop) -> None:
        """From now on what descriptors 1 and 2 get goes to ``writer`` (read on ``loop``)."""
        _flush_buffers()
        with self._lock:
            for stream in self.streams:
                stream.redirect()
            self._writer, self._loop = writer, loop
            self._idle_polls = 0
            if not self._polling:  # started once for a run of jobs: waking the loop per job costs more
                self._polling = True
                loop.call_soon_threadsafe(loop.call_later, POLL_S, self._poll)

    def end(self) -> None:
        """The descriptors are the worker's again; what they got during the job is sent."""
        _flush_buffers()
        with self._lock:
            for stream in self.streams:
                stream.restore()
            writer, self._writer = self._writer, None
            if writer is not None:
                self._send(writer, final=True)

    def _poll(self) -> None:
        """On the worker's event loop, every ``POLL_S`` while jobs run, and ``IDLE_POLLS`` more
        after the last one ended (the next cell of a REPL finds it running)."""
        with self._lock:
            if self._loop is None:
                self._polling = False
                return
            if self._writer is None:
                self._idle_polls += 1
                if self._idle_polls > IDLE_POLLS:
                    self._polling = False
                    return
            else:
                self._send(self._writer, final=False)
            self._loop.call_later(POLL_S, self._poll)

    def _send(self, writer: Writer, final: bool) -> None:
        for stream in self.streams:
            try:
                text = stream.read_new(final)
            except OSError as e:  # the file went away (a cleaner of the temp dir): the job goes on
                log.info("could not read the %s of this rank: %s", stream.name, e)
                continue
            if text:
                writer.write(stream.name, text)

    def close(self) -> None:
        for stream in self.streams:
            with contextlib.suppress(OSError):
                stream.restore()
                os.close(stream.file)
                os.unlink(stream.path)

    def passthrough(self, name: str) -> Any:
        """A text stream on the worker's own descriptor ``name`` (its saved copy), for what must not
        be the job's: the event loop's output while descriptors 1 and 2 are the job's."""
        stream = next(s for s in self.streams if s.name == name)
        return open(stream.saved, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115


LAST_WORDS_CHARS = 2000  # of a dead worker's stderr file, shown with its death


def last_words(path: str) -> str | None:
    """What a worker wrote to its descriptor 2 during its last job (a crash's faulthandler dump, a
    C++ abort's message), from the start (the file holds that job's only), at most
    :data:`LAST_WORDS_CHARS` of it: its :func:`stderr_file`, read on the worker's host."""
    try:
        with open(path, "rb") as file:
            head = file.read(LAST_WORDS_CHARS * 4).decode("utf-8", errors="replace")
            size = file.seek(0, os.SEEK_END)
    except OSError:
        return None
    text = head[:LAST_WORDS_CHARS].strip()
    if not text:
        return None
    if size > len(text.encode()) + 1:
        text += f"\n... (the rest is in {path})"
    return text


def stderr_file() -> Path:
    """Where this worker's descriptor 2 goes while a job runs."""
    return folder() / f"{os.getpid()}.err"


def folder() -> Path:
    """``<temp dir>/gpugeek-ranks-<uid>``, private to the user."""
    path = Path(tempfile.gettempdir()) / f"gpugeek-ranks-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def remove_ended(path: Path) -> None:
    """Remove the files of workers that no longer run (their last words were there to be read)."""
    for file in path.glob("*.out"):
        pid = file.name.split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            for suffix in (".out", ".err"):
                with contextlib.suppress(OSError):
                    file.with_suffix(suffix).unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_libc: Any = None


def _flush_buffers() -> None:
    """What is still buffered for descriptors 1 and 2 goes out now: Python's own streams
    (``sys.stdout.buffer`` writes there) and C's (``fflush(NULL)``: ``printf`` into a file is
    buffered in full, not line by line as on a terminal)."""
    global _libc
    for stream in (sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None)
        _libc.fflush(None)
    except (OSError, AttributeError):  # no C library to ask: nothing of C's is buffered then
        pass
