/**
 * JSON models exchanged with the gpugeek_jupyter server extension.
 *
 * Field names mirror the server's JSON keys exactly, so a response can be
 * used without translation.
 */

export type PoolStatus =
  | 'starting'
  | 'ready'
  | 'stopping'
  | 'stopped'
  | 'failed'
  | 'lost';

export type PoolBackend = 'local' | 'kubernetes' | 'slurm' | 'address';

export type JobStatus =
  | 'pending'
  | 'queued'
  | 'running'
  | 'succeeded'
  | 'failed'
  | 'cancelled';

/** One pool, as `GET /gpugeek/pools` lists it. */
export interface IPoolModel {
  name: string;
  status: PoolStatus;
  backend: PoolBackend;
  gpu_type: string;
  count: number;
  workers_ready: number;
  spot_workers: number;
  reserved_workers: number;
  usd_per_hour: number;
  usd_so_far: number;
  budget_usd: number | null;
  /** usd_so_far / budget_usd; null without a budget. */
  budget_fraction: number | null;
  /** Mean streaming-multiprocessor utilisation in percent (0..100). */
  mean_sm_util: number | null;
  /** Recent mean SM utilisation in percent, oldest first; may be empty. */
  sm_util_history: number[];
  /** What the utilisation numbers measure: GPU SM % or, for cpu pools, CPU %. */
  util_kind: 'sm' | 'cpu';
  /**
   * Where the dask dashboard is: for local and Slurm pools the server's route to it
   * (`gpugeek/pools/<name>/dashboard/status`, relative to its base URL), else its http address;
   * null once the pool has ended.
   */
  dashboard_link: string | null;
  /**
   * What serves the dashboard behind the user's Jupyter login, relative to the server's base
   * URL: `gpugeek/pools/<name>/dashboard/status` for local and Slurm pools (their schedulers
   * listen on no TCP port), `proxy/<port>/status` for another dashboard on this host; null once
   * the pool has ended or for a dashboard on another host.
   */
  dashboard_path?: string | null;
  scheduler_address: string;
  /** Who created the pool: "kernel <id>", "server" or "pid N". */
  owner: string;
  /** The notebook it was launched from ("notebook train.ipynb"); null outside a notebook. */
  owner_label?: string | null;
  namespace: string | null;
  created_at: string;
  /** When the pool stopped, failed or was lost; null while it is live. */
  ended_at: string | null;
  /** Why the pool is failed/lost, or why telemetry is missing. */
  reason: string | null;
}

/** `GET /gpugeek/pools?state=ended`: one page of history. */
export interface IPoolPage {
  pools: IPoolModel[];
  /** The `before` of the next page; null on the last one. */
  next: number | null;
}

/** One distributed job, as `GET /gpugeek/jobs` lists it. */
export interface IJobModel {
  id: string;
  pool: string;
  status: JobStatus;
  ranks: number;
  started_at: string | null;
  ended_at: string | null;
  duration_s: number | null;
  usd: number | null;
  failure_reason: string | null;
  code_sha256: string | null;
  hyperparams: Record<string, unknown>;
  /** When it joined its pool's queue (null: recorded before jobs queued). */
  queued_at: string | null;
  /** Seconds it waited in its pool's queue (so far, while queued). */
  waited_s: number;
  /** Its place in its pool's queue while queued (1: next to run), else null. */
  position: number | null;
  /** Who submitted it: a notebook, a script or a process. */
  submitter: string | null;
  /** The user's agent runs it: no kernel waits for it (a detached job). */
  detached: boolean;
  /** The line naming a rank slower than the others (with its likely cause), once said. */
  slow_rank?: string | null;
}

/**
 * One rank's state as the job's driver recorded it: running, done, failed,
 * stopped, died or killed; `lost` when the job ended while the rank was still
 * recorded running (its driver went away).
 */
export interface IRankState {
  rank: number;
  state: string;
}

/** `GET /gpugeek/jobs/{id}/output`: the ranks' states and the grouped tail of their logs. */
export interface IJobOutput {
  job: string;
  status: JobStatus;
  /** By rank; empty before the job starts. */
  ranks: IRankState[];
  /** The last lines of every rank's log, lines alike shown once: "[ranks 0-7] step 42". */
  tail: string;
}

/** One frame of a rank's stack, innermost first. */
export interface IStackFrame {
  file: string;
  /** Short: "cell", "train.py", "torch/distributed/distributed_c10d.py". */
  name: string;
  line: number;
  function: string;
  code: string;
  /** The job's own code (its cell or script, or a file outside the libraries). */
  user: boolean;
}

/** One rank in `GET /gpugeek/jobs/{id}/where`, as its worker answered. */
export interface IRankWhere {
  rank: number;
  worker: string;
  job_id?: string | null;
  /** False: the rank finished before its peers. */
  running?: boolean | null;
  /** Present (false) only for a worker that did not answer in time. */
  responding?: boolean;
  reason?: string;
  /** The collective it waits in, e.g. "dist.all_reduce()". */
  collective?: string | null;
  at?: string | null;
  pid?: number;
  host?: string | null;
  frames?: IStackFrame[];
}

/** `GET /gpugeek/jobs/{id}/where`: where each rank of a running job is now. */
export interface IWhereReport {
  pool: string;
  job_id: string | null;
  running: boolean;
  /** One line: "ranks 1-7 waiting in dist.all_reduce at train.py:42; rank 0 at data.py:17 in __getitem__". */
  summary: string;
  /** The summary, then each group's stack (what %gpugeek_where prints). */
  text: string;
  ranks: IRankWhere[];
  idle_workers: string[];
  elapsed_s: number;
  /** Why no worker could be asked (the pool's scheduler does not answer). */
  unreachable: string | null;
}

export interface IGpuPrices {
  on_demand: number;
  spot: number;
  reserved: number;
}

export interface IGpuType {
  name: string;
  memory_gb: number;
  interconnects: string[];
  /** USD per GPU-hour. */
  prices: IGpuPrices;
  /** GPUs of this type this machine has for a local pool; null (cpu): no limit. */
  on_this_machine?: number | null;
}

/** `GET /gpugeek/catalog`. */
export interface ICatalog {
  gpu_types: IGpuType[];
  backends: PoolBackend[];
  defaults: Partial<ILaunchRequest> & Record<string, unknown>;
  /** What NVML found on the server's machine, e.g. 'no NVIDIA GPU (NVML library not found ...)'. */
  gpus_here?: string;
  /** The launch fields' declaration, as the REST schema's LaunchRequest describes each one. */
  launch_fields?: Record<string, ILaunchFieldSchema>;
}

/** One launch field as the server declares it (a property of LaunchRequest's JSON schema). */
export interface ILaunchFieldSchema {
  type?: string | string[];
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  default?: unknown;
  description?: string;
  examples?: unknown[];
  /** The backends the field is for; absent: every backend. */
  'x-backends'?: string[];
}

/** Body of `POST /gpugeek/pools`. */
export interface ILaunchRequest {
  gpu_type: string;
  count: number;
  backend: PoolBackend;
  spot_fraction: number;
  /** USD cap for the pool; null for no cap. */
  budget: number | null;
  /** Minutes without work before the pool stops itself; 0 never stops. */
  idle_timeout: number;
  name: string;
  interconnect?: string;
  /** Slurm pools only (`backend: 'slurm'`): where and how the batch jobs run. */
  partition?: string;
  account?: string;
  qos?: string;
  walltime?: string;
  constraint?: string;
  prologue?: string;
  /** The user's agent owns the pool: it outlives the kernel and the Jupyter server. */
  keep?: boolean;
}

/** `GET /gpugeek/pools/{name}/metrics`. */
export interface IPoolMetrics {
  samples: Record<string, unknown>[];
  /** Why there are no samples (for example no NVML on the workers). */
  reason: string | null;
  /** The pool's status: a monitor says the pool ended instead of going quiet. */
  status?: PoolStatus;
}

export const POOL_STATUSES: readonly PoolStatus[] = [
  'starting',
  'ready',
  'stopping',
  'stopped',
  'failed',
  'lost'
];

export const DEFAULT_BACKENDS: readonly PoolBackend[] = [
  'local',
  'address',
  'kubernetes'
];

/** Whether a pool in `status` has running processes (and so a dashboard worth linking to). */
export function isLive(status: PoolStatus): boolean {
  return status === 'starting' || status === 'ready' || status === 'stopping';
}

/** Whether a job in `status` has ended (succeeded, failed or cancelled). */
export function isJobFinal(status: JobStatus): boolean {
  return status !== 'pending' && status !== 'queued' && status !== 'running';
}

/** Whether a Stop request still means something for a pool in `status`. */
export function canStopPool(status: PoolStatus): boolean {
  return status !== 'stopping' && status !== 'stopped';
}

/** `GET /gpugeek/quota`: the caller's limits and what counts against them. */
export interface IQuotaStatus {
  user: string;
  /** False when no limit and no budget apply: no quota line then. */
  limited: boolean;
  quota: {
    max_gpus: number;
    max_workers: number;
    backends: string[];
    gpu_types: string[];
    usd_per_day: number;
    /** Absent from a server of an earlier release. */
    usd_per_month?: number;
    sources: Record<string, string>;
  };
  usage: {
    gpus: number;
    workers: number;
    user_usd_today: number;
    /** Absent from a server of an earlier release. */
    user_usd_month?: number;
    team_usd_month: number;
  };
  team_budget_usd_per_month: number;
  /** "service": the team's ledger service said them; "settings": this server's settings. */
  from: 'service' | 'settings';
}
