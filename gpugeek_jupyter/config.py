"""Settings: one traitlets ``Configurable``, readable from Jupyter config files and ``GPUGEEK_*``.

Precedence, lowest first: the defaults below, the environment variable named in each trait's
``help``, then ``jupyter_gpugeek_config.{json,py}`` (or ``c.GpugeekConfig.x = ...`` in a Jupyter
server config) in any Jupyter config directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from traitlets import Bool, CaselessStrEnum, Dict, Float, Integer, List, Unicode, default
from traitlets.config import Config, Configurable

BACKENDS = ("local", "kubernetes", "address", "slurm")

# trait -> the environment variable that sets it (below config files and the server's config)
ENVIRONMENT = {
    "default_backend": "GPUGEEK_BACKEND",
    "registry_path": "GPUGEEK_REGISTRY",
    "price_file": "GPUGEEK_PRICE_FILE",
    "idle_timeout_minutes": "GPUGEEK_IDLE_TIMEOUT",
    "heartbeat_seconds": "GPUGEEK_HEARTBEAT",
    "lost_after_seconds": "GPUGEEK_LOST_AFTER",
    "worker_start_timeout": "GPUGEEK_WORKER_START_TIMEOUT",
    "worker_death_timeout": "GPUGEEK_WORKER_DEATH_TIMEOUT",
    "bind_host": "GPUGEEK_BIND_HOST",
    "pool_tls": "GPUGEEK_POOL_TLS",
    "telemetry_period_seconds": "GPUGEEK_TELEMETRY_PERIOD",
    "kubernetes_namespace": "GPUGEEK_NAMESPACE",
    "kubernetes_spot_preset": "GPUGEEK_SPOT_PRESET",
    "slurm_partition": "GPUGEEK_SLURM_PARTITION",
    "slurm_account": "GPUGEEK_SLURM_ACCOUNT",
    "slurm_qos": "GPUGEEK_SLURM_QOS",
    "slurm_walltime": "GPUGEEK_SLURM_WALLTIME",
    "slurm_constraint": "GPUGEEK_SLURM_CONSTRAINT",
    "slurm_prologue": "GPUGEEK_SLURM_PROLOGUE",
    "slurm_cpus_per_worker": "GPUGEEK_SLURM_CPUS_PER_WORKER",
    "slurm_memory_per_worker": "GPUGEEK_SLURM_MEMORY_PER_WORKER",
    "worker_memory": "GPUGEEK_WORKER_MEMORY",
    "slurm_python": "GPUGEEK_SLURM_PYTHON",
    "slurm_scheduler_host": "GPUGEEK_SLURM_SCHEDULER_HOST",
    "slurm_interface": "GPUGEEK_SLURM_INTERFACE",
    "slurm_ports": "GPUGEEK_SLURM_PORTS",
    "slurm_shared_directory": "GPUGEEK_SLURM_SHARED_DIRECTORY",
    "api_key": "GPUGEEK_API_KEY",
    "preload_torch": "GPUGEEK_PRELOAD_TORCH",
    "bokehjs": "GPUGEEK_BOKEHJS",
    "log_level": "GPUGEEK_LOG_LEVEL",
    "output_mode": "GPUGEEK_OUTPUT",
    "job_logs_dir": "GPUGEEK_JOB_LOGS",
    "job_log_bytes": "GPUGEEK_JOB_LOG_BYTES",
    "job_logs_keep": "GPUGEEK_JOB_LOGS_KEEP",
    "mlflow_tracking_uri": "GPUGEEK_MLFLOW_URI",
    "mlflow_metrics": "GPUGEEK_MLFLOW_METRICS",
    "openlineage_target": "GPUGEEK_OPENLINEAGE",
    "elastic_wait_seconds": "GPUGEEK_ELASTIC_WAIT",
    "agent_idle_seconds": "GPUGEEK_AGENT_IDLE",
    "keeper_grace_seconds": "GPUGEEK_KEEPER_GRACE",
    "result_bytes": "GPUGEEK_RESULT_BYTES",
    "team_ledger_url": "GPUGEEK_TEAM_LEDGER",
    "team_service_url": "GPUGEEK_TEAM_SERVICE",
}


class GpugeekConfig(Configurable):
    """Everything a user or an admin may set."""

    default_backend = Unicode(
        "local",
        help="Backend used when --backend is not given: local, kubernetes, address or slurm. Env: GPUGEEK_BACKEND.",
    ).tag(config=True)
    registry_path = Unicode(
        help="SQLite file holding pools, workers and jobs; shared by kernels and the server. "
        "Default: gpugeek.sqlite in the Jupyter runtime directory. Env: GPUGEEK_REGISTRY."
    ).tag(config=True)
    price_file = Unicode(
        "", help="TOML file of catalog/price overrides laid over the built-in catalog. Env: GPUGEEK_PRICE_FILE."
    ).tag(config=True)
    idle_timeout_minutes = Float(
        0.0,
        help="Stop a pool idle this long (0 = never), unless --idle-timeout says otherwise. Env: GPUGEEK_IDLE_TIMEOUT.",
    ).tag(config=True)
    heartbeat_seconds = Float(
        2.0, help="How often a pool's owner writes a heartbeat and checks for stop requests. Env: GPUGEEK_HEARTBEAT."
    ).tag(config=True)
    lost_after_seconds = Float(
        15.0, help="A pool whose owner missed heartbeats this long (or died) is marked lost. Env: GPUGEEK_LOST_AFTER."
    ).tag(config=True)
    worker_start_timeout = Float(
        120.0,
        help="Seconds to wait for all workers of a new pool before failing it. Env: GPUGEEK_WORKER_START_TIMEOUT.",
    ).tag(config=True)
    worker_death_timeout = Float(
        20.0, help="Seconds a worker survives without its scheduler before it exits. Env: GPUGEEK_WORKER_DEATH_TIMEOUT."
    ).tag(config=True)
    output_mode = CaselessStrEnum(
        ["auto", "grouped", "all", "rank0"],
        "auto",
        help="How a job's output is shown: grouped (lines several ranks print alike shown once, as "
        "[ranks 0-7] ...), all (every line as [rank N] ...), rank0 (rank 0's only), or auto: grouped "
        "when the pool has more than 2 ranks, else all. Per job: --output / output=. Env: GPUGEEK_OUTPUT.",
    ).tag(config=True)
    job_logs_dir = Unicode(
        "",
        help="Folder of every job's full per-rank logs (%gpugeek_logs, JobResult.logs). Default: "
        "gpugeek-job-logs beside the registry file. Env: GPUGEEK_JOB_LOGS.",
    ).tag(config=True)
    job_log_bytes = Integer(
        8 * 1024 * 1024,
        help="Characters kept per rank and job on disk: the first and last halves, with a line saying "
        "how much was left out between them. Env: GPUGEEK_JOB_LOG_BYTES.",
    ).tag(config=True)
    elastic_wait_seconds = Float(
        30.0,
        help="A job run with min_ranks (--min-ranks) whose pool lost workers waits this long for them "
        "to be replaced before it restarts on the workers that remain. Env: GPUGEEK_ELASTIC_WAIT.",
    ).tag(config=True)
    agent_idle_seconds = Float(
        300.0,
        help="The per-user agent (which owns kept pools and detached jobs) exits after this many seconds "
        "with no live kept pool and no detached job. Env: GPUGEEK_AGENT_IDLE.",
    ).tag(config=True)
    keeper_grace_seconds = Float(
        120.0,
        help="A kept Slurm pool whose agent died waits this long for a new agent to take it back (its "
        "scheduler's process starts one) before it cancels its Slurm jobs and is recorded lost. "
        "Env: GPUGEEK_KEEPER_GRACE.",
    ).tag(config=True)
    result_bytes = Integer(
        256 * 1024 * 1024,
        help="The largest detached job result kept on disk (every rank's return value, pickled); past it "
        "the result is kept without its values and says so. Env: GPUGEEK_RESULT_BYTES.",
    ).tag(config=True)
    team_ledger_url = Unicode(
        "",
        help="SQLAlchemy URL of the team ledger every user's processes write their pools into, for the "
        "team budget and an admin's report, e.g. 'postgresql+psycopg://gpugeek@db/gpugeek' ('': none; each "
        "user's private registry only). Env: GPUGEEK_TEAM_LEDGER.",
    ).tag(config=True)
    team_service_url = Unicode(
        "",
        help="URL of the team's ledger service (a JupyterHub service: python -m "
        "gpugeek_jupyter.hub.ledger_service), e.g. 'http://127.0.0.1:10101/services/gpugeek-ledger/'. "
        "When set, pools are reported to it with the user's hub token (JUPYTERHUB_API_TOKEN) instead of "
        "writing team_ledger_url, so users never hold the database's credentials. Env: GPUGEEK_TEAM_SERVICE.",
    ).tag(config=True)
    quota_max_gpus = Integer(0, help="GPUs a user may hold at once over all their live pools (0: no limit).").tag(
        config=True
    )
    quota_max_workers = Integer(0, help="Workers a user may hold at once over all their live pools (0: no limit).").tag(
        config=True
    )
    quota_backends: List[str] = List(
        Unicode(), help="Backends a user may launch on, e.g. ['local', 'slurm'] (empty: any)."
    ).tag(config=True)
    quota_gpu_types: List[str] = List(
        Unicode(), help="GPU types a user may launch, e.g. ['cpu', 'A100-80GB'] (empty: any)."
    ).tag(config=True)
    quota_usd_per_day = Float(
        0.0, help="USD a user may spend per day (UTC); past it no pool of theirs starts (0: no limit)."
    ).tag(config=True)
    quota_usd_per_month = Float(
        0.0,
        help="USD a user may spend per calendar month (UTC); past it no pool of theirs starts (0: no limit; "
        "needs team_ledger_url or team_service_url, which keep the spend).",
    ).tag(config=True)
    team_budget_usd_per_month = Float(
        0.0,
        help="USD the whole team may spend per calendar month (UTC), from the team ledger: past it no pool "
        "starts and running pools are stopped (0: no budget; needs team_ledger_url).",
    ).tag(config=True)
    group_quotas = Dict(
        help="Quotas per JupyterHub group, applying to its members, e.g. {'students': {'max_gpus': 1, "
        "'gpu_types': ['cpu', 'A10G']}} (keys as user_quotas; a member of several groups gets each limit's "
        "most generous value; user_quotas go over them). The groups are the hub's, asked with the server's "
        "token, which needs read:users:groups."
    ).tag(config=True)
    user_quotas = Dict(
        help="Per-user quota overrides, e.g. {'ada': {'max_gpus': 16, 'usd_per_month': 2000}} (keys: max_gpus, "
        "max_workers, backends, gpu_types, usd_per_day, usd_per_month)."
    ).tag(config=True)
    job_logs_keep = Integer(
        500,
        help="Jobs whose logs are kept; the oldest are removed in the background as new ones are written. "
        "Env: GPUGEEK_JOB_LOGS_KEEP.",
    ).tag(config=True)
    mlflow_tracking_uri = Unicode(
        "",
        help="MLflow tracking server (or store URI) that gets one run per job: the job's hyperparameters "
        "as params, rank 0's gg.log values as metrics, its id, pool, kind, code hash and outcome as tags, "
        "e.g. 'http://127.0.0.1:5000' ('': no tracking; needs the mlflow extra). The job never waits on "
        "it. Env: GPUGEEK_MLFLOW_URI.",
    ).tag(config=True)
    mlflow_metrics = CaselessStrEnum(
        ["rank0", "mean"],
        "rank0",
        help="Which gg.log values a job's MLflow run gets: rank 0's ('rank0'), or at each step the mean over "
        "the ranks ('mean'); every rank's stay with the job either way. Env: GPUGEEK_MLFLOW_METRICS.",
    ).tag(config=True)
    openlineage_target = Unicode(
        "",
        help="Where each job's OpenLineage run events go (a START, then COMPLETE, FAIL or ABORT with the "
        "data it read and the checkpoints it resumed from and wrote): an http(s) URL of a lineage server "
        "(e.g. Marquez's 'http://127.0.0.1:5000'), or a file that gets one JSON event per line ('': none; "
        "needs the openlineage extra). The job never waits on it. Env: GPUGEEK_OPENLINEAGE.",
    ).tag(config=True)
    log_level = CaselessStrEnum(
        ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        "ERROR",
        help="Level of dask's, tornado's and bokeh's logs in processes that run pools (the launching kernel "
        "or script and the local workers). ERROR by default, so that a pool that works prints nothing; "
        "INFO shows dask's own account of workers starting, restarting and leaving. Env: GPUGEEK_LOG_LEVEL.",
    ).tag(config=True)
    bind_host = Unicode(
        "127.0.0.1", help="Interface the local scheduler and workers listen on. Env: GPUGEEK_BIND_HOST."
    ).tag(config=True)
    pool_tls = Bool(
        True,
        help="Local pools speak TLS with certificates of their own (made at launch, readable by this user "
        "only), so no other user of the machine can connect to their scheduler or workers. False: plain "
        "TCP, which any local user can reach. Env: GPUGEEK_POOL_TLS.",
    ).tag(config=True)
    telemetry_period_seconds = Float(
        1.0, help="Telemetry sampling period on every worker. Env: GPUGEEK_TELEMETRY_PERIOD."
    ).tag(config=True)
    worker_memory = Unicode(
        "",
        help="Memory limit of each worker unless --worker-memory is given (e.g. '16GiB'; the nanny ends a "
        "worker past 95% of it); '': the backend's default. Env: GPUGEEK_WORKER_MEMORY.",
    ).tag(config=True)
    kubernetes_namespace = Unicode(
        "default", help="Namespace of kubernetes pools unless --namespace is given. Env: GPUGEEK_NAMESPACE."
    ).tag(config=True)
    kubernetes_spot_preset = Unicode(
        "gke",
        help="How spot workers find spot nodes on Kubernetes: gke, eks, karpenter, aks, or custom "
        "(then set kubernetes_spot_node_selector). Env: GPUGEEK_SPOT_PRESET.",
    ).tag(config=True)
    kubernetes_spot_node_selector = Dict(
        help="Node labels of spot nodes, replacing the preset's, e.g. {'node-pool': 'spot-a100'}."
    ).tag(config=True)
    kubernetes_allowed_namespaces: List[str] = List(
        Unicode(),
        help="Namespaces whose pods may connect to a kubernetes pool's pods (its NetworkPolicy admits them, "
        "the pool's own pods and the dask-kubernetes operator only), e.g. ['jupyterhub']. Empty: the "
        "notebook's own namespace when it runs in a pod; a notebook outside the cluster connects through "
        "kubectl port-forward, which NetworkPolicies do not filter.",
    ).tag(config=True)
    kubernetes_operator_namespace = Unicode(
        "dask-operator",
        help="Namespace of the dask-kubernetes operator, whose pods a pool's NetworkPolicy admits (it scales "
        "and retires workers through the scheduler); '' admits no operator.",
    ).tag(config=True)
    kubernetes_spot_tolerations: List[dict[str, str]] = List(
        help="Tolerations for spot nodes' taints, replacing the preset's, e.g. "
        "[{'key': 'spot', 'operator': 'Exists', 'effect': 'NoSchedule'}]."
    ).tag(config=True)
    slurm_partition = Unicode(
        "",
        help="Slurm partition of slurm pools unless --partition is given ('': the site's default). "
        "Env: GPUGEEK_SLURM_PARTITION.",
    ).tag(config=True)
    slurm_account = Unicode(
        "",
        help="Slurm account charged for slurm pools unless --account is given ('': your default account). "
        "Env: GPUGEEK_SLURM_ACCOUNT.",
    ).tag(config=True)
    slurm_qos = Unicode(
        "", help="Slurm QOS of slurm pools unless --qos is given ('': the default). Env: GPUGEEK_SLURM_QOS."
    ).tag(config=True)
    slurm_walltime = Unicode(
        "",
        help="Time limit of each Slurm job of a slurm pool unless --walltime is given, as Slurm writes it "
        "(minutes, HH:MM:SS or D-HH:MM:SS; '': the partition's default). Env: GPUGEEK_SLURM_WALLTIME.",
    ).tag(config=True)
    slurm_constraint = Unicode(
        "",
        help="Slurm node features the workers need (sbatch --constraint) unless --constraint is given. "
        "Env: GPUGEEK_SLURM_CONSTRAINT.",
    ).tag(config=True)
    slurm_sbatch_directives: List[str] = List(
        Unicode(),
        help="Extra #SBATCH lines of every slurm pool's job script unless --sbatch-directives is given, "
        "e.g. ['--exclusive', '--mail-type=END'].",
    ).tag(config=True)
    slurm_prologue = Unicode(
        "",
        help="Shell lines the job script runs before the worker starts, unless --prologue is given, e.g. "
        "'module load cuda/12.4' or 'source ~/venv/bin/activate'. Env: GPUGEEK_SLURM_PROLOGUE.",
    ).tag(config=True)
    slurm_gres: Dict[str, str] = Dict(
        value_trait=Unicode(),
        help="Slurm GPU gres type by GPU type, replacing the catalog's slurm_gres, e.g. {'A100-80GB': "
        "'a100_80g'}: the workers ask for --gres=gpu:a100_80g:1 ('' asks for --gres=gpu:1, any type).",
    ).tag(config=True)
    slurm_cpus_per_worker = Integer(
        0,
        help="CPU cores of each Slurm job (--cpus-per-task); 0: 1 on cpu pools (one rank per core), the "
        "site's default on GPU pools. Env: GPUGEEK_SLURM_CPUS_PER_WORKER.",
    ).tag(config=True)
    slurm_memory_per_worker = Unicode(
        "",
        help="Memory of each Slurm job (--mem, e.g. '32GB'); '': the site's default. "
        "Env: GPUGEEK_SLURM_MEMORY_PER_WORKER.",
    ).tag(config=True)
    slurm_python = Unicode(
        "",
        help="Python on the compute nodes that runs the workers ('': this kernel's, which then must be "
        "at the same path there). Env: GPUGEEK_SLURM_PYTHON.",
    ).tag(config=True)
    slurm_scheduler_host = Unicode(
        "",
        help="Address the scheduler of a slurm pool listens on and its workers connect to ('': every "
        "interface, and the address of the one with the default route). Env: GPUGEEK_SLURM_SCHEDULER_HOST.",
    ).tag(config=True)
    slurm_interface = Unicode(
        "",
        help="Network interface of the scheduler and the workers of slurm pools, e.g. 'ib0' (instead "
        "of slurm_scheduler_host). Env: GPUGEEK_SLURM_INTERFACE.",
    ).tag(config=True)
    slurm_ports = Unicode(
        "",
        help="Ports FIRST:LAST that slurm pools listen on, for a firewall between the notebook's host and "
        "the compute nodes: the scheduler and its dashboard take free ones on the notebook's host, each "
        "worker and its nanny on its node ('': ports the OS picks). Env: GPUGEEK_SLURM_PORTS, e.g. "
        "'40000:40100'.",
    ).tag(config=True)
    slurm_shared_directory = Unicode(
        "",
        help="Folder that the notebook's host and the compute nodes both see, for the workers' logs and a "
        "copy of the pool's TLS credentials (readable by you only). Default: gpugeek-jupyter/slurm in "
        "$XDG_DATA_HOME (~/.local/share). Env: GPUGEEK_SLURM_SHARED_DIRECTORY.",
    ).tag(config=True)
    api_key = Unicode("", help="GPUGEEK API key; never displayed. Env: GPUGEEK_API_KEY.").tag(config=True)
    preload_torch = Bool(
        True,
        help="Import torch in local workers as they start, so the first job does not wait for it. "
        "Env: GPUGEEK_PRELOAD_TORCH.",
    ).tag(config=True)

    bokehjs = Unicode(
        "inline",
        help="Where the live utilization panel's BokehJS comes from: 'inline' (put into the first "
        "panel's output, about 4 MB; works without internet) or 'cdn' (cdn.bokeh.org; the browser needs "
        "internet). Env: GPUGEEK_BOKEHJS.",
    ).tag(config=True)

    @default("registry_path")
    def _default_registry_path(self) -> str:
        from jupyter_core.paths import jupyter_runtime_dir  # a path helper only, no Jupyter machinery

        return str(Path(jupyter_runtime_dir()) / "gpugeek.sqlite")

    def __init__(self, **kwargs: Any) -> None:
        # precedence, lowest first: defaults, GPUGEEK_* variables, config (files, the server's), kwargs
        parent = kwargs.get("parent")
        given = kwargs.pop("config", None)
        if given is None:
            given = parent.config if parent is not None else Config()
        config = Config({"GpugeekConfig": environment_settings()})
        config.merge(given)
        super().__init__(config=config, **kwargs)

    def __repr__(self) -> str:  # the api_key must never be shown
        return f"GpugeekConfig(default_backend={self.default_backend!r}, registry_path={self.registry_path!r})"


def environment_settings(environ: Any = None) -> dict[str, Any]:
    """The settings given by ``GPUGEEK_*`` variables, parsed as traitlets parses command-line values."""
    environ = os.environ if environ is None else environ
    traits = GpugeekConfig.class_traits()
    settings: dict[str, Any] = {}
    for name, variable in ENVIRONMENT.items():
        raw = environ.get(variable)
        if raw in (None, ""):
            continue
        trait = traits[name]
        if isinstance(trait, Bool):  # traitlets reads only true/false; "0"/"no" are common here too
            settings[name] = raw.strip().lower() not in ("0", "false", "no", "off")
        else:
            settings[name] = trait.from_string(raw)
    return settings


_config: GpugeekConfig | None = None


def _load_jupyter_config_files():  # type: ignore[no-untyped-def]
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config.loader import Config, JSONFileConfigLoader, PyFileConfigLoader

    merged = Config()
    for directory in reversed(jupyter_config_path()):  # later entries have lower priority
        for loader_class, filename in (
            (JSONFileConfigLoader, "jupyter_gpugeek_config.json"),
            (PyFileConfigLoader, "jupyter_gpugeek_config.py"),
        ):
            if (Path(directory) / filename).exists():
                merged.merge(loader_class(filename, path=directory).load_config())
    return merged


def get_config() -> GpugeekConfig:
    """This process's settings (built once; ``set_config`` replaces them, e.g. from the server)."""
    global _config
    if _config is None:
        _config = GpugeekConfig(config=_load_jupyter_config_files())
    return _config


def set_config(config: GpugeekConfig | None) -> None:
    global _config
    _config = config
