"""Every rank's full output, kept on disk with the job's record, bounded in size.

Each job's ranks write to ``<job_logs_dir>/<job id>/rank-<N>.log`` as their output arrives, whatever
the notebook shows (grouped, rank 0 only, or nothing with ``--no-stream``). A rank's file keeps its
first and last ``job_log_bytes / 2`` bytes, with one line in between saying how much was left out,
so a long run keeps its start and its end (where a traceback is). Only the newest
``job_logs_keep`` jobs' folders are kept; older ones are removed when a job starts.

>>> JobLogs.read("job-3f2a9c7b", rank=1)    # doctest: +SKIP
'epoch 0: loss 0.91\\n...'
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import TextIO

from ..config import get_config

log = logging.getLogger(__name__)

MEMORY_CHARS = 1_000_000  # kept per rank in memory for JobResult.output
FLUSH_S = 0.5  # a rank's log reaches the disk at least this often while the job runs
STATES_FILE = "ranks.json"  # each rank's state while the job runs and after: running, done, failed, ...


def logs_root() -> Path:
    """Where job logs live: ``GpugeekConfig.job_logs_dir``, else beside the registry file."""
    config = get_config()
    if config.job_logs_dir:
        return Path(config.job_logs_dir).expanduser()
    return Path(config.registry_path).expanduser().parent / "gpugeek-job-logs"


def job_log_path(job_id: str, rank: int) -> Path:
    return logs_root() / job_id / f"rank-{rank}.log"


class _RankLog:
    """One rank's log: written through as it comes, so that it can be read while the job runs.

    Up to ``limit / 2`` characters go to ``rank-N.log``; past that, the rest goes to tail segments
    (``rank-N.tail``, the previous one kept as ``rank-N.tail.old``) of ``limit / 4`` each, so the
    newest ``limit / 4`` to ``limit / 2`` characters are always on disk. At the end the tail is
    appended to the log, with a line saying how much was left out, and the segments are removed.
    """

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.head_left = limit // 2
        self.segment_limit = max(1, (limit - limit // 2) // 2)
        self.written = 0  # characters past the head, in all
        self.segment_size = 0
        self.file = path.open("a", encoding="utf-8", errors="replace")
        self.segment: TextIO | None = None
        self.flushed_at = 0.0

    @property
    def tail_path(self) -> Path:
        return self.path.with_suffix(".tail")

    def write(self, text: str) -> None:
        if self.head_left > 0:
            head, text = text[: self.head_left], text[self.head_left :]
            self.file.write(head)
            self.head_left -= len(head)
        while text:
            if self.segment is None or self.segment_size >= self.segment_limit:
                self._next_segment()
            assert self.segment is not None
            piece, text = text[: self.segment_limit - self.segment_size], text[self.segment_limit - self.segment_size :]
            self.segment.write(piece)
            self.segment_size += len(piece)
            self.written += len(piece)
        now = time.monotonic()
        if now - self.flushed_at >= FLUSH_S:  # readers (the side panel, another kernel) see it soon
            self.flush()
            self.flushed_at = now

    def _next_segment(self) -> None:
        if self.segment is not None:
            self.segment.close()
            self.tail_path.replace(self.tail_path.with_suffix(".tail.old"))
        self.segment = self.tail_path.open("w", encoding="utf-8", errors="replace")
        self.segment_size = 0

    def flush(self) -> None:
        self.file.flush()
        if self.segment is not None:
            self.segment.flush()

    def close(self) -> None:
        if self.segment is not None:
            self.segment.close()
            tail = _read_tail(self.path)
            kept = len(tail)
            if self.written > kept:
                self.file.write(
                    f"\n[... {self.written - kept} characters left out: the log keeps its start and its end ...]\n"
                )
            self.file.write(tail)
            for segment in (self.tail_path, self.tail_path.with_suffix(".tail.old")):
                segment.unlink(missing_ok=True)
        self.file.close()


def _last_lines(path: Path, count: int, chunk: int = 65536) -> list[str]:
    """The last ``count`` lines of a rank's log (its tail segments, else its file), read from the
    end: a poll of a long job reads kilobytes, not the whole log."""
    lines: list[str] = []
    for part in (path.with_suffix(".tail"), path.with_suffix(".tail.old"), path):
        try:
            with part.open("rb") as file:
                size = file.seek(0, os.SEEK_END)
                file.seek(max(0, size - chunk))
                found = file.read().decode("utf-8", errors="replace").splitlines(keepends=True)
                if size > chunk and found:
                    found = found[1:]  # the first line was cut by the seek
        except FileNotFoundError:
            continue
        lines = found + lines
        if len(lines) >= count:
            break
    return lines[-count:]


def _read_tail(path: Path) -> str:
    """The tail segments of a rank's log, oldest first (empty when the log has none)."""
    parts = []
    for segment in (path.with_suffix(".tail.old"), path.with_suffix(".tail")):
        try:
            parts.append(segment.read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            continue
    return "".join(parts)


class JobLogs:
    """The output of one job's ranks: on disk (bounded), and in memory for its ``JobResult``."""

    def __init__(self, job_id: str, on_disk: bool = True) -> None:
        config = get_config()
        self.job_id = job_id
        self.limit = max(1024, int(config.job_log_bytes))
        self.directory = logs_root() / job_id
        self._ranks: dict[int, _RankLog] = {}
        self._memory: dict[int, list[str]] = {}
        self._memory_chars: dict[int, int] = {}
        self._lock = threading.RLock()
        self._states: dict[int, str] = {}
        self._disk_failed = not on_disk
        if not on_disk:
            return
        try:
            self.directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # logs are the user's output
            self.directory.mkdir(mode=0o700, exist_ok=True)
            _prune(self.directory.parent, keep=max(1, int(config.job_logs_keep)), current=self.directory)
        except OSError as e:
            self._give_up_disk(e)

    def write(self, rank: int, text: str) -> None:
        with self._lock:
            used = self._memory_chars.get(rank, 0)
            if used < MEMORY_CHARS:
                self._memory.setdefault(rank, []).append(text[: MEMORY_CHARS - used])
                self._memory_chars[rank] = used + len(text)
            if self._disk_failed:
                return
            try:
                if rank not in self._ranks:
                    self._ranks[rank] = _RankLog(self.directory / f"rank-{rank}.log", self.limit)
                self._ranks[rank].write(text)
            except OSError as e:
                self._give_up_disk(e)

    def mark_attempt(self, attempt: int) -> None:
        """A restart: later output is another attempt's (said in every rank's file)."""
        for rank in list(self._ranks):
            self.write(rank, f"\n--- attempt {attempt + 1} ---\n")

    def text(self, rank: int) -> str:
        """What ``rank`` wrote, up to ``MEMORY_CHARS`` characters."""
        with self._lock:
            return "".join(self._memory.get(rank, []))

    def close(self) -> None:
        with self._lock:
            for rank_log in self._ranks.values():
                try:
                    rank_log.close()
                except OSError as e:
                    log.warning("job %s: could not finish the log of a rank: %s", self.job_id, e)
            self._ranks.clear()

    def _give_up_disk(self, error: OSError) -> None:
        self._disk_failed = True
        log.warning("job %s: its ranks' logs are not kept on disk (%s): %s", self.job_id, self.directory, error)

    def set_states(self, states: dict[int, str]) -> None:
        """Record ranks' states (``running``, ``done``, ``failed``, ``stopped``, ``died``) for readers
        in other processes (the side panel's job view)."""
        with self._lock:
            if self._disk_failed:
                return
            self._states.update(states)
            try:
                scratch = self.directory / f".{STATES_FILE}.{os.getpid()}"
                scratch.write_text(json.dumps({str(r): s for r, s in sorted(self._states.items())}))
                scratch.replace(self.directory / STATES_FILE)  # readers never see half a file
            except OSError as e:
                self._give_up_disk(e)

    @staticmethod
    def states(job_id: str) -> dict[int, str]:
        """The ranks' states of job ``job_id`` as its driver last recorded them ({} when none)."""
        try:
            raw = json.loads((logs_root() / job_id / STATES_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return {int(rank): str(state) for rank, state in raw.items()}

    @staticmethod
    def read(job_id: str, rank: int) -> str:
        """The log of ``rank`` of job ``job_id`` (a ``FileNotFoundError`` when there is none); while
        the job runs, its start and, once it has grown past the start, its newest part."""
        path = job_log_path(job_id, rank)
        head = path.read_text(encoding="utf-8", errors="replace")
        tail = _read_tail(path)
        if not tail:
            return head
        return head + "\n[... the middle of the log is left out while the job runs ...]\n" + tail

    @staticmethod
    def grouped_tail(job_id: str, lines: int = 40) -> str:
        """The last ``lines`` lines of every rank's log, lines alike across ranks shown once
        (``[ranks 0-7] ...``, as ``--output grouped`` shows them)."""
        import io

        from .output import GroupedWriter

        ranks = JobLogs.ranks(job_id)
        if not ranks:
            return ""
        shown = io.StringIO()
        writer = GroupedWriter(len(ranks), stdout=shown, stderr=shown, window=float("inf"), ranks=ranks, align=True)
        for rank in ranks:
            writer(rank, "stdout", "".join(_last_lines(job_log_path(job_id, rank), lines)))
        writer.close()
        return "\n".join(shown.getvalue().splitlines()[-lines:])

    @staticmethod
    def ranks(job_id: str) -> list[int]:
        """The ranks that have a log for job ``job_id``."""
        directory = logs_root() / job_id
        if not directory.is_dir():
            return []
        found = [p.stem.removeprefix("rank-") for p in directory.glob("rank-*.log")]
        return sorted(int(r) for r in found if r.isdigit())


def _prune(root: Path, keep: int, current: Path) -> None:
    """Remove the oldest job folders beyond ``keep``."""
    folders = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("job-") and p != current]
    if len(folders) < keep:
        return
    folders.sort(key=lambda p: p.stat().st_mtime)
    for old in folders[: len(folders) - keep + 1]:
        shutil.rmtree(old, ignore_errors=True)
