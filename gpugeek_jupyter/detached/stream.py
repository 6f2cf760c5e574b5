"""A detached job's output as one ordered, persisted stream: what a live view would have shown.

The agent appends one JSON line per event to ``<job logs>/<job id>/events.jsonl`` as it comes:
``{"seq", "at", "rank", "kind", ...}`` with ``kind`` ``out`` (``stream``, ``text``), ``progress``
(a bar's state), ``metrics`` (``attempt`` and ``rows``: a batch of ``gg.log`` values,
``[step, time, name, value]`` each, a NaN as ``null``), ``notice`` (``text``: a restart, a wait in the queue) or ``end`` (the job's
``status``, ``failure`` and, when a rank raised, ``failed_rank`` and its ``traceback``; always the
last line). A follower reads from the first line, then waits
for more, and stops after the ``end`` line, as Ray's job log tail does: every follower gets the
replay, then the live lines. The stream is bounded by ``job_log_bytes``: past it, output events are
dropped and one ``notice`` says so (``progress``, ``notice`` and ``end`` lines are always written);
the per-rank logs (:mod:`gpugeek_jupyter.jobs.logs`) still keep each rank's start and end.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..config import get_config
from ..jobs.logs import logs_root

STREAM_FILE = "events.jsonl"
END_LINE_WAIT_S = 2.0  # how long a follower waits for the end line once the job's row is final
FOLLOW_POLL_S = 0.1


def stream_path(job_id: str) -> Path:
    return logs_root() / job_id / STREAM_FILE


class StreamWriter:
    """Appends a job's events (thread-safe: ranks' output arrives on dask's threads)."""

    def __init__(self, job_id: str, limit: int | None = None) -> None:
        self.path = stream_path(job_id)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self._seq = 0
        self._written = 0
        self._limit = limit if limit is not None else get_config().job_log_bytes
        self._cut = False
        self.last_at = 0.0  # the time of the last line written before this writer (see resume)

    @classmethod
    def resume(cls, job_id: str) -> StreamWriter:
        """The writer of a stream another agent began (it died): numbering goes on from its last line,
        whose time is :attr:`last_at`."""
        path = stream_path(job_id)
        try:  # a line the dead writer left half-written goes: the stream stays whole lines
            data = path.read_bytes()
            if data and not data.endswith(b"\n"):
                os.truncate(path, data.rfind(b"\n") + 1)
        except FileNotFoundError:
            pass
        writer = cls(job_id)
        for event in read_events(job_id, limit=sys.maxsize):
            writer._seq = int(event["seq"]) + 1
            writer.last_at = float(event["at"])
            if event.get("kind") == "out":
                writer._written += len(json.dumps(event)) + 1
        return writer

    def output(self, rank: int, stream: str, text: str) -> None:
        self._put({"rank": rank, "kind": "out", "stream": stream, "text": text}, bounded=True)

    def progress(self, rank: int, state: dict[str, Any]) -> None:
        self._put({"rank": rank, "kind": "progress", "state": state})

    def metrics(self, attempt: int, rank: int, rows: list[tuple[int, float, str, float]]) -> None:
        shown = [[step, at, name, value if math.isfinite(value) else None] for step, at, name, value in rows]
        self._put({"rank": rank, "kind": "metrics", "attempt": attempt, "rows": shown})

    def notice(self, text: str) -> None:
        self._put({"rank": None, "kind": "notice", "text": text})

    def end(
        self, status: str, failure: str | None, failed_rank: int | None = None, traceback: str | None = None
    ) -> None:
        """The last line: how the job ended and, when a rank raised, that rank's traceback (user frames,
        as the cell shows it), so a replay ends as the live view did."""
        self._put(
            {
                "rank": None,
                "kind": "end",
                "status": status,
                "failure": failure,
                "failed_rank": failed_rank,
                "traceback": traceback,
            }
        )
        self.close()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def _put(self, event: dict[str, Any], bounded: bool = False) -> None:
        with self._lock:
            if self._file.closed:
                return
            if bounded and self._written >= self._limit:
                if not self._cut:
                    self._cut = True
                    self._write_line({"rank": None, "kind": "notice", "text": self._cut_notice()})
                return
            line = self._write_line(event)
            if bounded:
                self._written += len(line)

    def _write_line(self, event: dict[str, Any]) -> str:
        event = {"seq": self._seq, "at": round(time.time(), 3), **event}
        self._seq += 1
        line = json.dumps(event, separators=(",", ":")) + "\n"
        self._file.write(line)
        self._file.flush()  # a follower in another process reads it at once
        return line

    def _cut_notice(self) -> str:
        return (
            f"the replay of this job's output stops here: it passed job_log_bytes ({self._limit} bytes); "
            "every rank's full log keeps its start and end (%gpugeek_logs)"
        )


def read_events(job_id: str, since: int = 0, limit: int = 500) -> list[dict[str, Any]]:
    """Up to ``limit`` of the job's events from ``seq`` ``since`` on, as written so far (a page of the
    stream, for ``GET /gpugeek/jobs/<id>/output?since=``)."""
    path = stream_path(job_id)
    events: list[dict[str, Any]] = []
    try:
        with path.open("r", encoding="utf-8", errors="replace") as file:
            for line in file:
                if not line.endswith("\n"):
                    break  # being written: the next page has it
                event = json.loads(line)
                if event["seq"] >= since:
                    events.append(event)
                    if len(events) >= limit:
                        break
    except FileNotFoundError:
        pass
    return events


def follow(
    job_id: str,
    since: int = 0,
    keep_following: Callable[[], bool] = lambda: True,
    poll: float = FOLLOW_POLL_S,
) -> Iterator[dict[str, Any]]:
    """The job's events from ``seq`` ``since`` on: those written so far, then new ones as they come,
    until the ``end`` event (included) or until ``keep_following()`` turns False with nothing
    left to read (the job ended without its stream saying so: its agent died)."""
    path = stream_path(job_id)
    position = 0
    pending = ""
    gone_at: float | None = None  # when keep_following() first said no
    while True:
        chunk = ""
        if path.exists():
            with path.open("r", encoding="utf-8", errors="replace") as file:
                file.seek(position)
                chunk = file.read()
                position = file.tell()
        pending += chunk
        *lines, pending = pending.split("\n")
        for line in lines:
            if not line:
                continue
            event = json.loads(line)
            if event["seq"] < since:
                continue
            yield event
            if event["kind"] == "end":
                return
        if not chunk:
            if not keep_following():
                # the agent writes the end line just after the job's row turns final: wait for it a
                # little (it carries the failing rank's traceback); an agent that died writes none
                gone_at = time.monotonic() if gone_at is None else gone_at
                if time.monotonic() - gone_at >= END_LINE_WAIT_S:
                    return
            time.sleep(poll)
