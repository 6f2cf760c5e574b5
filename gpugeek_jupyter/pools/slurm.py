"""The ``slurm`` backend: a pool as Slurm jobs, one dask worker (one rank) each, via dask-jobqueue.

``%gpugeek_launch --backend slurm --gpu-type A100-80GB --count 8 --partition gpu --account proj42
--walltime 04:00:00`` submits 8 Slurm jobs through dask-jobqueue's ``SLURMCluster``; each runs one
dask worker (with its nanny) that owns one GPU, asked for with ``--gres=gpu:<type>:1`` (the
catalog's ``slurm_gres`` for the GPU type, or ``GpugeekConfig.slurm_gres``). A ``cpu`` pool's jobs
are one core each (``--cpus-per-task=1``). The scheduler runs in the launching process, as for local
pools; the workers connect to it from the compute nodes (see ``docs/slurm.md`` for what the site
must allow). Slurm sets ``CUDA_VISIBLE_DEVICES`` in each job to the GPU it assigned; the worker
takes that GPU as its own, and the ranks of one host see their host's GPUs in local-rank order, as
on every backend.

Options, each a flag of ``%gpugeek_launch``, a keyword of ``launch(...)`` and a field of
``POST /gpugeek/pools``, defaulting to ``GpugeekConfig.slurm_*``: ``partition``, ``account``,
``qos``, ``walltime`` (Slurm's formats), ``constraint``, ``sbatch_directives`` (extra ``#SBATCH``
lines) and ``prologue`` (shell lines before the worker starts: ``module load ...``, ``source
venv/bin/activate``). ``--dry-run`` prints the job script (:func:`render_job_script`).

The pool's own TLS credentials (:mod:`.credentials`) are copied, readable by the user only, into
the pool's folder in ``GpugeekConfig.slurm_shared_directory`` (which the compute nodes must see),
with the workers' logs; the copy goes when the pool stops, or at a later launch once the pool is
no longer live.

Stopping the pool (``%gpugeek_stop``, a budget, idle shutdown, the kernel exiting) closes the
``SLURMCluster``, which ``scancel``\\ s every job. A killed kernel takes the scheduler with it;
each worker then exits at once (or after ``worker_death_timeout`` if it cannot tell), and its
Slurm job ends. :class:`SlurmJobWatcher` records each job's id as a pool event (``slurm-job``,
read by :func:`slurm_job_ids`), notices a job that ended while the pool lives (walltime, scancel,
preemption, node failure), says so (``worker-ended``) and submits a replacement, so the pool heals.

Errors a Slurm user meets are one line naming the value and the fix: no ``sbatch`` on PATH, an
unknown partition, account, QOS, feature or gres (``sbatch --test-only``'s answer, before
anything is submitted), a walltime Slurm does not read or a partition does not allow, jobs still
pending at the start timeout (with Slurm's reason from ``squeue -o %r``).
"""

from __future__ import annotations

import datetime
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..catalog import load_catalog
from ..config import get_config
from ..dashboards import pool_dashboard_path
from ..errors import BackendUnavailableError, Field, GpugeekError, Phrase, PoolStartError, Setting, SpecError, Value
from ..logs import LOG_LEVEL_VARIABLE
from ..store import make_private_directory, write_private_file
from ._backend import Outliving, ProgressCallback, RunningCluster
from ._plugin import PoolLifecyclePlugin
from .local import WORKER_PRELOAD
from .slurm_jobs import EVENT_ENDED, EVENT_JOB, slurm_job_ids
from .worker_origin import use_forkserver

if TYPE_CHECKING:
    from ..spec import PoolSpec
    from ._manager import PoolManager
    from ._pool import Pool
    from .credentials import PoolCredentials

__all__ = [
    "SlurmBackend",
    "SlurmJobWatcher",
    "explain_sbatch_error",
    "gres_directive",
    "job_script_options",
    "render_job_script",
    "slurm_job_ids",
]

log = logging.getLogger(__name__)

COMMANDS = ("sbatch", "squeue", "scancel")
JOB_NAME_PREFIX = "gpugeek-"
COMMAND_TIMEOUT_S = 30.0
POLL_SECONDS = 2.0  # squeue while a pool starts
WATCH_PERIOD_S = 5.0  # squeue while a pool lives
COMPLETING_GRACE_S = 30.0  # a job ending (COMPLETING) is reported with its final state, or as it is after this
KEEP_LOGS_DAYS = 7  # pool folders (the workers' logs) of ended pools are removed after this
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
_SCRIPT_SCHEDULER = "tls://<scheduler host>:<port>"


# -- what a worker's job is -------------------------------------------------------------------------
def gres_directive(spec: PoolSpec) -> str | None:
    """``--gres=gpu:<type>:1`` for one GPU of the pool's type (None for a cpu pool).

    The type is ``GpugeekConfig.slurm_gres[gpu_type]`` (any case), else the catalog's ``slurm_gres``;
    an empty type asks for any GPU (``--gres=gpu:1``).
    """
    gpu = load_catalog(get_config().price_file or None).gpu(spec.gpu_type)
    if gpu.is_cpu:
        return None
    overrides = {str(k).lower(): str(v) for k, v in get_config().slurm_gres.items()}
    gres_type = overrides.get(gpu.name.lower(), gpu.slurm_gres).strip()
    return f"--gres=gpu:{gres_type}:1" if gres_type else "--gres=gpu:1"


def _inherited_dask_config() -> str:
    """dask config for the job's nanny: no ``MALLOC_TRIM_THRESHOLD_`` in the worker (it cost a
    training loop ~20%, see :mod:`.local`), passed as dask passes config to its subprocesses."""
    import dask.config

    return str(
        dask.config.serialize({"distributed": {"nanny": {"pre-spawn-environ": {"MALLOC_TRIM_THRESHOLD_": None}}}})
    )


def _setup_lines(spec: PoolSpec) -> list[str]:
    """The job script's lines before the worker command: our environment, then the user's prologue."""
    threads = "${SLURM_CPUS_PER_TASK:-1}"
    lines = [
        f"export {LOG_LEVEL_VARIABLE}={shlex.quote(get_config().log_level)}",
        f"export OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads} OPENBLAS_NUM_THREADS={threads}",
        f"export DASK_INTERNAL_INHERIT_CONFIG={shlex.quote(_inherited_dask_config())}",
    ]
    if spec.prologue:
        lines += ["# prologue (--prologue / GpugeekConfig.slurm_prologue)", spec.prologue]
    return lines


def job_script_options(spec: PoolSpec, log_directory: str | None = None) -> dict[str, Any]:
    """The keyword arguments of dask-jobqueue's ``SLURMJob`` / ``SLURMCluster`` for ``spec``'s workers.

    One task per job; one worker thread (one rank); the cores, memory and walltime the pool asks for,
    or no directive at all, so that the site's defaults apply.
    """
    from .private_http import WORKER_ARGS  # imports distributed: only once a job script is made

    config = get_config()
    gres = gres_directive(spec)
    skip = []
    cpus = config.slurm_cpus_per_worker or (1 if gres is None else 0)
    if not cpus:
        skip.append("--cpus-per-task")
    memory = config.slurm_memory_per_worker.strip()
    if not memory:
        skip.append("--mem=")
    if not spec.walltime:
        skip.append("#SBATCH -t ")  # dask-jobqueue's own default is 30 minutes: the site's applies instead
    directives = [f"--qos={spec.qos}"] if spec.qos else []
    directives += [f"--constraint={spec.constraint}"] if spec.constraint else []
    directives += [gres] if gres else []
    directives += list(spec.sbatch_directives)
    options: dict[str, Any] = {
        "cores": 1,
        "processes": 1,
        "memory": memory or "0",
        "job_mem": memory or "0",
        "job_cpu": cpus or 1,
        "queue": spec.partition,
        "account": spec.account,
        "walltime": spec.walltime or "0",
        "job_name": JOB_NAME_PREFIX + spec.name,
        "job_extra_directives": directives,
        "job_directives_skip": skip,
        "job_script_prologue": _setup_lines(spec),
        "python": config.slurm_python or sys.executable,
        "death_timeout": config.worker_death_timeout,
        # the worker's own HTTP server never listens (private_http.PoolWorker)
        "worker_extra_args": ["--preload", WORKER_PRELOAD, *WORKER_ARGS, *_worker_port_args()],
        "log_directory": log_directory,
    }
    if config.slurm_interface:
        options["interface"] = config.slurm_interface
    return options


_PORT_RANGE = re.compile(r"^(\d{1,5}):(\d{1,5})$")
MIN_PORTS = 3  # the scheduler, and a worker and its nanny on a node (the dashboard is on a Unix socket)


def port_range() -> tuple[int, int] | None:
    """``GpugeekConfig.slurm_ports`` as (first, last); None when unset (ports the OS picks)."""
    text = get_config().slurm_ports.strip()
    if not text:
        return None
    match = _PORT_RANGE.match(text)
    first, last = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    if not match or not 1024 <= first <= last <= 65535 or last - first + 1 < MIN_PORTS:
        raise BackendUnavailableError(
            f"GpugeekConfig.slurm_ports (GPUGEEK_SLURM_PORTS) must be FIRST:LAST, ports from 1024 to 65535, "
            f"at least {MIN_PORTS} of them, got {text!r} (e.g. '40000:40100')"
        )
    return first, last


def _worker_port_args() -> list[str]:
    """``dask worker`` takes a range: each worker and nanny listens on the first free port in it."""
    ports = port_range()
    if ports is None:
        return []
    span = f"{ports[0]}:{ports[1]}"
    return ["--worker-port", span, "--nanny-port", span]


def _free_port_in(ports: tuple[int, int], host: str) -> int:
    """The first port of the range that nothing on this host listens on now, for the scheduler (its
    dashboard takes no port: it is served on a Unix socket, :mod:`.private_http`)."""
    import socket

    for port in range(ports[0], ports[1] + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host or "0.0.0.0", port))
            except OSError:
                continue
        return port
    raise BackendUnavailableError(
        f"GpugeekConfig.slurm_ports {ports[0]}:{ports[1]} has no free port on this host for the "
        f"scheduler (other pools or programs hold them); widen the range "
        f"(e.g. GPUGEEK_SLURM_PORTS={ports[0]}:{ports[1] + 100})"
    )


def render_job_script(spec: PoolSpec) -> str:
    """The job script each of the pool's workers is submitted with (what ``--dry-run`` prints).

    The scheduler's address and the credentials' folder are only known at launch: they are shown as
    placeholders.
    """
    security = _placeholder_security() if get_config().pool_tls else None
    scheduler = _SCRIPT_SCHEDULER if security is not None else _SCRIPT_SCHEDULER.replace("tls://", "tcp://")
    script = _job_script(spec, scheduler, f"{spec.name}-0", str(_shared_root() / "<pool folder>" / "logs"), security)
    header = (
        f"# {spec.count} Slurm job(s) like this one, one dask worker (one rank) each, "
        f"named {spec.name}-0 .. {spec.name}-{spec.count - 1}; submitted with: sbatch <script>\n"
    )
    return header + script


def _job_script(spec: PoolSpec, scheduler: str, worker_name: str, log_directory: str, security: Any) -> str:
    _require_jobqueue()
    from dask_jobqueue.slurm import SLURMJob

    options = job_script_options(spec, log_directory)
    options.pop("log_directory")  # dask-jobqueue would create it; the log lines are added below instead
    job = SLURMJob(scheduler, name=worker_name, security=security, protocol="tls://" if security else None, **options)
    text = str(job.job_script())
    if security is not None:
        text = text.replace("--protocol tls:// ", "")  # implied by the tls:// address
    return _with_log_directives(text, log_directory, spec)


def _with_log_directives(script: str, log_directory: str, spec: PoolSpec) -> str:
    name = JOB_NAME_PREFIX + spec.name
    lines = [f"#SBATCH -o {log_directory}/{name}-%J.out", f"#SBATCH -e {log_directory}/{name}-%J.err"]
    kept = [line for line in script.splitlines() if not line.startswith(("#SBATCH -o ", "#SBATCH -e "))]
    at = next((i for i, line in enumerate(kept) if line.startswith("#SBATCH -J")), 0) + 1
    return "\n".join(kept[:at] + lines + kept[at:]) + "\n"


def _placeholder_security() -> Any:
    from distributed.security import Security

    folder = _shared_root() / "<pool folder>" / "tls"
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    return Security(
        require_encryption=True, tls_ca_file=str(folder / "ca.pem"), tls_worker_cert=cert, tls_worker_key=key
    )


# -- Slurm's commands ---------------------------------------------------------------------------------
def _missing_commands() -> list[str]:
    return [c for c in COMMANDS if shutil.which(c) is None]


def _run(*argv: str, timeout: float = COMMAND_TIMEOUT_S, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=stdin)
    except subprocess.TimeoutExpired as e:
        raise BackendUnavailableError(
            f"Slurm's {argv[0]} did not answer within {timeout:.0f} s: is slurmctld up? (scontrol ping)"
        ) from e
    except OSError as e:
        raise BackendUnavailableError(f"could not run Slurm's {argv[0]}: {e}") from e


def _partitions() -> list[str]:
    try:
        answer = _run("sinfo", "-h", "-o", "%P", timeout=10)
    except GpugeekError:
        return []
    return [p.rstrip("*") for p in answer.stdout.split()]


def _first_error_line(stderr: str) -> str:
    """The line of a Slurm command's stderr that says what is wrong: its first ``error:`` line (it
    names the value: ``invalid partition specified: gpu``), else its last ``failure`` line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    failures = [line for line in lines if "failure" in line.lower()]
    chosen = errors[0] if errors else (failures or lines or ["no message"])[-1]
    return re.sub(r"^(\w+: )?(error: )?", "", chosen)


def _refused(field: str, value: Any, template: str, example: Any, **parts: Any) -> SpecError:
    return SpecError(
        Phrase(template, **parts), field=field, value=value, rule=f"a {field} Slurm accepts", example=example
    )


def explain_sbatch_error(stderr: str, spec: PoolSpec) -> GpugeekError:
    """``sbatch``'s refusal of the pool's job script as one line naming the value and the fix."""
    said = _first_error_line(stderr)
    lowered = stderr.lower()
    quoted = f"(sbatch: {said})"
    if "invalid partition" in lowered:
        known = _partitions()
        return _refused(
            "partition",
            spec.partition,
            "{field} {value}: Slurm has no such partition {said}; choose one of {known} (sinfo -s), e.g. {example}",
            example=known[0] if known else "gpu",
            said=quoted,
            known=", ".join(known) or "those sinfo lists",
        )
    if "invalid account" in lowered:
        return _refused(
            "account",
            spec.account,
            "{field} {value}: Slurm refused the account {said}; use one of yours "
            "(sacctmgr -n show associations user=$USER format=account,partition), e.g. {example}",
            example="proj42",
            said=quoted,
        )
    if "invalid qos" in lowered:
        return _refused(
            "qos",
            spec.qos,
            "{field} {value}: Slurm refused the QOS {said}; use one your account has "
            "(sacctmgr -n show associations user=$USER format=qos), e.g. {example}",
            example="normal",
            said=quoted,
        )
    if "invalid feature" in lowered:
        return _refused(
            "constraint",
            spec.constraint,
            "{field} {value}: no node has these features {said}; the nodes' features are in "
            "sinfo -o '%P %f', e.g. {example}",
            example="a100",
            said=quoted,
        )
    if "time limit" in lowered or "--time specification" in lowered:
        return _refused(
            "walltime",
            spec.walltime,
            "{field} {value}: Slurm refused the time limit {said}; the partitions' limits are in "
            "sinfo -o '%P %l' (ask for less, or another partition), e.g. {example}",
            example="04:00:00",
            said=quoted,
        )
    if "gres" in lowered or "node configuration is not available" in lowered or "processors requested" in lowered:
        gres = gres_directive(spec)
        asked = [gres] if gres else []
        asked += [f"--cpus-per-task={get_config().slurm_cpus_per_worker}"] if get_config().slurm_cpus_per_worker else []
        asked += [f"--mem={get_config().slurm_memory_per_worker}"] if get_config().slurm_memory_per_worker else []
        return BackendUnavailableError(
            Phrase(
                "no node of partition {partition} can take one worker's job ({asked}) {said}; the nodes' gres "
                "are in sinfo -o '%P %G' (a site names its GPU types: set GpugeekConfig.slurm_gres, e.g. "
                "{{'{gpu}': 'a100'}}), or try another {field}",
                partition=Value(spec.partition or "(default)"),
                asked=" ".join(asked) or "one core",
                said=quoted,
                gpu=spec.gpu_type,
            ),
            field="partition",
            value=spec.partition,
        )
    if "unable to contact slurm controller" in lowered or "connection refused" in lowered:
        return BackendUnavailableError(f"Slurm's controller does not answer {quoted}; is slurmctld up? (scontrol ping)")
    return BackendUnavailableError(
        Phrase(
            "sbatch refused the pool's job script {said}; see it with {dry_run}",
            said=quoted,
            dry_run=Setting(backend="slurm", dry_run=True),
        )
    )


def _test_submit(script: str, spec: PoolSpec) -> None:
    """``sbatch --test-only``: Slurm checks the job (partition, account, QOS, features, gres, time)
    without queueing it."""
    answer = _run("sbatch", "--test-only", stdin=script)
    if answer.returncode != 0:
        raise explain_sbatch_error(answer.stderr or answer.stdout, spec)


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
    answer = _run("squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%r", timeout=timeout)
    found: dict[str, JobState] = {}
    if answer.returncode == 0:
        for line in answer.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3:
                found[parts[0]] = JobState(parts[0], parts[1], parts[2])
    elif "invalid job id" not in answer.stderr.lower():
        raise BackendUnavailableError(f"squeue failed: {_first_error_line(answer.stderr)}")
    return {job_id: found.get(job_id, JobState(job_id, "GONE", "no longer known to Slurm")) for job_id in job_ids}


def _pending_summary(states: dict[str, JobState]) -> str:
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


# -- where a pool's files go --------------------------------------------------------------------------
def _shared_root() -> Path:
    configured = get_config().slurm_shared_directory
    if configured:
        return Path(configured).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data_home) / "gpugeek-jupyter" / "slurm"


def _pool_folder(spec: PoolSpec) -> Path:
    """A new private folder for one launch of ``spec``: ``<shared>/<name>-<UTC time>-<pid>``."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    root = make_private_directory(_shared_root())
    folder = Path(tempfile.mkdtemp(prefix=f"{spec.name}-{stamp}-", dir=root))  # 0700
    make_private_directory(folder / "logs")
    return folder


def _copy_credentials(credentials: PoolCredentials, folder: Path) -> Any:
    """The workers' ``Security``: the pool's certificate, key and CA copied into ``folder/tls`` (0600)."""
    from distributed.security import Security

    tls = make_private_directory(folder / "tls")
    for source in (credentials.ca_file, credentials.cert_file, credentials.key_file):
        write_private_file(tls / source.name, source.read_bytes())
    write_private_file(tls / "source", str(credentials.directory).encode())
    cert, key = str(tls / credentials.cert_file.name), str(tls / credentials.key_file.name)
    return Security(
        require_encryption=True,
        tls_ca_file=str(tls / credentials.ca_file.name),
        tls_client_cert=cert,
        tls_client_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
    )


def _remove_credentials_copy(folder: Path) -> None:
    try:
        shutil.rmtree(folder / "tls")
    except FileNotFoundError:
        pass
    except OSError as e:  # a later launch prunes it again
        log.warning("could not remove the TLS credentials' copy in %s: %s", folder / "tls", e)


def prune_pool_folders(now: float | None = None) -> None:
    """Remove the credentials' copies of pools whose credentials are gone (the pool stopped or was
    pruned as not live), and the folders of pools ended more than :data:`KEEP_LOGS_DAYS` ago."""
    root = _shared_root()
    try:
        folders = [f for f in root.iterdir() if f.is_dir()]
    except FileNotFoundError:
        return
    now = time.time() if now is None else now
    for folder in folders:
        source = folder / "tls" / "source"
        try:
            if source.exists() and not Path(source.read_text().strip()).exists():
                _remove_credentials_copy(folder)
            if not (folder / "tls").exists() and now - _last_written(folder) > KEEP_LOGS_DAYS * 86400:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError as e:
            log.debug("could not prune %s: %s", folder, e)


def _last_written(folder: Path) -> float:
    """When anything of a pool's folder last changed: the folder, its logs folder or a log in it."""
    paths = [folder, folder / "logs", *(folder / "logs").glob("*")] if (folder / "logs").is_dir() else [folder]
    return max(p.stat().st_mtime for p in paths)


# -- the cluster ------------------------------------------------------------------------------------
def _cluster_class() -> type:
    """dask-jobqueue's ``SLURMCluster``, for a pool: workers' TLS from the pool folder, ended jobs
    replaced by :class:`SlurmJobWatcher` rather than dropped, the folder's credentials removed on close."""
    _require_jobqueue()
    from dask_jobqueue import SLURMCluster
    from distributed.deploy.cluster import Cluster

    from .private_http import served_dashboard_link

    class PoolSLURMCluster(SLURMCluster):
        def __init__(self, *args: Any, worker_security: Any = None, pool_folder: Path | None = None, **kwargs: Any):
            self._pool_worker_security = worker_security
            self.pool_folder = pool_folder
            super().__init__(*args, **kwargs)

        @property
        def dashboard_link(self) -> str:
            return served_dashboard_link(self)

        def _get_worker_security(self, security: Any) -> Any:
            return self._pool_worker_security if self._pool_worker_security is not None else security

        def _update_worker_status(self, op: str, msg: Any) -> None:
            # SpecCluster closes a worker's job 15 s after its worker left unless one of that name is
            # back; a replacement still pending in the queue would then be cancelled
            if op == "remove":
                Cluster._update_worker_status(self, op, msg)
                return
            super()._update_worker_status(op, msg)

        async def _close(self) -> None:
            try:
                await super()._close()
            finally:
                if self.pool_folder is not None:
                    _remove_credentials_copy(self.pool_folder)

        async def replace_worker(self, name: str) -> str | None:
            """Submit a new job for worker ``name`` (whose job ended); returns its job id."""
            job = self.workers.pop(name, None)
            if job is not None:
                await job.close()  # scancel of an ended job: nothing happens
            await self._correct_state()
            new = self.workers.get(name)
            return None if new is None else new.job_id

        def job_ids(self) -> dict[str, str]:
            """Worker name -> Slurm job id, of the jobs this cluster submitted and keeps."""
            return {str(n): str(j.job_id) for n, j in list(self.workers.items()) if getattr(j, "job_id", None)}

    PoolSLURMCluster.__name__ = PoolSLURMCluster.__qualname__ = "SLURMCluster"
    return PoolSLURMCluster


class SlurmBackend:
    """Pools as Slurm jobs (see the module docstring)."""

    name = "slurm"
    uses_pool_credentials = True
    serves_private_dashboard = True  # the scheduler runs in the launching process (or its keeper)
    can_outlive_owner = True  # with ``outliving``, the scheduler runs in a keeper process (kept pools)

    def preflight(self, spec: PoolSpec) -> None:
        """Fail before anything is registered: dask-jobqueue and Slurm's commands must be here, and
        Slurm must accept the job (``sbatch --test-only``)."""
        _require_jobqueue()
        missing = _missing_commands()
        if missing:
            raise BackendUnavailableError(
                Phrase(
                    "{backend} needs Slurm's commands, and {missing} {is_are} not on PATH ({path}); launch from a "
                    "node where sbatch works (a login node), or load Slurm first (module load slurm)",
                    backend=Setting(backend="slurm"),
                    missing=", ".join(missing),
                    is_are="is" if len(missing) == 1 else "are",
                    path=_short_path(),
                )
            )
        _test_submit(_job_script(spec, _SCRIPT_SCHEDULER, f"{spec.name}-0", "/tmp", None), spec)

    def start(
        self,
        spec: PoolSpec,
        on_progress: ProgressCallback,
        start_timeout: float,
        credentials: PoolCredentials | None = None,
        dashboard_socket: Path | None = None,
        outliving: Outliving | None = None,
    ) -> RunningCluster:
        from distributed import Client

        from .kept_scheduler import KeptScheduler
        from .private_http import PrivateHttpScheduler

        config = get_config()
        deadline = time.monotonic() + start_timeout
        prune_pool_folders()
        try:
            folder = _pool_folder(spec)
            worker_security = _copy_credentials(credentials, folder) if credentials is not None else None
        except OSError as e:
            raise BackendUnavailableError(
                f"pool '{spec.name}' needs a folder of its own in {_shared_root()} (the workers' logs and credentials), "
                f"and it cannot be made there ({e}); set GpugeekConfig.slurm_shared_directory "
                f"(GPUGEEK_SLURM_SHARED_DIRECTORY) to a folder the compute nodes see"
            ) from e
        security = credentials.security() if credentials is not None else None
        host = config.slurm_scheduler_host.strip()
        ports = port_range()
        scheduler_options: dict[str, Any] = {
            "idle_timeout": None,
            # the scheduler runs here: its dashboard on the pool's Unix socket, on no TCP port
            "dashboard": dashboard_socket is not None,
            "dashboard_socket": dashboard_socket,
        }
        if ports is not None:
            scheduler_options["port"] = _free_port_in(ports, host)
        if host:
            scheduler_options["host"] = host
        scheduler_cls: type = PrivateHttpScheduler
        if outliving is not None:  # a kept pool: its scheduler in a process of its own, which outlives the agent
            scheduler_cls = KeptScheduler
            scheduler_options["pool_id"] = outliving.pool_id
            scheduler_options["restart_command"] = list(outliving.restart_command)
        try:
            cluster = _cluster_class()(
                name=spec.name,
                n_workers=0,
                security=security,
                worker_security=worker_security,
                pool_folder=folder,
                scheduler_cls=scheduler_cls,
                scheduler_options=scheduler_options,
                **job_script_options(spec, str(folder / "logs")),
            )
        except Exception as e:
            _remove_credentials_copy(folder)
            raise PoolStartError(f"could not start the dask scheduler of pool '{spec.name}': {e}") from e
        try:
            _submit(cluster, spec)
            client = Client(cluster, set_as_default=False)
            try:
                _wait_for_workers(client, cluster, spec, on_progress, deadline, start_timeout)
            except BaseException:
                client.close()
                raise
        except BaseException:
            cluster.close(timeout=30)  # scancel every job it submitted
            raise
        return RunningCluster(
            client=client,
            scheduler_address=cluster.scheduler_address,
            dashboard_link=pool_dashboard_path(spec.name) if cluster.scheduler.dashboard_socket is not None else None,
            cluster=cluster,
            job_folder=str(folder),
            batch_jobs=cluster.job_ids,
            security=security,
            keeper_pid=getattr(cluster.scheduler, "pid", None),
        )


_import_lock = threading.Lock()


def _require_jobqueue() -> None:
    """Import dask_jobqueue (once), or say which extra installs it."""
    if sys.modules.get("dask_jobqueue") is not None:
        return
    # distributed first, under the forkserver's lock: a kernel's warm-up (%load_ext) may be importing
    # it on another thread right now, and two threads importing it at once meet in its import cycle
    use_forkserver(get_config().preload_torch)
    try:
        _import_keeping_sigint()
    except ModuleNotFoundError as e:
        if e.name != "dask_jobqueue":
            raise
        raise BackendUnavailableError(
            Phrase(
                "{backend} needs dask-jobqueue (pip install 'gpugeek-jupyter[slurm]')", backend=Setting(backend="slurm")
            )
        ) from e


def _import_keeping_sigint() -> None:
    """``import dask_jobqueue``, leaving this process's SIGINT handler as it was.

    dask-jobqueue 0.9.0 sets SIGINT to ``sys.exit()`` when it is imported (its ``runner`` module; moved
    into the runners after that release, dask/dask-jobqueue#697): in a kernel or a script, Ctrl-C or
    an interrupt would then exit instead of raising KeyboardInterrupt (which ends a running job's
    ranks), and on any thread but the main one (the server launches pools on threads of its own) the
    import fails with ``signal only works in main thread``.
    """
    import signal

    with _import_lock:
        real = signal.signal

        def keep_sigint(signalnum: Any, handler: Any) -> Any:
            if signalnum == signal.SIGINT:
                return signal.getsignal(signalnum)
            return real(signalnum, handler)

        signal.signal = keep_sigint
        try:
            import dask_jobqueue  # noqa: F401
        finally:
            signal.signal = real


def _short_path() -> str:
    path = os.environ.get("PATH", "")
    return "PATH=" + (path if len(path) <= 60 else path[:57] + "...")


def _submit(cluster: Any, spec: PoolSpec) -> None:
    """Submit one job per worker; sbatch's refusal as a one-line error."""
    for _ in range(spec.count):
        cluster.worker_spec.update(cluster.new_worker_spec())
    try:
        cluster.sync(cluster._correct_state)
    except RuntimeError as e:  # dask-jobqueue: "Command exited with non-zero exit code ... stderr: ..."
        text = str(e)
        stderr = text.split("stderr:", 1)[-1] if "stderr:" in text else text
        raise explain_sbatch_error(stderr, spec) from e


def _wait_for_workers(
    client: Any, cluster: Any, spec: PoolSpec, on_progress: ProgressCallback, deadline: float, start_timeout: float
) -> None:
    """Until every worker has connected; at the deadline, or at once when Slurm says the jobs can
    never start, PoolStartError with Slurm's reasons."""
    last_ready, last_poll = -1, 0.0
    while True:
        ready = len(client.scheduler_info(n_workers=-1).get("workers", {}))
        if ready != last_ready:
            on_progress(min(ready, spec.count), spec.count)
            last_ready = ready
        if ready >= spec.count:
            return
        now = time.monotonic()
        if now >= deadline or now - last_poll >= POLL_SECONDS:
            last_poll = now
            states = job_states(list(cluster.job_ids().values()))
            hopeless = [s for s in states.values() if s.state == "PENDING" and s.reason in HOPELESS_REASONS]
            ended = [s for s in states.values() if not s.live]
            if now >= deadline or hopeless or ended:
                raise PoolStartError(
                    Phrase(
                        "pool {name}: {ready}/{count} workers connected {when}; {why}; {fix}",
                        name=Value(spec.name),
                        ready=str(ready),
                        count=str(spec.count),
                        when=f"within {start_timeout:.0f} s" if now >= deadline else "so far",
                        why=_pending_summary(states),
                        fix=_fix_for(states, cluster),
                    ),
                    field="count",
                )
        time.sleep(0.05)


def _fix_for(states: dict[str, JobState], cluster: Any) -> Any:
    reasons = {s.reason for s in states.values() if s.state == "PENDING"}
    if reasons & set(HOPELESS_REASONS):
        return "change what the pool asks for (see --dry-run)"
    ended = [s for s in states.values() if not s.live]
    if ended or not reasons:
        folder = getattr(cluster, "pool_folder", None)
        return f"see the workers' logs in {folder / 'logs' if folder else 'the pool folder'}"
    return Phrase(
        "try again later, raise GPUGEEK_WORKER_START_TIMEOUT, or ask for fewer workers ({count}) or another {partition}",
        count=Field("count"),
        partition=Field("partition"),
    )


# -- a live pool's jobs -------------------------------------------------------------------------------
@dataclass
class _Watched:
    recorded: set[str] = field(default_factory=set)  # job ids noted as events
    ended: set[str] = field(default_factory=set)  # job ids reported ended
    completing: dict[str, float] = field(default_factory=dict)  # job id -> when first seen COMPLETING
    checked_at: float = 0.0


class SlurmJobWatcher(PoolLifecyclePlugin):
    """Pool plugin for slurm pools (no-op for others): records each Slurm job id as an event, and
    when a job ends while the pool lives, records why and submits a replacement."""

    name = "gpugeek-slurm-jobs"

    def __init__(self) -> None:
        self._watched: dict[int, _Watched] = {}
        self._lock = threading.Lock()

    def _state(self, pool: Pool) -> _Watched:
        with self._lock:
            return self._watched.setdefault(pool.id, _Watched())

    def ready(self, manager: PoolManager, pool: Pool) -> None:
        if pool.spec.backend == "slurm" and pool.cluster is not None:
            self._record_jobs(manager, pool, self._state(pool))

    def heartbeat(self, manager: PoolManager, pool: Pool) -> None:
        """Housekeeping, at most every :data:`WATCH_PERIOD_S` s a pool (squeue bounded by the deadline)."""
        if pool.spec.backend != "slurm" or pool.cluster is None:
            return
        watched = self._state(pool)
        if time.monotonic() - watched.checked_at < WATCH_PERIOD_S:
            return
        watched.checked_at = time.monotonic()
        self._record_jobs(manager, pool, watched)
        jobs = pool.cluster.job_ids()
        timeout = max(1.0, min(COMMAND_TIMEOUT_S, manager.housekeeping_time_left()))
        states = job_states([j for j in jobs.values() if j not in watched.ended], timeout=timeout)
        for worker, job_id in jobs.items():
            state = states.get(job_id)
            if state is None or state.live or job_id in watched.ended:
                continue
            if state.state == "COMPLETING":  # its final state (TIMEOUT, NODE_FAIL, ...) says more: wait for it
                since = watched.completing.setdefault(job_id, time.monotonic())
                if time.monotonic() - since < COMPLETING_GRACE_S:
                    continue
            watched.ended.add(job_id)
            self._report_ended(manager, pool, worker, state)

    def stopped(self, manager: PoolManager, record: Any) -> None:
        with self._lock:
            self._watched.pop(record.id, None)

    def _record_jobs(self, manager: PoolManager, pool: Pool, watched: _Watched) -> None:
        for worker, job_id in pool.cluster.job_ids().items():
            if job_id not in watched.recorded:
                watched.recorded.add(job_id)
                manager.registry.add_event(pool.id, EVENT_JOB, f"Slurm job {job_id} for worker '{worker}'")

    def _report_ended(self, manager: PoolManager, pool: Pool, worker: str, state: JobState) -> None:
        cluster = pool.cluster
        detail = ENDED_HINTS.get(state.state) or (state.reason if state.reason not in ("None", "") else "")
        why = f"{state.state}, {detail}" if detail else state.state
        message = f"worker '{worker}' is gone: its Slurm job {state.job_id} ended ({why})"
        folder = pool.running.job_folder
        if state.state in ("FAILED", "COMPLETED", "OUT_OF_MEMORY") and folder:
            message += f", see {folder}/logs/{JOB_NAME_PREFIX}{pool.name}-{state.job_id}.err"
        from distributed.core import Status

        if getattr(cluster, "status", None) == Status.running and manager.registry.pool_by_id(pool.id).status.is_live:
            try:
                new_id = cluster.sync(cluster.replace_worker, worker)
                message += f"; replaced by Slurm job {new_id}" if new_id else ""
            except Exception as e:  # the pool goes on with fewer workers; the message says so
                message += f"; no replacement could be submitted ({_first_error_line(str(e))})"
        manager.registry.add_event(pool.id, EVENT_ENDED, message)
        log.warning("pool %s: %s", pool.name, message)
        manager.post_notice(pool, EVENT_ENDED, message)
        self._record_jobs(manager, pool, self._state(pool))
