"""Where every rank of a pool's running job is, live (``%gpugeek_where``, ``GET /gpugeek/jobs/<id>/where``).

Meant for a second notebook or console while the job's own kernel is busy: :func:`where_report`
reads the pool's scheduler address from the registry, connects a short-lived dask client and asks
each worker on its own, with a deadline, for its rank's stack (:func:`.rank.stack_rank`). A worker
frozen with the GIL held cannot answer; it is reported "not responding" once the deadline passes
instead of holding up the report.

Ranks with the same innermost user location and collective are one group (as Ray's log dedup
counts what repeats), largest first, then each group's stack:

>>> print(where_report("dev").format())  # doctest: +SKIP
job 3f2a9c on pool 'dev', 8 ranks: ranks 1-7 waiting in dist.all_reduce at train.py:42; rank 0 at data.py:17 in __getitem__
ranks 1-7, waiting in dist.all_reduce (stack of rank 1, pid 4242 on 10.0.0.2):
    train.py:42 in step: dist.all_reduce(loss)
      -> torch/distributed/c10d_logger.py:81 in wrapper -> torch/distributed/distributed_c10d.py:2806 in all_reduce
    train.py:80 in <module>: step(batch)
    (9 library frames not shown)
rank 0 (pid 4241 on 10.0.0.1):
    data.py:17 in __getitem__: time.sleep(1)
    ...

:func:`group_where` gives the same text for the dicts :func:`.rank.where_rank` answers, keyed by
rank, which the job driver has at a timeout or an interrupt.
"""

from __future__ import annotations

import collections
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import GpugeekError, NotFoundError, Phrase, Setting, Value
from ..store import JobStatus, PoolRecord, Registry, get_registry
from .output import format_ranks
from .rank_stack import stack_frames

__all__ = ["WHERE_TIMEOUT_S", "WhereReport", "group_where", "pool_to_ask", "stack_frames", "where_report"]

WHERE_TIMEOUT_S = 5.0  # a worker that has not answered within this is "not responding"
CONNECT_TIMEOUT_S = 5.0  # to reach the pool's scheduler
CALLS_SHOWN = 3  # library frames shown below the innermost user frame (what the rank is calling)

NOT_RESPONDING = "not responding"
FINISHED = "finished"


# -- grouping: the same text for a live report and for the driver's where_rank answers ---------------
_AT = re.compile(r"^(?:(?P<file>.+), )?line (?P<line>\d+)(?:: (?P<code>.*))?$")


@dataclass(frozen=True)
class _Place:
    """Where one rank is, reduced to what groups it: state, collective and innermost user location."""

    state: str  # "running", FINISHED or NOT_RESPONDING
    collective: str | None = None
    location: tuple[str, int] | None = None  # (file, line)
    label: str | None = None  # cell:3, train.py:42 in step

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.state, self.collective, self.location, None if self.location else self.label)

    def describe(self) -> str:
        """``waiting in dist.all_reduce at train.py:42``, ``at data.py:17 in __getitem__``, ``not responding``."""
        if self.state != "running":
            return self.state
        if self.collective:
            return f"waiting in {self.collective}" + (f" at {self.label}" if self.label else "")
        return f"at {self.label}" if self.label else "at an unknown place"


def _place(entry: Mapping[str, Any] | None) -> _Place:
    if entry is None or entry.get("responding") is False:
        return _Place(NOT_RESPONDING)
    if not entry.get("running"):
        return _Place(FINISHED)
    collective = _collective_name(entry.get("collective"))
    frames: Sequence[Mapping[str, Any]] = entry.get("frames") or ()
    user = next((f for f in frames if f.get("user")), None)
    if user is not None:  # a live report: the innermost user frame
        label = f"{user['name']}:{user['line']}"
        if not collective and user.get("function") not in (None, "<module>"):
            label += f" in {user['function']}"
        return _Place("running", collective, (str(user["file"]), int(user["line"])), label)
    at = entry.get("at")
    match = _AT.match(at) if isinstance(at, str) else None
    if match:  # where_rank's text: "line 3: time.sleep(60)" in the job's file, "/x/data.py, line 17: ..."
        file = match["file"]
        label = f"{os.path.basename(file)}:{match['line']}" if file else f"line {match['line']}"
        return _Place("running", collective, (file or "", int(match["line"])), label)
    if frames:  # no user frame at all (e.g. still importing): the innermost library frame
        inner = frames[0]
        return _Place("running", collective, None, f"{inner['name']}:{inner['line']} in {inner['function']}")
    return _Place("running", collective, None, at if isinstance(at, str) else None)


def _collective_name(text: Any) -> str | None:
    """``dist.all_reduce()`` (what describe_stack says) -> ``dist.all_reduce``."""
    if not text:
        return None
    name = str(text)
    return name[:-2] if name.endswith("()") else name


def _groups(entries: Mapping[int, Mapping[str, Any] | None]) -> list[tuple[_Place, list[int]]]:
    """Ranks with the same place, largest group first (then by lowest rank)."""
    groups: dict[tuple[Any, ...], tuple[_Place, list[int]]] = {}
    for rank in sorted(entries):
        place = _place(entries[rank])
        groups.setdefault(place.key, (place, []))[1].append(rank)
    return sorted(groups.values(), key=lambda group: (-len(group[1]), group[1][0]))


def summarize_where(entries: Mapping[int, Mapping[str, Any] | None]) -> str:
    """One line: ``ranks 1-7 waiting in dist.all_reduce at train.py:42; rank 0 at data.py:17 in __getitem__``."""
    if not entries:
        return "no rank answered"
    return "; ".join(f"{format_ranks(ranks)} {place.describe()}" for place, ranks in _groups(entries))


def group_where(entries: Mapping[int, Mapping[str, Any] | None], detail: bool = True) -> str:
    """The grouped report of ranks' whereabouts: one summary line, then (``detail``) each group's stack.

    ``entries`` maps each rank to what :func:`.rank.where_rank` answered for it
    (``{"running": True, "collective": "dist.barrier()" | None, "at": "line 3: time.sleep(60)"}``;
    ``{"running": False}``: the rank had finished), or to None when its worker did not answer. The
    richer dicts of :func:`.rank.stack_rank` (with ``frames``) give stacks too.

    >>> print(group_where({0: {"running": True, "collective": "dist.barrier()", "at": "line 4: dist.barrier()"},
    ...                    1: {"running": True, "collective": None, "at": "line 3: time.sleep(600)"}}))
    rank 0 waiting in dist.barrier at line 4; rank 1 at line 3
    rank 0, waiting in dist.barrier:
        line 4: dist.barrier()
    rank 1:
        line 3: time.sleep(600)
    """
    summary = summarize_where(entries)
    if not detail or not entries:
        return summary
    lines = [summary]
    for place, ranks in _groups(entries):
        lines.extend(_group_detail(place, ranks, entries))
    return "\n".join(lines)


def _group_detail(place: _Place, ranks: list[int], entries: Mapping[int, Mapping[str, Any] | None]) -> list[str]:
    first = entries[ranks[0]] or {}
    who = format_ranks(ranks)
    if place.state == NOT_RESPONDING:
        workers = [str(e["worker"]) for e in (entries[r] for r in ranks) if e and e.get("worker")]
        reason = first.get("reason") or "its worker did not answer"
        return [f"{who}: not responding ({reason})" + (f"; worker {', '.join(workers)}" if workers else "")]
    if place.state == FINISHED:
        return [f"{who}: finished (waiting for the other ranks)"]
    where = f", waiting in {place.collective}" if place.collective else ""
    origin = _origin(first)
    if len(ranks) > 1 and first.get("frames"):
        head = f"{who}{where} (stack of rank {ranks[0]}{', ' + origin if origin else ''}):"
    else:
        head = f"{who}{where}{f' ({origin})' if origin else ''}:"
    return [head, *("    " + line for line in _stack_lines(first))]


def _origin(entry: Mapping[str, Any]) -> str:
    pid, host = entry.get("pid"), entry.get("host")
    if pid and host:
        return f"pid {pid} on {host}"
    return f"pid {pid}" if pid else ""


def _stack_lines(entry: Mapping[str, Any]) -> list[str]:
    """User frames first, innermost first (file:line in function: code); the library frames the
    innermost user frame is calling on one line; other library frames only counted."""
    frames: Sequence[Mapping[str, Any]] = entry.get("frames") or ()
    if not frames:
        at = entry.get("at")
        return [str(at) if at else "(no stack: the rank's thread was not found)"]
    user = [i for i, f in enumerate(frames) if f.get("user")]
    if not user:
        innermost = [_frame_text(f) for f in frames[:CALLS_SHOWN]]
        return [*innermost, f"({len(frames) - len(innermost)} more library frames; no user code on the stack)"]
    lines: list[str] = []
    calls = list(reversed(frames[: user[0]]))  # outermost first: the order of the calls
    for n, index in enumerate(user):
        frame = frames[index]
        lines.append(_frame_text(frame, with_code=True))
        if n == 0 and calls:
            shown = calls[:CALLS_SHOWN]
            more = f" -> ({len(calls) - len(shown)} more)" if len(calls) > len(shown) else ""
            lines.append("  -> " + " -> ".join(_frame_text(f) for f in shown) + more)
    hidden = len(frames) - len(user) - min(len(calls), CALLS_SHOWN)
    if hidden > 0:
        lines.append(f"({hidden} library frames not shown)")
    return lines


def _frame_text(frame: Mapping[str, Any], with_code: bool = False) -> str:
    text = f"{frame.get('name')}:{frame.get('line')} in {frame.get('function')}"
    code = frame.get("code")
    return f"{text}: {code}" if with_code and code else text


# -- the report ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WhereReport:
    """Where each rank of ``pool``'s running job is, as its workers answered (``job_id`` None: no
    job running). ``entries`` maps rank -> :func:`.rank.stack_rank`'s dict, plus ``worker``; a rank
    whose worker did not answer in time has ``{"responding": False, "worker": ..., "reason": ...}``."""

    pool: str
    job_id: str | None
    entries: dict[int, dict[str, Any]] = field(default_factory=dict)
    idle_workers: list[str] = field(default_factory=list)  # workers of the pool with no rank of the job
    elapsed_s: float = 0.0
    unreachable: str | None = None  # why no worker could be asked (the scheduler does not answer)

    @property
    def running(self) -> bool:
        return self.job_id is not None

    @property
    def not_responding(self) -> list[int]:
        return sorted(r for r, e in self.entries.items() if e.get("responding") is False)

    def summary(self) -> str:
        """The first line of :meth:`format`."""
        if self.unreachable is not None:
            job = f"job {self.job_id} on " if self.job_id else ""
            return f"{job}pool {self.pool!r}: its ranks cannot be asked: {self.unreachable}"
        if self.job_id is None:
            return f"no job is running on pool {self.pool!r}"
        ranks = f"{len(self.entries)} rank{'s' if len(self.entries) != 1 else ''}"
        return f"job {self.job_id} on pool {self.pool!r}, {ranks}: {summarize_where(self.entries)}"

    def format(self) -> str:
        """The summary line, then each group's stack; one line when no job is running."""
        if self.job_id is None or self.unreachable is not None:
            return self.summary()
        lines = [self.summary(), *group_where(self.entries).splitlines()[1:]]
        lines += flight_recorder_lines(self.entries)
        if self.idle_workers:
            lines.append(f"workers without a rank of this job: {', '.join(self.idle_workers)}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: the job, the grouped text and one entry per rank (in rank order)."""
        return {
            "pool": self.pool,
            "job_id": self.job_id,
            "running": self.running,
            "summary": self.summary(),
            "text": self.format(),
            "ranks": [{"rank": rank, **self.entries[rank]} for rank in sorted(self.entries)],
            "idle_workers": list(self.idle_workers),
            "elapsed_s": round(self.elapsed_s, 3),
            "unreachable": self.unreachable,
        }


def flight_recorder_lines(entries: Mapping[int, Mapping[str, Any] | None]) -> list[str]:
    """The ranks' newest collectives from torch's flight recorder, ranks with the same record
    grouped: ``flight recorder, ranks 0-6: #41 nccl:all_reduce completed, #42 nccl:all_reduce
    started``; nothing when it is off."""
    by_record: dict[str, list[int]] = {}
    for rank, entry in sorted(entries.items()):
        recorded = (entry or {}).get("flight_recorder")
        if not recorded:
            continue
        text = ", ".join(f"#{e.get('seq')} {e.get('op')} {e.get('state')}" for e in recorded[-3:])
        by_record.setdefault(text, []).append(rank)
    return [f"flight recorder, {format_ranks(ranks)}: {text}" for text, ranks in by_record.items()]


def where_report(
    pool_name_or_record: str | PoolRecord | Any, timeout: float = WHERE_TIMEOUT_S, registry: Registry | None = None
) -> WhereReport:
    """Ask every worker of a pool where its rank of the running job is; from any process.

    ``pool_name_or_record``: a live pool's name, its :class:`~gpugeek_jupyter.store.PoolRecord`, or
    anything with ``name`` and ``scheduler_address`` (a :class:`~gpugeek_jupyter.pools.Pool`). Each
    worker has ``timeout`` seconds to answer; one that does not is "not responding", so a frozen
    worker delays the report by ``timeout`` at most. A scheduler that does not answer within
    :data:`CONNECT_TIMEOUT_S` gives a report that says so (``unreachable``).

    >>> print(where_report("dev").summary())  # doctest: +SKIP
    job 3f2a9c on pool 'dev', 2 ranks: rank 0 waiting in dist.all_reduce at cell:5; rank 1 at cell:3
    """
    # lazy: the rank side brings its output capture and tqdm (~150 ms), which only asking needs
    from .rank import stack_rank
    from .transport import ask_scheduler_workers

    started = time.monotonic()
    registry = registry or get_registry()
    name, address, pool_id = _pool_facts(pool_name_or_record, registry)
    try:
        security = _pool_security(pool_name_or_record, pool_id, registry)
        workers, answers = ask_scheduler_workers(
            address, name, stack_rank, timeout=timeout, connect_timeout=CONNECT_TIMEOUT_S, security=security
        )
    except (OSError, TimeoutError, GpugeekError) as e:  # data that says why, not an error: the pool may be going
        unreachable = f"its scheduler {address} does not answer ({type(e).__name__}: {e})"
        recorded = _recorded_running_job(registry, pool_id)
        return WhereReport(name, recorded, elapsed_s=time.monotonic() - started, unreachable=unreachable)
    recorded = _recorded_running_job(registry, pool_id)
    pricing = _recorded_pricing(registry, pool_id)
    return _assemble(name, workers, answers, recorded, timeout, time.monotonic() - started, pricing)


def _pool_facts(pool: str | PoolRecord | Any, registry: Registry) -> tuple[str, str, int | None]:
    """(name, scheduler address, registry id) of what the caller named."""
    if isinstance(pool, str):
        pool = _live_pool(registry, pool)
    name = str(pool.name)
    address = getattr(pool, "scheduler_address", None)
    if not address:
        raise GpugeekError(Phrase("pool {name} has no scheduler address yet (is it still starting?)", name=Value(name)))
    pool_id = getattr(pool, "id", None)
    return name, str(address), pool_id if isinstance(pool_id, int) else None


def _pool_security(pool: str | PoolRecord | Any, pool_id: int | None, registry: Registry) -> Any:
    """The dask ``Security`` that reaches the pool: a Pool's own, else its TLS credentials by id."""
    from ..pools.credentials import connection_security

    if not isinstance(pool, str | PoolRecord) and hasattr(pool, "security"):
        return pool.security
    return connection_security(registry.pool_by_id(pool_id), registry) if pool_id is not None else None


def _live_pool(registry: Registry, name: str) -> PoolRecord:
    try:
        return registry.live_pool(name)
    except NotFoundError as e:
        live = sorted({p.name for p in registry.list_pools(live_only=True)})
        known = f"running pools: {', '.join(live)}" if live else "no pool is running"
        raise NotFoundError(
            Phrase("{field} {value} names no running pool ({known}; e.g. {example})", known=known),
            field="pool",
            value=name,
            rule="the name of a running pool",
            example=live[0] if live else "dev",
        ) from e


def pool_to_ask(registry: Registry | None = None) -> PoolRecord | None:
    """The pool to report on when none is named: the only live pool, or else the only live pool with
    a running job (None: no pool is running). Several candidates: an error listing them."""
    registry = registry or get_registry()
    live = registry.list_pools(live_only=True)
    if len(live) <= 1:
        return live[0] if live else None
    busy = [p for p in live if _recorded_running_job(registry, p.id) is not None]
    if len(busy) == 1:
        return busy[0]
    names = sorted({p.name for p in (busy or live)})
    raise GpugeekError(
        Phrase("name the pool: {count} are running ({names}; e.g. {example})", count=len(live), names=", ".join(names)),
        field="pool",
        value=None,
        rule="the name of a running pool",
        example=Setting(pool=names[0]),
    )


def _recorded_running_job(registry: Registry, pool_id: int | None) -> str | None:
    if pool_id is None:
        return None
    running = [j for j in registry.list_jobs(pool_id=pool_id, limit=5) if j.status is JobStatus.RUNNING]
    return running[0].id if running else None


def _recorded_pricing(registry: Registry, pool_id: int | None) -> dict[str, str]:
    """How each connected worker is paid for, as its open cost interval records it (the rank
    layout puts spot workers last; a silent worker's rank is guessed from it)."""
    if pool_id is None:
        return {}
    return {w.address: w.pricing for w in registry.open_worker_intervals([pool_id]) if w.address}


def _assemble(
    pool: str,
    workers: Mapping[str, Mapping[str, Any]],
    answers: Mapping[str, Any],
    recorded_job: str | None,
    timeout: float,
    elapsed: float,
    pricing: Mapping[str, str] | None = None,
) -> WhereReport:
    """The report from the workers' answers: the job most of them run (or, when none that answered
    runs one, the job the registry has running), its ranks, and ranks for the silent workers."""
    from .layout import plan_layout, workers_from_scheduler_info

    answered = {a: dict(v) for a, v in answers.items() if isinstance(v, Mapping)}
    silent = [a for a in workers if a not in answered]
    running = collections.Counter(v.get("job_id") for v in answered.values() if v.get("running"))
    job_id = running.most_common(1)[0][0] if running else (recorded_job if silent else None)
    if job_id is None:
        return WhereReport(pool, None, elapsed_s=elapsed)
    entries: dict[int, dict[str, Any]] = {}
    idle: list[str] = []
    world_size = None
    for address, answer in answered.items():
        if answer.get("job_id") == job_id and isinstance(answer.get("rank"), int):
            entries[int(answer["rank"])] = {**answer, "worker": address}
            world_size = world_size or answer.get("world_size")
        else:
            idle.append(address)
    recorded_pricing = pricing or {}
    layout = plan_layout(
        workers_from_scheduler_info(
            {a: dict(workers[a]) for a in workers}, lambda address, _name: recorded_pricing.get(address, "on_demand")
        )
    )
    size = int(world_size or len(entries) + len(silent))
    free = [r for r in range(size) if r not in entries]
    for address in sorted(silent, key=lambda a: layout.slot_of(a).rank):
        if not free:
            idle.append(address)
            continue
        expected = layout.slot_of(address).rank
        rank = expected if expected in free else free[0]
        free.remove(rank)
        reason = answers.get(address)
        entries[rank] = {
            "responding": False,
            "running": None,
            "job_id": job_id,
            "rank": rank,
            "worker": address,
            "reason": (
                f"no answer within {timeout:g} s: its interpreter may be frozen, e.g. C code holding the GIL"
                if reason is None
                else f"it could not say: {reason!r}"[:200]
            ),
        }
    return WhereReport(pool, job_id, entries, sorted(idle), elapsed)
