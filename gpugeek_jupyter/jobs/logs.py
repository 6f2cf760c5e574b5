"""Every rank's full output, kept on disk with the job's record, bounded in size.

Each job's ranks write to ``<job_logs_dir>/<job id>/rank-<N>.log`` as their output arrives, whatever
the notebook shows (grouped, rank 0 only, or nothing with ``--no-stream``). A rank's file keeps its
first and last ``job_log_bytes / 2`` bytes, with one line in between saying how much was left out,
so a long run keeps its start and its end (where a traceback is). Only the newest
``job_logs_keep`` jobs' folders are kept: the older ones are removed on a housekeeping thread, never
on the job's path (a job's cost does not grow with the number of jobs kept).

The ranks' states are for readers in other processes (the side panel's job view, through
:meth:`JobLogs.states`): a job that runs longer than ``FLUSH_S`` writes them to ``ranks.json`` then
and at its end; a shorter one has its final states in its registry row only. A job that printed
nothing makes no folder.

>>> JobLogs.read("job-3f2a9c7b8c19", rank=1)    # doctest: +SKIP
'epoch 0: loss 0.91\\n...'
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

from ..config import get_config

log = logging.getLogger(__name__)

MEMORY_CHARS = 1_000_000  # kept per rank in memory for JobResult.output
FLUSH_S = 0.5  # a rank's log reaches the disk at least this often while the job runs
STATES_FILE = "ranks.json"  # each rank's state while the job runs and after: running, done, failed, ...
Row = tuple[int, float, str, float]  # a gg.log value: (step, time, name, value)
MetricsCallback = Callable[[int, int, list[Row]], None]  # (attempt, rank, [(step, time, name, value)])
METRICS_FILE_NAME = "metrics.jsonl"  # the ranks' gg.log values (see .metrics)
METRICS_ROWS = 500_000  # rows kept per rank and attempt; past half of it, ever coarser (MetricsFile)
COARSER_LEVELS = 20  # past METRICS_ROWS / 2 rows, this many levels, each keeping half as many steps
PRUNE_LISTING_JOBS = 100  # the logs folder is listed again after this many jobs (other processes' jobs count)


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


class MetricsFile:
    """One job's ``metrics.jsonl``, appended to as batches arrive, bounded per rank and attempt."""

    def __init__(self, path: Path, limit: int = METRICS_ROWS) -> None:
        self.path = path
        self.limit = max(2, limit)
        self.kept: dict[tuple[int, int], int] = {}  # rows kept per (attempt, rank)
        self.file = path.open("a", encoding="utf-8")

    def stride(self, attempt: int, rank: int) -> int | None:
        """Every how many steps a row is kept now (None: no more). The first ``limit / 2`` rows at
        full grain; then ``COARSER_LEVELS`` levels of ``limit / (2 * COARSER_LEVELS)`` rows each, the
        n-th keeping every ``2**n``-th step: ``limit`` rows span ``limit / 40 * 2**21`` steps, the
        start at full grain and the rest ever coarser."""
        kept, half = self.kept.get((attempt, rank), 0), self.limit // 2
        if kept < half:
            return 1
        level = 1 + (kept - half) // max(1, (self.limit - half) // COARSER_LEVELS)
        return 2**level if level <= COARSER_LEVELS else None

    def write(self, attempt: int, rank: int, rows: list[Row]) -> None:
        stride = self.stride(attempt, rank)
        if stride is None:
            return
        if stride > 1:
            rows = [row for row in rows if row[0] % stride == 0]
        if not rows:
            return
        self.kept[(attempt, rank)] = self.kept.get((attempt, rank), 0) + len(rows)
        line = json.dumps({"attempt": attempt, "rank": rank, "rows": [list(r) for r in rows]}, separators=(",", ":"))
        self.file.write(line + "\n")
        self.file.flush()  # a rank sends a batch at most every METRICS_INTERVAL_S: readers see it at once

    def close(self) -> None:
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
        self.keep = max(1, int(config.job_logs_keep))
        self.directory = logs_root() / job_id  # made at the first write: a quiet short job makes none
        self._made = False
        self._ranks: dict[int, _RankLog] = {}
        self._memory: dict[int, list[str]] = {}
        self._memory_chars: dict[int, int] = {}
        self._lock = threading.RLock()
        self._states: dict[int, str] = {}
        self._states_written: dict[int, str] | None = None  # what ranks.json says (None: not written)
        self._states_due_at: float | None = None  # when a running attempt's states first reach the disk
        self._disk_failed = not on_disk
        self.attempt = 0  # the attempt that writes now (restarts count up, see mark_attempt)
        self._metrics: MetricsFile | None = None
        # told every batch of gg.log values as it is kept: (attempt, rank, rows); e.g. a detached
        # job's event stream, a live chart
        self.on_metrics: MetricsCallback | None = None

    def _make_directory(self) -> None:
        if self._made:
            return
        try:
            self.directory.mkdir(mode=0o700)
        except FileNotFoundError:  # the first job here
            self.directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # logs are the user's output
            self.directory.mkdir(mode=0o700, exist_ok=True)
        except FileExistsError:
            pass
        self._made = True
        with _writing_lock:
            _writing.add(self.directory)

    def write(self, rank: int, text: str) -> None:
        with self._lock:
            used = self._memory_chars.get(rank, 0)
            if used < MEMORY_CHARS:
                self._memory.setdefault(rank, []).append(text[: MEMORY_CHARS - used])
                self._memory_chars[rank] = used + len(text)
            self._write_to_disk_locked(rank, text)

    def _write_to_disk_locked(self, rank: int, text: str) -> None:
        """Append ``text`` to ``rank``'s file (made at its first text); a failing disk is given up once."""
        if self._disk_failed:
            return
        try:
            if rank not in self._ranks:
                self._make_directory()
                self._ranks[rank] = _RankLog(self.directory / f"rank-{rank}.log", self.limit)
            self._ranks[rank].write(text)
        except OSError as e:
            self._give_up_disk(e)

    def write_traceback(self, rank: int, traceback: str) -> None:
        """Add a failed ``rank``'s traceback to its file (not to :meth:`text`: the cell and the
        result show it from the rank's report), so that readers of the logs, the side panel's
        output tail among them, see why the rank failed."""
        text = traceback if traceback.endswith("\n") else traceback + "\n"
        with self._lock:
            self._write_to_disk_locked(rank, text)

    def mark_attempt(self, attempt: int) -> None:
        """A restart: later output is another attempt's (said in every rank's file)."""
        self.attempt = attempt
        for rank in list(self._ranks):
            self.write(rank, f"\n--- attempt {attempt + 1} ---\n")

    def write_metrics(self, rank: int, rows: list[Row]) -> None:
        """Keep a batch of ``rank``'s ``gg.log`` values with the job (``metrics.jsonl``, bounded:
        see :mod:`.metrics`), then tell :attr:`on_metrics`."""
        with self._lock:
            if not self._disk_failed:
                try:
                    if self._metrics is None:
                        self._make_directory()
                        self._metrics = MetricsFile(self.directory / METRICS_FILE_NAME)
                    self._metrics.write(self.attempt, rank, rows)
                except OSError as e:
                    self._give_up_disk(e)
        if self.on_metrics is not None:
            try:
                self.on_metrics(self.attempt, rank, rows)
            except Exception as e:  # a display or a stream failing must not lose the job
                log.warning("job %s: the metrics of rank %d could not be shown: %s", self.job_id, rank, e)

    def text(self, rank: int) -> str:
        """What ``rank`` wrote, up to ``MEMORY_CHARS`` characters."""
        with self._lock:
            return "".join(self._memory.get(rank, []))

    def close(self) -> None:
        """Finish every rank's file; a states file written while the job ran is brought up to date
        (a job that wrote none has its final states in its registry row, see :meth:`states`)."""
        with self._lock:
            for rank_log in self._ranks.values():
                try:
                    rank_log.close()
                except OSError as e:
                    log.warning("job %s: could not finish the log of a rank: %s", self.job_id, e)
            self._ranks.clear()
            if self._metrics is not None:
                try:
                    self._metrics.close()
                except OSError as e:
                    log.warning("job %s: could not finish its metrics: %s", self.job_id, e)
                self._metrics = None
            if self._states_written is not None:
                self.write_states()
            if self._made:  # a new folder: the oldest beyond job_logs_keep go, off the job's path
                with _writing_lock:
                    _writing.discard(self.directory)
                _housekeeping(_prune_task(self.directory, self.keep))
                self._made = False

    def _give_up_disk(self, error: OSError) -> None:
        self._disk_failed = True
        log.warning("job %s: its ranks' logs are not kept on disk (%s): %s", self.job_id, self.directory, error)

    def set_states(self, states: dict[int, str], write: bool = True) -> None:
        """Record ranks' states (``running``, ``done``, ``failed``, ``stopped``, ``died``) for readers
        in other processes (the side panel's job view); ``write=False`` keeps them for the next
        :meth:`write_states` (a short job writes its file once, when it ends)."""
        with self._lock:
            self._states.update(states)
            if write:
                self.write_states()

    def ranks_running(self, ranks: Iterable[int]) -> None:
        """An attempt's ranks started: their states reach the disk once it has lasted ``FLUSH_S``
        (:meth:`write_states_when_due`), and with every change after that (:meth:`update_states`)."""
        self.set_states({rank: "running" for rank in ranks}, write=False)
        self._states_due_at = time.monotonic() + FLUSH_S

    @property
    def states_due_at(self) -> float | None:
        """When :meth:`write_states_when_due` next has something to do (None: nothing due)."""
        return self._states_due_at

    def write_states_when_due(self, now: float) -> None:
        """An attempt that lasts: readers see its ranks running from now on."""
        if self._states_due_at is not None and now >= self._states_due_at:
            self._states_due_at = None
            self.write_states()

    def update_states(self, states: dict[int, str]) -> None:
        """Record ranks' new states, written at once when the states file is already kept."""
        self.set_states(states, write=self._states_written is not None)

    def write_states(self) -> None:
        """Write the ranks' states recorded so far (nothing when the file already says them)."""
        with self._lock:
            if self._disk_failed or self._states == self._states_written:
                return
            text = json.dumps({str(r): s for r, s in sorted(self._states.items())})
            try:
                self._make_directory()
                scratch = os.path.join(self.directory, f".{STATES_FILE}.{os.getpid()}")
                with open(scratch, "w", encoding="utf-8") as file:
                    file.write(text)
                os.replace(scratch, os.path.join(self.directory, STATES_FILE))  # readers never see half a file
            except OSError as e:
                self._give_up_disk(e)
                return
            self._states_written = dict(self._states)

    @staticmethod
    def states(job_id: str) -> dict[int, str]:
        """The ranks' states of job ``job_id`` as its driver last recorded them ({} when none): its
        ``ranks.json`` (a job that ran longer than ``FLUSH_S``), else the final states in its
        registry row (a short job's only record of them)."""
        try:
            raw = json.loads((logs_root() / job_id / STATES_FILE).read_text())
        except FileNotFoundError:
            raw = _recorded_states(job_id)
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


def rank_state(status: str) -> str:
    """A rank's state as readers see it (``done``, ``failed``, ``stopped``, ``died``, ``killed``) from
    its report's status (:class:`~.result.RankReport`)."""
    return {"ok": "done", "cancelled": "stopped"}.get(status, status)


def _recorded_states(job_id: str) -> dict[str, str]:
    import sqlite3

    from ..errors import GpugeekError
    from ..store import get_registry

    try:
        summary = get_registry().job(job_id).summary or {}
    except (GpugeekError, sqlite3.Error, OSError) as e:  # no such job, or no registry to read
        log.debug("job %s: no recorded states: %s", job_id, e)
        return {}
    states = summary.get("states")
    return dict(states) if isinstance(states, dict) else {}


# -- housekeeping: off the job's path ---------------------------------------------------------------
class _Pruner:
    """Keeps the newest ``keep`` job folders of one logs folder, at a constant cost per job.

    The folder is listed (and its folders' times read) at this process's first job there and again
    every ``PRUNE_LISTING_JOBS`` jobs, so that other processes' jobs count too; in between, a new job
    is appended to the list kept here, and past ``keep`` the oldest folders go, never one that a
    job of this process is still writing.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folders: dict[str, None] = {}  # folder names, oldest first
        self.jobs_since_listing: int | None = None  # None: not listed yet

    def added(self, name: str, keep: int) -> None:
        if self.jobs_since_listing is None or self.jobs_since_listing >= PRUNE_LISTING_JOBS:
            self._list()  # it may find jobs whose own turn here is still to come: they stay where listed
        else:
            self.jobs_since_listing += 1
        if name not in self.folders and (self.root / name).is_dir():  # not one removed meanwhile
            self.folders[name] = None  # the newest
        excess = len(self.folders) - keep
        if excess <= 0:
            return
        with _writing_lock:
            writing = {folder.name for folder in _writing if folder.parent == self.root}
        for oldest in list(itertools.islice(self.folders, excess + len(writing))):
            if excess <= 0:
                break
            if oldest in writing:
                continue
            del self.folders[oldest]
            shutil.rmtree(self.root / oldest, ignore_errors=True)
            excess -= 1

    def _list(self) -> None:
        found: list[tuple[int, str]] = []
        with os.scandir(self.root) as entries:
            for entry in entries:
                if entry.name.startswith("job-") and entry.is_dir(follow_symlinks=False):
                    try:
                        found.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name))
                    except FileNotFoundError:  # removed meanwhile (another process pruned it)
                        continue
        found.sort()
        self.folders = dict.fromkeys(name for _, name in found)
        self.jobs_since_listing = 0


_writing: set[Path] = set()  # job folders this process's JobLogs write now: never pruned
_writing_lock = threading.Lock()
_pruners: dict[Path, _Pruner] = {}
_executor: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None  # (pid, its one thread)
_executor_lock = threading.Lock()


def _prune_task(directory: Path, keep: int) -> Callable[[], None]:
    def prune() -> None:
        pruner = _pruners.get(directory.parent)
        if pruner is None:
            pruner = _pruners[directory.parent] = _Pruner(directory.parent)
        pruner.added(directory.name, keep)

    return prune


def _housekeeping(task: Callable[[], None]) -> concurrent.futures.Future[None]:
    """Run ``task`` on this process's job-logs housekeeping thread (one, in submission order); its
    failure is logged, never raised."""
    global _executor

    def logged() -> None:
        try:
            task()
        except OSError as e:
            log.warning("job logs: old jobs' logs could not be removed: %s", e)

    with _executor_lock:
        if _executor is None or _executor[0] != os.getpid():  # a forked child has no thread of ours
            _executor = (os.getpid(), concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gpugeek-job-logs"))
        return _executor[1].submit(logged)


def wait_for_housekeeping(timeout: float | None = None) -> None:
    """Return once the job-logs housekeeping submitted so far has run (old jobs' folders removed)."""
    _housekeeping(lambda: None).result(timeout)
