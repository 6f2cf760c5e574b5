"""What the driver sends to the ranks and what they answer: plain data, pickled once per job.

The notebook's own objects travel inside :attr:`CellCode.names_blob` (a cloudpickle made by
:mod:`.cell`), so the rest pickles with the standard library, quickly.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

OUTPUT_TOPIC = "gpugeek-job-output"  # dask event topic of rank output and early failure notices
CANCEL_TOPIC = "gpugeek-job-cancel"  # {"job", "reason"}: stop this job, whichever process runs or queues it


@dataclass
class CellCode:
    source: str
    filename: str
    names_blob: bytes  # cloudpickle of {name: value}: the names the ranks lack (see .names)
    imports: tuple[tuple[str, str], ...]  # (name in the cell, module to import)
    sources: dict[str, str]  # linecache entries, so tracebacks show the notebook's lines
    has_value: bool  # the last statement is an expression whose value is returned
    rank0_only: bool = False
    kept: tuple[str, ...] = ()  # names the cell reads that the ranks hold already: not sent
    forget: tuple[int, ...] = ()  # notebook tensors gone since: the ranks drop their copies
    owner: str = ""  # the notebook process whose tensors names_blob refers to
    # "module:function" making the IPython shell (from the cell's namespace) that the cell's %magics
    # and !commands run in on the rank, as the magic that sent it says; "": they are refused there
    ipython: str = ""


@dataclass
class ScriptCode:
    path: str  # as the user gave it: sys.argv[0]
    abspath: str  # __file__
    source: str
    args: tuple[str, ...]
    cwd: str


@dataclass
class RankJob:
    """One attempt of one job, the same for every rank (sent as one pickled blob)."""

    job_id: str
    attempt: int
    max_restarts: int
    generation: str
    backend: str  # "gloo", or "cpu:gloo,cuda:nccl" on GPU pools
    master_addr: str
    master_port: int
    code: CellCode | ScriptCode
    amp: str | None = None  # "bf16" | "fp16"
    stream: bool = True
    launch: str = ""  # unique per launch: events of an earlier launch of the same job are told apart
    cuda_visible: dict[str, str | None] = field(default_factory=dict)  # by worker address (GPU pools)
    env: dict[str, str] = field(default_factory=dict)  # the job's own variables, set in every rank
    pool: str = ""  # the pool's name (its compile cache is named after it)
    keep_outcome: bool = False  # a detached job: each rank keeps its outcome until it is taken (jobs/readopt.py)


@dataclass
class RankOutcome:
    rank: int
    status: str  # ok | failed | cancelled | busy | stale
    exit_code: int | None = 0
    error: str | None = None  # one line: "ValueError: boom"
    traceback: str | None = None
    peer_failure: bool = False  # the error only reports that another rank went away
    value_blob: bytes | None = None
    output: list[tuple[str, str]] = field(default_factory=list)  # (stream, text) with stream=False
    sent: int = 0  # output events emitted (the driver waits for all of them)
    replay: list[dict[str, Any]] | None = None  # copies of those events, when they were few (capture.REPLAY_CHARS)
    pid: int = 0
    host: str = ""
    duration_s: float = 0.0
    replaced: tuple[str, ...] = ()  # names of the rank's own that the notebook's new values replaced
    dropped: tuple[str, ...] = ()  # names the notebook sent that the cell deleted
    # failed or stopped with its process group up (not a script's, not a peer's failure): the group
    # (and with it the rank's names) stays on hold, unless the driver asks for it (rank.drop_kept_group)
    group_kept: bool = False
    # a cell's groups' sequence numbers by name as it ended (rank.group_sequences), when done or kept:
    # the group serves the next cell only if every rank of every group stopped at the same call
    sequences: dict[str, int] | None = None
    # a cell done with no process group left on this rank (``dist.destroy_process_group()`` in it):
    # when other ranks kept theirs, the next cell would wait for this one in a group it left
    left_group: bool = False


def outcome_to_wire(outcome: RankOutcome) -> bytes:
    """A rank's answer as it travels: bytes, which dask's messages carry as they are (a dataclass
    would be wrapped, sized and pickled by dask on the way, several times the cost)."""
    return pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)


def outcome_from_wire(blob: bytes) -> RankOutcome:
    outcome = pickle.loads(blob)
    if not isinstance(outcome, RankOutcome):
        raise TypeError(f"a rank answered {type(outcome).__name__}, not a RankOutcome")
    return outcome
