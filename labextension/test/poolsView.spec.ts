import { IPoolModel, IPoolPage, IQuotaStatus } from '../src/models';
import {
  buildPoolsView,
  glance,
  HistoryPager,
  poolKey,
  quotaLine,
  summarizeEnded
} from '../src/poolsView';
import { makeJob, makePool } from './fixtures';

const NOW = Date.parse('2026-11-30T12:00:00Z');

function ended(name: string, endedAt: string, overrides: Partial<IPoolModel> = {}): IPoolModel {
  return makePool({
    name,
    status: 'stopped',
    created_at: '2026-11-29T10:00:00Z',
    ended_at: endedAt,
    usd_per_hour: 0,
    workers_ready: 0,
    ...overrides
  });
}

function live(name: string, createdAt: string): IPoolModel {
  return makePool({ name, status: 'ready', created_at: createdAt });
}

describe('buildPoolsView', () => {
  it('puts live pools first, newest first, whatever order the server listed them in', () => {
    const listed = [
      ended('old-run', '2026-11-30T09:00:00Z'),
      live('first', '2026-11-30T08:00:00Z'),
      live('second', '2026-11-30T11:00:00Z'),
      makePool({ name: 'coming-up', status: 'starting', created_at: '2026-11-30T11:30:00Z' }),
      makePool({ name: 'going', status: 'stopping', created_at: '2026-11-30T07:00:00Z' })
    ];
    const view = buildPoolsView(listed, [], [], NOW);
    expect(view.live.map(row => row.pool.name)).toEqual(['coming-up', 'second', 'first', 'going']);
    expect(view.recent.map(row => row.pool.name)).toEqual(['old-run']);
  });

  it('lists ended pools in Recent by when they ended, newest first', () => {
    const listed = [
      ended('a', '2026-11-30T06:00:00Z', { created_at: '2026-11-30T05:00:00Z' }),
      ended('b', '2026-11-30T11:00:00Z', { created_at: '2026-11-30T01:00:00Z' }),
      ended('c', '2026-11-30T09:00:00Z', { status: 'failed', created_at: '2026-11-30T08:59:00Z' })
    ];
    const view = buildPoolsView(listed, [], [], NOW);
    expect(view.recent.map(row => [row.pool.name, row.ended])).toEqual([
      ['b', '1 h ago'],
      ['c', '3 h ago'],
      ['a', '6 h ago']
    ]);
    expect(view.live).toEqual([]);
  });

  it('gives a live card the jobs running or pending on it, not ended ones or other pools', () => {
    const pool = live('train', '2026-11-30T10:00:00Z');
    const jobs = [
      makeJob({ id: 'run', pool: 'train', status: 'running', started_at: '2026-11-30T11:00:00Z' }),
      makeJob({ id: 'queued', pool: 'train', status: 'pending', started_at: '2026-11-30T11:50:00Z' }),
      makeJob({ id: 'done', pool: 'train', status: 'succeeded' }),
      makeJob({ id: 'elsewhere', pool: 'other', status: 'running' }),
      // a job of an earlier pool of the same name, left running by a lost owner
      makeJob({ id: 'stale', pool: 'train', status: 'running', started_at: '2026-11-29T11:00:00Z' })
    ];
    const [card] = buildPoolsView([pool], jobs, [], NOW).live;
    expect(card.jobs.map(job => job.id)).toEqual(['queued', 'run']);
  });

  it('shows a failed or lost pool its reason once, in one line; a stopped pool none', () => {
    const reason = 'worker 0 did not start within 60 s\nTraceback (most recent call last):\n  ...';
    const view = buildPoolsView(
      [
        ended('broken', '2026-11-30T11:00:00Z', { status: 'failed', reason }),
        ended('gone', '2026-11-30T10:00:00Z', { status: 'lost', reason: 'no heartbeat for 30 s' }),
        ended('done', '2026-11-30T09:00:00Z', { reason: 'stopped from the Jupyter server' })
      ],
      [],
      [],
      NOW
    );
    expect(view.recent.map(row => row.reason)).toEqual([
      'worker 0 did not start within 60 s…',
      'no heartbeat for 30 s',
      null
    ]);
    expect(view.recent[0].pool.reason).toBe(reason); // the full text stays for the tooltip
  });

  it('adds history pages below Recent without repeating the records Recent shows', () => {
    const recentA = ended('a', '2026-11-30T11:00:00Z');
    const recentB = ended('b', '2026-11-30T10:00:00Z');
    const olderA = ended('a', '2026-11-27T10:00:00Z', { created_at: '2026-11-27T09:00:00Z' });
    const older = ended('c', '2026-11-26T10:00:00Z', { status: 'failed' });
    const history = [recentA, recentB, olderA, older, older];
    const view = buildPoolsView([recentA, recentB], [], history, NOW);
    expect(view.recent.map(row => row.key)).toEqual([poolKey(recentA), poolKey(recentB)]);
    expect(view.older.map(row => [row.pool.name, row.ended])).toEqual([
      ['a', '3 d ago'],
      ['c', '4 d ago']
    ]);
  });

  it('keeps live records out of the history rows', () => {
    const running = live('x', '2026-11-30T10:00:00Z');
    const view = buildPoolsView([running], [], [running], NOW);
    expect(view.older).toEqual([]);
  });

  it('summarizes Recent in one line for its collapsed header', () => {
    expect(summarizeEnded([])).toBe('none ended in the last 24 h');
    const statuses = ['failed', 'stopped', 'failed', 'lost', 'stopped'] as const;
    expect(summarizeEnded(statuses.map(status => ({ status })))).toBe('5 ended · 2 failed · 1 lost');
    expect(buildPoolsView([ended('a', '2026-11-30T11:00:00Z')], [], [], NOW).recentSummary).toBe(
      '1 ended'
    );
  });
});

describe('glance', () => {
  it('sums the live pools, their workers and price, the jobs that run or wait, and the spend', () => {
    const a = makePool({ name: 'a', status: 'ready', count: 4, workers_ready: 4, usd_per_hour: 4, usd_so_far: 2 });
    const b = makePool({ name: 'b', status: 'starting', count: 4, workers_ready: 1, usd_per_hour: 0.8, usd_so_far: 0.01 });
    const old = ended('c', '2026-11-30T11:00:00Z', { usd_so_far: 10 });
    const jobs = [
      makeJob({ id: 'j1', status: 'running' }),
      makeJob({ id: 'j2', status: 'queued' }),
      makeJob({ id: 'j3', status: 'queued' }),
      makeJob({ id: 'j4', status: 'succeeded' })
    ];
    const view = buildPoolsView([a, b, old], jobs, [], NOW).glance;
    expect(view.text).toBe('2 live pools · 5/8 workers · $4.80/h · 1 job running · 2 queued');
    expect(view.spent).toBe('$12.01');
    expect(view.title).toContain('ended in the last 24 h');
  });

  it('says when nothing is live, in the singular where one is', () => {
    expect(glance([], []).text).toBe('no live pool');
    expect(glance([], []).spent).toBe('$0.00');
    const one = makePool({ status: 'ready', count: 1, workers_ready: 1, usd_per_hour: 0.2 });
    expect(glance([one], [makeJob({ status: 'running' })]).text).toBe('1 live pool · 1/1 worker · $0.20/h · 1 job running');
  });
});

describe('HistoryPager', () => {
  function pages(...answers: IPoolPage[]): { fetch: jest.Mock; pager: HistoryPager } {
    const fetch = jest.fn(async (_before: number | null) => {
      const answer = answers.shift();
      if (!answer) {
        throw new Error('no more pages');
      }
      return answer;
    });
    return { fetch, pager: new HistoryPager(fetch) };
  }

  const pool = (name: string): IPoolModel => ended(name, '2026-11-20T10:00:00Z');

  it('starts at the top of history and follows the next cursor', async () => {
    const { fetch, pager } = pages(
      { pools: [pool('a'), pool('b')], next: 7 },
      { pools: [pool('c')], next: null }
    );
    expect(await pager.loadMore(() => true)).toBe(2);
    expect(pager.done).toBe(false);
    expect(await pager.loadMore(() => true)).toBe(1);
    expect(fetch.mock.calls).toEqual([[null], [7]]);
    expect(pager.pools.map(p => p.name)).toEqual(['a', 'b', 'c']);
    expect(pager.done).toBe(true);
    expect(await pager.loadMore(() => true)).toBe(0); // nothing asked once done
    expect(fetch).toHaveBeenCalledTimes(2);
  });

  it('keeps fetching while pages hold only rows already shown', async () => {
    const { fetch, pager } = pages(
      { pools: [pool('recent-1'), pool('recent-2')], next: 20 },
      { pools: [pool('recent-3'), pool('old')], next: 10 },
      { pools: [pool('older')], next: null }
    );
    const shown = new Set(['recent-1', 'recent-2', 'recent-3']);
    expect(await pager.loadMore(p => !shown.has(p.name))).toBe(1);
    expect(fetch.mock.calls).toEqual([[null], [20]]);
  });

  it('stops when history ends, even with nothing new', async () => {
    const { pager } = pages({ pools: [pool('recent-1')], next: null });
    expect(await pager.loadMore(() => false)).toBe(0);
    expect(pager.done).toBe(true);
  });

  it('asks the failed page again on the next load', async () => {
    const fetch = jest
      .fn()
      .mockResolvedValueOnce({ pools: [pool('a')], next: 5 })
      .mockRejectedValueOnce(new Error('server down'))
      .mockResolvedValueOnce({ pools: [pool('b')], next: null });
    const pager = new HistoryPager(fetch);
    await pager.loadMore(() => true);
    await expect(pager.loadMore(() => true)).rejects.toThrow('server down');
    expect(pager.loading).toBe(false);
    await pager.loadMore(() => true);
    expect(fetch.mock.calls).toEqual([[null], [5], [5]]);
    expect(pager.pools.map(p => p.name)).toEqual(['a', 'b']);
  });

  it('joins a load already in flight instead of asking twice', async () => {
    const { fetch, pager } = pages({ pools: [pool('a')], next: 3 });
    const first = pager.loadMore(() => true);
    const second = pager.loadMore(() => true);
    expect(pager.loading).toBe(true);
    await expect(Promise.all([first, second])).resolves.toEqual([1, 1]);
    expect(fetch).toHaveBeenCalledTimes(1);
  });
});

describe('quotaLine', () => {
  const status = (overrides: Partial<IQuotaStatus['quota']>, budget = 0): IQuotaStatus => ({
    user: 'ada',
    limited: true,
    quota: { max_gpus: 0, max_workers: 0, backends: [], gpu_types: [], usd_per_day: 0, sources: {}, ...overrides },
    usage: { gpus: 2, workers: 3, user_usd_today: 12, user_usd_month: 40, team_usd_month: 1200 },
    team_budget_usd_per_month: budget,
    from: 'service'
  });

  it('names the limits that apply, each with what counts against it', () => {
    expect(quotaLine(status({ max_gpus: 8, max_workers: 16, usd_per_day: 200 }, 5000))).toBe(
      'quota 2/8 GPUs · 3/16 workers · $12.00 of $200.00 today · team $1200.00 of $5000.00 this month'
    );
    expect(quotaLine(status({ usd_per_month: 1000 }))).toBe('quota $40.00 of $1000.00 this month');
    expect(quotaLine(status({ backends: ['local', 'slurm'], gpu_types: ['cpu'] }))).toBe(
      'quota on local, slurm · GPU types cpu'
    );
  });

  it('has no line when nothing limits the user', () => {
    expect(quotaLine(null)).toBeNull();
    expect(quotaLine({ ...status({}), limited: false })).toBeNull();
  });
});
