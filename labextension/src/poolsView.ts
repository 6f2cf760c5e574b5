/**
 * What the pools part of the panel shows, built from the server's answers
 * without a DOM: live pools first (newest first, each with its running
 * jobs), then the pools that ended in the last 24 h ("Recent", newest end
 * first), then older history pages the user asked for ("Show more"), each
 * ended record once.
 */

import { firstLine, formatAgo, formatTimestamp, formatUsd, formatUsdPerHour } from './format';
import { IJobModel, IPoolModel, IPoolPage, IQuotaStatus, isLive, PoolStatus } from './models';

/** Ended records shown per "Show more" page. */
export const HISTORY_PAGE_SIZE = 25;
/** Pages fetched at most by one "Show more" when they hold only rows already shown. */
export const MAX_PAGES_PER_LOAD = 10;

/** A live pool's card: the pool and the jobs running (or about to) on it. */
export interface ILivePoolRow {
  pool: IPoolModel;
  jobs: IJobModel[];
}

/** One compact row for an ended pool. */
export interface IEndedPoolRow {
  /** Unique per record: a name may have ended many times. */
  key: string;
  pool: IPoolModel;
  /** `3 h ago` */
  ended: string;
  /** The exact end time, for a tooltip. */
  endedTitle: string;
  /** Why a failed or lost pool ended, cut to one line; null otherwise. */
  reason: string | null;
}

export interface IPoolsView {
  live: ILivePoolRow[];
  /** Ended within the server's recent window (the default listing), newest end first. */
  recent: IEndedPoolRow[];
  /** History pages loaded so far, newest first, without the records already in `recent`. */
  older: IEndedPoolRow[];
  /** One line about `recent`: `12 ended · 3 failed · 1 lost`. */
  recentSummary: string;
  /** The panel header's line: what is live, what it costs, what runs. */
  glance: IGlance;
}

/** The header's summary: pools and spend at a glance. */
export interface IGlance {
  /** `2 live pools · 6/8 workers · $4.80/h · 1 job running · 2 queued` */
  text: string;
  /** `$12.34`: what the live pools and those ended in the last 24 h have cost so far. */
  spent: string;
  /** Tooltip that says what the figures count. */
  title: string;
}

/** A key unique to one pool record (names repeat across relaunches; a name and its start do not). */
export function poolKey(pool: Pick<IPoolModel, 'name' | 'created_at'>): string {
  return `${pool.name}@${pool.created_at}`;
}

const JOB_ACTIVE = new Set<IJobModel['status']>(['pending', 'queued', 'running']);
/** Statuses whose reason says what went wrong (a stopped pool's reason is just who stopped it). */
const REASON_SHOWN = new Set<PoolStatus>(['failed', 'lost']);

/**
 * The panel's pools: `listed` is the default `GET /gpugeek/pools` answer,
 * `jobs` the jobs listing and `history` the `state=ended` pages loaded so far.
 */
export function buildPoolsView(
  listed: readonly IPoolModel[],
  jobs: readonly IJobModel[],
  history: readonly IPoolModel[],
  now: number
): IPoolsView {
  const live = listed
    .filter(pool => isLive(pool.status))
    .sort(newestFirst(pool => pool.created_at))
    .map(pool => ({ pool, jobs: activeJobsOn(pool, jobs) }));
  const recentPools = listed
    .filter(pool => !isLive(pool.status))
    .sort(newestFirst(pool => pool.ended_at ?? pool.created_at));
  const shown = new Set(listed.map(poolKey));
  const older: IPoolModel[] = [];
  for (const pool of history) {
    const key = poolKey(pool);
    if (!isLive(pool.status) && !shown.has(key)) {
      shown.add(key);
      older.push(pool);
    }
  }
  return {
    live,
    recent: recentPools.map(pool => endedRow(pool, now)),
    older: older.map(pool => endedRow(pool, now)),
    recentSummary: summarizeEnded(recentPools),
    glance: glance(listed, jobs)
  };
}

/** What the header says about `listed` (live and recently ended pools) and `jobs`. */
export function glance(listed: readonly IPoolModel[], jobs: readonly IJobModel[]): IGlance {
  const live = listed.filter(pool => isLive(pool.status));
  const parts: string[] = [];
  if (live.length === 0) {
    parts.push('no live pool');
  } else {
    parts.push(`${live.length} live ${live.length === 1 ? 'pool' : 'pools'}`);
    const ready = live.reduce((sum, pool) => sum + pool.workers_ready, 0);
    const wanted = live.reduce((sum, pool) => sum + pool.count, 0);
    parts.push(`${ready}/${wanted} ${wanted === 1 ? 'worker' : 'workers'}`);
    parts.push(formatUsdPerHour(live.reduce((sum, pool) => sum + pool.usd_per_hour, 0)));
  }
  const running = jobs.filter(job => job.status === 'running').length;
  const queued = jobs.filter(job => job.status === 'queued').length;
  if (running > 0) {
    parts.push(`${running} ${running === 1 ? 'job' : 'jobs'} running`);
  }
  if (queued > 0) {
    parts.push(`${queued} queued`);
  }
  return {
    text: parts.join(' · '),
    spent: formatUsd(listed.reduce((sum, pool) => sum + pool.usd_so_far, 0)),
    title:
      'Workers ready of those asked for and the price per hour of the live pools; spent: what the ' +
      'live pools and those that ended in the last 24 h have cost so far'
  };
}

/** `12 ended · 3 failed · 1 lost`, or a sentence when none ended. */
export function summarizeEnded(pools: readonly Pick<IPoolModel, 'status'>[]): string {
  if (pools.length === 0) {
    return 'none ended in the last 24 h';
  }
  const parts = [`${pools.length} ended`];
  for (const status of ['failed', 'lost'] as const) {
    const count = pools.filter(pool => pool.status === status).length;
    if (count > 0) {
      parts.push(`${count} ${status}`);
    }
  }
  return parts.join(' · ');
}

function endedRow(pool: IPoolModel, now: number): IEndedPoolRow {
  const reason = REASON_SHOWN.has(pool.status) && pool.reason ? firstLine(pool.reason) : null;
  return {
    key: poolKey(pool),
    pool,
    ended: pool.ended_at ? formatAgo(pool.ended_at, now) : '–',
    endedTitle: pool.ended_at ? `${pool.status} ${formatTimestamp(pool.ended_at)}` : pool.status,
    reason
  };
}

/** Jobs still pending or running on this record of the pool (not on an earlier one of its name). */
function activeJobsOn(pool: IPoolModel, jobs: readonly IJobModel[]): IJobModel[] {
  const created = time(pool.created_at);
  return jobs
    .filter(
      job =>
        job.pool === pool.name &&
        JOB_ACTIVE.has(job.status) &&
        (job.started_at === null || Number.isNaN(created) || time(job.started_at) >= created)
    )
    .sort(newestFirst(job => job.started_at ?? ''));
}

function time(iso: string): number {
  return new Date(iso).getTime();
}

/** A comparator on ISO timestamps, newest first; unparsable ones last. */
function newestFirst<T>(when: (item: T) => string): (a: T, b: T) => number {
  const value = (item: T): number => {
    const t = time(when(item));
    return Number.isNaN(t) ? -Infinity : t;
  };
  return (a, b) => value(b) - value(a);
}

/** Fetches one history page: ended records with ids below `before` (from the top for null). */
export type FetchHistoryPage = (before: number | null) => Promise<IPoolPage>;

/**
 * Pages through `GET /gpugeek/pools?state=ended` for "Show more". The first
 * pages repeat what "Recent" already shows, so one load keeps fetching until
 * a page brings something new (or history ends).
 */
export class HistoryPager {
  private _pools: IPoolModel[] = [];
  /** The next page's `before`; null for the first page (and, once done, for none). */
  private _next: number | null = null;
  private _done = false;
  private _loading: Promise<number> | null = null;

  constructor(
    private readonly _fetch: FetchHistoryPage,
    private readonly _maxPagesPerLoad = MAX_PAGES_PER_LOAD
  ) {}

  /** Every record loaded so far, newest first. */
  get pools(): readonly IPoolModel[] {
    return this._pools;
  }

  /** True once the server said there is no older page. */
  get done(): boolean {
    return this._done;
  }

  get loading(): boolean {
    return this._loading !== null;
  }

  /**
   * Load pages until one holds a record `isNew` accepts; resolves to how many
   * it held. A failed page rejects and is asked again by the next call; a
   * call while one is loading joins it.
   */
  loadMore(isNew: (pool: IPoolModel) => boolean): Promise<number> {
    if (this._done) {
      return Promise.resolve(0);
    }
    if (!this._loading) {
      this._loading = this._load(isNew).finally(() => {
        this._loading = null;
      });
    }
    return this._loading;
  }

  private async _load(isNew: (pool: IPoolModel) => boolean): Promise<number> {
    let fresh = 0;
    for (let page = 0; page < this._maxPagesPerLoad && fresh === 0 && !this._done; page++) {
      const answer = await this._fetch(this._next);
      this._pools = this._pools.concat(answer.pools);
      this._next = answer.next;
      this._done = answer.next === null;
      fresh = answer.pools.filter(isNew).length;
    }
    return fresh;
  }
}

/**
 * The header's quota line: `quota 2/8 GPUs · 3/16 workers · $12.00 of $200.00 today ·
 * $40.00 of $1000.00 this month · team $1200.00 of $5000.00 this month`, the limits that apply only; null when none does.
 */
export function quotaLine(status: IQuotaStatus | null): string | null {
  if (!status || !status.limited) {
    return null;
  }
  const { quota, usage } = status;
  const parts: string[] = [];
  if (quota.max_gpus) {
    parts.push(`${usage.gpus}/${quota.max_gpus} GPUs`);
  }
  if (quota.max_workers) {
    parts.push(`${usage.workers}/${quota.max_workers} workers`);
  }
  if (quota.usd_per_day) {
    parts.push(`${formatUsd(usage.user_usd_today)} of ${formatUsd(quota.usd_per_day)} today`);
  }
  if (quota.usd_per_month) {
    parts.push(
      `${formatUsd(usage.user_usd_month ?? 0)} of ${formatUsd(quota.usd_per_month)} this month`
    );
  }
  if (status.team_budget_usd_per_month) {
    parts.push(
      `team ${formatUsd(usage.team_usd_month)} of ${formatUsd(status.team_budget_usd_per_month)} this month`
    );
  }
  if (quota.backends.length) {
    parts.push(`on ${quota.backends.join(', ')}`);
  }
  if (quota.gpu_types.length) {
    parts.push(`GPU types ${quota.gpu_types.join(', ')}`);
  }
  return parts.length ? `quota ${parts.join(' · ')}` : null;
}
