import { ICatalog, IJobModel, IJobOutput, IPoolModel, IWhereReport } from '../src/models';

export function makePool(overrides: Partial<IPoolModel> = {}): IPoolModel {
  return {
    name: 'pool-1',
    status: 'ready',
    backend: 'local',
    gpu_type: 'A100',
    count: 4,
    workers_ready: 4,
    spot_workers: 2,
    reserved_workers: 1,
    usd_per_hour: 9.5,
    usd_so_far: 0.42,
    budget_usd: 10,
    budget_fraction: 0.042,
    mean_sm_util: 63.4,
    sm_util_history: [10, 50, 90],
    util_kind: 'sm',
    dashboard_link: 'http://127.0.0.1:8787/status',
    scheduler_address: 'tcp://127.0.0.1:8786',
    owner: 'kernel 1234',
    owner_label: null,
    namespace: null,
    created_at: '2026-11-30T08:00:00Z',
    ended_at: null,
    reason: null,
    ...overrides
  };
}

export function makeJob(overrides: Partial<IJobModel> = {}): IJobModel {
  return {
    id: 'job-1',
    pool: 'pool-1',
    status: 'running',
    ranks: 4,
    started_at: '2026-11-30T08:00:00Z',
    ended_at: null,
    duration_s: 65,
    usd: 0.12,
    failure_reason: null,
    code_sha256: 'ab'.repeat(32),
    hyperparams: { lr: 0.001, epochs: 3 },
    queued_at: '2026-11-30T08:00:00Z',
    waited_s: 0,
    position: null,
    submitter: 'notebook train.ipynb',
    detached: false,
    ...overrides
  };
}

export function makeWhereReport(overrides: Partial<IWhereReport> = {}): IWhereReport {
  const summary =
    "job job-1 on pool 'pool-1', 2 ranks: rank 0 waiting in dist.all_reduce at cell:6; rank 1 at cell:5";
  return {
    pool: 'pool-1',
    job_id: 'job-1',
    running: true,
    summary,
    text: [
      summary,
      'rank 0, waiting in dist.all_reduce (pid 11 on 127.0.0.1):',
      '    cell:6 in <module>: dist.all_reduce(t)'
    ].join('\n'),
    ranks: [
      { rank: 0, worker: 'tcp://127.0.0.1:4001', running: true, collective: 'dist.all_reduce()' },
      { rank: 1, worker: 'tcp://127.0.0.1:4002', running: true, collective: null }
    ],
    idle_workers: [],
    elapsed_s: 0.2,
    unreachable: null,
    ...overrides
  };
}

export function makeJobOutput(overrides: Partial<IJobOutput> = {}): IJobOutput {
  return {
    job: 'job-1',
    status: 'running',
    ranks: [
      { rank: 0, state: 'running' },
      { rank: 1, state: 'running' }
    ],
    tail: '[ranks 0-1] step 1\n[ranks 0-1] step 2\n[rank 1] warning: slow batch',
    ...overrides
  };
}

export const CATALOG: ICatalog = {
  gpu_types: [
    {
      name: 'A100',
      memory_gb: 80,
      interconnects: ['nvlink', 'pcie'],
      prices: { on_demand: 3, spot: 1, reserved: 2 }
    },
    {
      name: 'T4',
      memory_gb: 16,
      interconnects: ['pcie'],
      prices: { on_demand: 0.5, spot: 0.2, reserved: 0.35 }
    }
  ],
  backends: ['local', 'address', 'kubernetes'],
  defaults: { gpu_type: 'T4', count: 2, spot_fraction: 0.5, idle_timeout: 15 }
};
