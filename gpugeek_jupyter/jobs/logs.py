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

import logging
import shutil
import threading
from collections import deque
from pathlib import Path

from ..config import get_config

log = logging.getLogger(__name__)

MEMORY_CHARS = 1_000_000  # kept per rank in memory for JobResult.output


def logs_root() -> Path:
    """Where job logs live: ``GpugeekConfig.job_logs_dir``, else beside the registry file."""
    config = get_config()
    if config.job_logs_dir:
        return Path(config.job_logs_dir).expanduser()
    return Path(config.registry_path).expanduser().parent / "gpugeek-job-logs"


def job_log_path(job_id: str, rank: int) -> Path:
    return logs_root() / job_id / f"rank-{rank}.log"


class _RankLog:
    """One rank's file: the head written as it comes, the tail held back until the job ends."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.head_left = limit // 2
        self.tail_limit = limit - limit // 2
        self.tail: deque[str] = deque()
        self.tail_size = 0
        self.dropped = 0
        self.file = path.open("a", encoding="utf-8", errors="replace")

    def write(self, text: str) -> None:
        if self.head_left > 0:
            head, text = text[: self.head_left], text[self.head_left :]
            self.file.write(head)
            self.head_left -= len(head)
        if not text:
            return
        self.tail.append(text)
        self.tail_size += len(text)
        while self.tail_size - len(self.tail[0]) >= self.tail_limit:  # whole pieces beyond the limit go
            gone = self.tail.popleft()
            self.tail_size -= len(gone)
            self.dropped += len(gone)
        if self.tail_size > self.tail_limit:  # and the oldest piece is cut to fit
            cut = self.tail_size - self.tail_limit
            self.tail[0] = self.tail[0][cut:]
            self.tail_size -= cut
            self.dropped += cut

    def close(self) -> None:
        if self.dropped:
            self.file.write(f"\n[... {self.dropped} characters left out: the log keeps its start and its end ...]\n")
        self.file.write("".join(self.tail))
        self.file.close()


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
        self._lock = threading.Lock()
        self._disk_failed = not on_disk
        if not on_disk:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
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

    @staticmethod
    def read(job_id: str, rank: int) -> str:
        """The log of ``rank`` of job ``job_id`` (a ``FileNotFoundError`` when there is none)."""
        return job_log_path(job_id, rank).read_text(encoding="utf-8", errors="replace")

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
