"""Slurm's state of a pool's jobs (``squeue -t all``), and what the states and pending reasons mean
for people: which keep a job the pool's, which no waiting clears, how a job ended."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import BackendUnavailableError
from .commands import COMMAND_TIMEOUT_S, first_error_line, run_command

# states a job is still the pool's in; any other (CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL, ...) has ended
LIVE_STATES = frozenset(("PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "RESIZING", "REQUEUED", "SIGNALING"))
# pending reasons that waiting does not clear: the launch fails at once, naming them
HOPELESS_REASONS = {
    "PartitionTimeLimit": "the walltime is over the partition's limit",
    "PartitionNodeLimit": "the job asks for more nodes than the partition allows",
    "BadConstraints": "no node has the asked features",
    "InvalidAccount": "the account is not valid",
    "InvalidQOS": "the QOS is not valid",
    "QOSMaxWallDurationPerJobLimit": "the walltime is over the QOS's limit",
    "AssocMaxWallDurationPerJobLimit": "the walltime is over the account's limit",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
}
REASON_HINTS = {
    "Resources": "the nodes that fit are busy",
    "Priority": "jobs of higher priority are ahead",
    "ReqNodeNotAvail": "the nodes that fit are down, drained or reserved",
    "QOSMaxGRESPerUser": "your QOS allows fewer GPUs at once",
    "QOSMaxJobsPerUserLimit": "your QOS allows fewer jobs at once",
    "AssocGrpGRES": "your account's GPU limit is reached",
    "AssocMaxJobsLimit": "your account's job limit is reached",
    "JobHeldUser": "the jobs are held (scontrol release)",
    "JobHeldAdmin": "an administrator holds the jobs",
}
# how a job that ended while its pool lived ended, for people (squeue's %T)
ENDED_HINTS = {
    "CANCELLED": "cancelled: scancel, or an administrator",
    "TIMEOUT": "its walltime ran out",
    "PREEMPTED": "preempted for higher-priority work",
    "NODE_FAIL": "its node failed",
    "OUT_OF_MEMORY": "out of memory: ask for more with GpugeekConfig.slurm_memory_per_worker",
    "FAILED": "the job script failed",
    "BOOT_FAIL": "its node failed to boot",
    "DEADLINE": "its deadline passed",
    "COMPLETED": "the worker exited",
    "COMPLETING": "the worker exited",
    "GONE": "Slurm no longer lists it",
}


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # Slurm's, e.g. RUNNING, PENDING, CANCELLED; "GONE" when Slurm no longer knows it
    reason: str  # squeue's %r: why it pends, or how it ended ("None" when there is nothing to say)

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


def job_states(job_ids: list[str], timeout: float = COMMAND_TIMEOUT_S) -> dict[str, JobState]:
    """Slurm's state of each job (``squeue -t all``); a job Slurm no longer lists is ``GONE``."""
    if not job_ids:
        return {}
    answer = run_command("squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%r", timeout=timeout)
    found: dict[str, JobState] = {}
    if answer.returncode == 0:
        for line in answer.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3:
                found[parts[0]] = JobState(parts[0], parts[1], parts[2])
    elif "invalid job id" not in answer.stderr.lower():
        raise BackendUnavailableError(f"squeue failed: {first_error_line(answer.stderr)}")
    return {job_id: found.get(job_id, JobState(job_id, "GONE", "no longer known to Slurm")) for job_id in job_ids}


def pending_summary(states: dict[str, JobState]) -> str:
    """``2 Slurm jobs still pending (Resources: the nodes that fit are busy; squeue -j 7,8)``."""
    pending = [s for s in states.values() if s.state == "PENDING"]
    if not pending:
        ended = [s for s in states.values() if not s.live]
        if ended:
            return "; ".join(f"Slurm job {s.job_id} is {s.state} ({s.reason})" for s in ended[:3])
        return "every Slurm job runs, but not every worker reached the scheduler (see the workers' logs)"
    by_reason: dict[str, list[str]] = {}
    for s in pending:
        by_reason.setdefault(s.reason, []).append(s.job_id)
    parts = []
    for reason, ids in by_reason.items():
        hint = HOPELESS_REASONS.get(reason) or REASON_HINTS.get(reason)
        parts.append(f"{reason}{': ' + hint if hint else ''}; squeue -j {','.join(ids)}")
    count = len(pending)
    return f"{count} Slurm job{'s' if count != 1 else ''} still pending ({'; '.join(parts)})"
