"""What a Slurm pool's worker job is: its ``#SBATCH`` directives (one task, one GPU of the pool's type
by ``--gres``, the cores, memory and walltime it asks for), the environment set before the worker
starts and the user's prologue, as dask-jobqueue's ``SLURMJob`` writes them; :func:`render_job_script`
is what ``--dry-run`` prints."""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING, Any

from ...config import get_config
from ...logs import LOG_LEVEL_VARIABLE
from ..local import WORKER_PRELOAD
from .credentials import shared_root
from .jobqueue import require_jobqueue
from .ports import worker_port_args

if TYPE_CHECKING:
    from ...spec import PoolSpec

JOB_NAME_PREFIX = "gpugeek-"
SCRIPT_SCHEDULER = "tls://<scheduler host>:<port>"


def gres_directive(spec: PoolSpec) -> str | None:
    """``--gres=gpu:<type>:1`` for one GPU of the pool's type (None for a cpu pool).

    The type is ``GpugeekConfig.slurm_gres[gpu_type]`` (any case), else the catalog's ``slurm_gres``;
    an empty type asks for any GPU (``--gres=gpu:1``).
    """
    gpu = spec.gpu  # the catalog entry, resolved once when the spec was made
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
    from ..private_http import WORKER_ARGS  # imports distributed: only once a job script is made

    config = get_config()
    gres = gres_directive(spec)
    skip = []
    cpus = config.slurm_cpus_per_worker or (1 if gres is None else 0)
    if not cpus:
        skip.append("--cpus-per-task")
    # the pool's own limit, else the site's setting: the job's --mem and the worker's memory limit. The
    # pool's goes to Slurm in MiB (Slurm's "M"), to dask in bytes (dask's "M" is 10**6 bytes)
    memory = job_memory = config.slurm_memory_per_worker.strip()
    if spec.worker_memory is not None:
        memory, job_memory = str(spec.worker_memory), f"{-(-spec.worker_memory // 2**20)}M"
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
        "job_mem": job_memory or "0",
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
        "worker_extra_args": ["--preload", WORKER_PRELOAD, *WORKER_ARGS, *worker_port_args()],
        "log_directory": log_directory,
    }
    if config.slurm_interface:
        options["interface"] = config.slurm_interface
    return options


def render_job_script(spec: PoolSpec) -> str:
    """The job script each of the pool's workers is submitted with (what ``--dry-run`` prints).

    The scheduler's address and the credentials' folder are only known at launch: they are shown as
    placeholders.
    """
    security = _placeholder_security() if get_config().pool_tls else None
    scheduler = SCRIPT_SCHEDULER if security is not None else SCRIPT_SCHEDULER.replace("tls://", "tcp://")
    script = job_script(spec, scheduler, f"{spec.name}-0", str(shared_root() / "<pool folder>" / "logs"), security)
    header = (
        f"# {spec.count} Slurm job(s) like this one, one dask worker (one rank) each, "
        f"named {spec.name}-0 .. {spec.name}-{spec.count - 1}; submitted with: sbatch <script>\n"
    )
    return header + script


def job_script(spec: PoolSpec, scheduler: str, worker_name: str, log_directory: str, security: Any) -> str:
    require_jobqueue()
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

    folder = shared_root() / "<pool folder>" / "tls"
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    return Security(
        require_encryption=True, tls_ca_file=str(folder / "ca.pem"), tls_worker_cert=cert, tls_worker_key=key
    )
