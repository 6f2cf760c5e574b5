/**
 * The pools' views: a full card for a live pool, a compact row for an ended one.
 */

import { URLExt } from '@jupyterlab/coreutils';
import { CommandRegistry } from '@lumino/commands';

import { CommandIDs } from './commands';
import { h, svg } from './dom';
import {
  budgetBar,
  formatCapacitySplit,
  formatDuration,
  formatGpuSummary,
  formatOwner,
  formatTimestamp,
  formatUsd,
  formatUsdPerHour,
  formatUtilisation,
  sparklinePoints
} from './format';
import { canStopPool, IJobModel, IPoolMetrics, IPoolModel, isLive } from './models';
import { IEndedPoolRow } from './poolsView';

const SPARKLINE_WIDTH = 120;
const SPARKLINE_HEIGHT = 24;

export interface IPoolRowState {
  expanded: boolean;
  /** Latest metrics for an expanded row, once fetched. */
  metrics: IPoolMetrics | null;
  /** A Stop request is in flight. */
  stopping: boolean;
  /** Jobs pending or running on the pool. */
  jobs: readonly IJobModel[];
}

export interface IPoolRowOptions {
  commands: CommandRegistry;
  onToggleDetails: (name: string) => void;
  /** The Jupyter server's base URL, for links through its proxy. */
  baseUrl?: string;
}

/**
 * Where the Dashboard link points: the Jupyter server's own route to the pool's
 * dashboard (or its proxy), which needs the user's Jupyter login and works
 * behind JupyterHub; else the dashboard's own address.
 */
export function dashboardHref(pool: IPoolModel, baseUrl: string): string | null {
  if (pool.dashboard_path) {
    return URLExt.join(baseUrl, pool.dashboard_path);
  }
  return pool.dashboard_link;
}

/** Only a pool that is starting or ready has a dashboard to open: a stopping one's scheduler is going. */
export function showsDashboard(pool: IPoolModel): boolean {
  return Boolean(pool.dashboard_link) && isLive(pool.status) && pool.status !== 'stopping';
}

export function renderPoolRow(
  pool: IPoolModel,
  state: IPoolRowState,
  options: IPoolRowOptions
): HTMLElement {
  const { commands } = options;
  const budget = budgetBar(pool);
  const stopDisabled = state.stopping || !canStopPool(pool.status);
  const stopButton = h('button', {
    class: 'jp-mod-styled jp-mod-warn gpugeek-stop-button',
    text: state.stopping || pool.status === 'stopping' ? 'Stopping…' : 'Stop',
    title: `Stop pool ${pool.name}`,
    on: {
      click: () => void commands.execute(CommandIDs.stopPool, { name: pool.name })
    }
  });
  stopButton.disabled = stopDisabled;

  return h(
    'div',
    {
      class: `gpugeek-pool-row gpugeek-pool-${pool.status}`,
      data: { poolName: pool.name }
    },
    [
      h('div', { class: 'gpugeek-pool-header' }, [
        h('button', {
          class: 'gpugeek-pool-name',
          text: pool.name,
          title: state.expanded ? 'Hide details' : 'Show details',
          attrs: { 'aria-expanded': String(state.expanded) },
          on: { click: () => options.onToggleDetails(pool.name) }
        }),
        h('span', {
          class: `gpugeek-status gpugeek-status-${pool.status}`,
          text: pool.status
        })
      ]),
      h('div', { class: 'gpugeek-pool-line' }, [
        h('span', { class: 'gpugeek-pool-gpus', text: formatGpuSummary(pool) }),
        h('span', { class: 'gpugeek-pool-backend', text: pool.backend }),
        h('span', {
          class: 'gpugeek-pool-workers',
          text: `${pool.workers_ready}/${pool.count} ready`
        })
      ]),
      state.jobs.length > 0 &&
        h('div', { class: 'gpugeek-pool-jobs' }, state.jobs.map(renderPoolJob)),
      h('div', {
        class: 'gpugeek-pool-line gpugeek-pool-capacity',
        text: formatCapacitySplit(pool)
      }),
      h('div', { class: 'gpugeek-pool-line gpugeek-pool-cost' }, [
        h('span', { class: 'gpugeek-usd-per-hour', text: formatUsdPerHour(pool.usd_per_hour) }),
        h('span', {}, [
          h('span', {
            class: 'gpugeek-usd-so-far',
            text: formatUsd(pool.usd_so_far),
            data: { usd: String(pool.usd_so_far) }
          }),
          ' so far'
        ])
      ]),
      budget &&
        h('div', { class: `gpugeek-budget gpugeek-budget-${budget.level}`, title: budget.label }, [
          h('div', { class: 'gpugeek-budget-track' }, [
            h('div', {
              class: 'gpugeek-budget-fill',
              attrs: { style: `width: ${(budget.fill * 100).toFixed(1)}%` }
            })
          ]),
          h('div', { class: 'gpugeek-budget-label', text: budget.label })
        ]),
      renderUtilisation(pool),
      pool.reason && h('div', { class: 'gpugeek-pool-reason', text: pool.reason }),
      h('div', { class: 'gpugeek-pool-actions' }, [
        showsDashboard(pool) &&
          h('a', {
            class: 'gpugeek-dashboard-link',
            text: 'Dashboard',
            title: 'Open the dask dashboard',
            attrs: {
              href: dashboardHref(pool, options.baseUrl ?? '/') ?? '',
              target: '_blank',
              rel: 'noopener noreferrer'
            }
          }),
        h('button', {
          class: 'jp-mod-styled gpugeek-monitor-button',
          text: 'Monitor',
          title: `Open the monitor of pool ${pool.name} in a tab`,
          on: {
            click: () => void commands.execute(CommandIDs.openMonitor, { name: pool.name })
          }
        }),
        h('button', {
          class: 'jp-mod-styled gpugeek-use-button',
          text: 'Use in notebook',
          title: `Insert %gpugeek_use ${pool.name} into the current notebook`,
          on: {
            click: () => void commands.execute(CommandIDs.usePool, { name: pool.name })
          }
        }),
        stopButton
      ]),
      state.expanded && renderDetails(pool, state.metrics)
    ]
  );
}

/** A pool card's line for one of its jobs. */
function renderPoolJob(job: IJobModel): HTMLElement {
  return h('div', { class: 'gpugeek-pool-job', data: { jobId: job.id }, title: `Job ${job.id}` }, [
    // Not a .gpugeek-status pill: a card has one status, the pool's.
    h('span', { class: `gpugeek-pool-job-status gpugeek-pool-job-${job.status}`, text: job.status }),
    h('span', { class: 'gpugeek-pool-job-id', text: job.id }),
    h('span', {
      class: 'gpugeek-pool-job-stats',
      text: `${job.ranks} rank${job.ranks === 1 ? '' : 's'} · ${formatDuration(job.duration_s)} · ${formatUsd(job.usd)}`
    })
  ]);
}

export interface IEndedRowState {
  expanded: boolean;
}

/**
 * An ended pool in one line (name, status, when it ended, cost) and, for a
 * failed or lost one, its reason in one more; a click shows the rest. No
 * actions: nothing runs any more.
 */
export function renderEndedRow(
  row: IEndedPoolRow,
  state: IEndedRowState,
  onToggle: (key: string) => void
): HTMLElement {
  const { pool } = row;
  const toggle = (): void => onToggle(row.key);
  return h(
    'div',
    {
      class: `gpugeek-ended-row gpugeek-pool-${pool.status}${state.expanded ? ' gpugeek-mod-expanded' : ''}`,
      data: { poolName: pool.name, poolKey: row.key }
    },
    [
      h(
        'div',
        {
          class: 'gpugeek-ended-summary',
          title: state.expanded ? 'Hide details' : 'Show details',
          attrs: { role: 'button', tabindex: '0', 'aria-expanded': String(state.expanded) },
          on: {
            click: toggle,
            keydown: event => {
              if (event.key === 'Enter' || event.key === ' ') {
                event.preventDefault();
                toggle();
              }
            }
          }
        },
        [
          h('span', { class: 'gpugeek-ended-name', text: pool.name, title: pool.name }),
          h('span', { class: `gpugeek-status gpugeek-status-${pool.status}`, text: pool.status }),
          h('span', { class: 'gpugeek-ended-when', text: row.ended, title: row.endedTitle }),
          h('span', {
            class: 'gpugeek-ended-cost',
            text: formatUsd(pool.usd_so_far),
            data: { usd: String(pool.usd_so_far) }
          })
        ]
      ),
      row.reason &&
        !state.expanded &&
        h('div', { class: 'gpugeek-ended-reason', text: row.reason, title: pool.reason ?? '' }),
      state.expanded &&
        h('div', { class: 'gpugeek-pool-details' }, [
          renderKeyValues([
            ['GPUs', formatGpuSummary(pool)],
            ['Backend', pool.backend],
            ['Owner', formatOwner(pool)],
            ['Created', formatTimestamp(pool.created_at)],
            ['Ended', formatTimestamp(pool.ended_at)],
            ['Cost', formatUsd(pool.usd_so_far)],
            ...(pool.reason ? [['Reason', pool.reason] as [string, string]] : [])
          ])
        ])
    ]
  );
}

function renderUtilisation(pool: IPoolModel): HTMLElement {
  const points = sparklinePoints(pool.sm_util_history ?? [], SPARKLINE_WIDTH, SPARKLINE_HEIGHT);
  const samples = pool.sm_util_history?.length ?? 0;
  return h('div', { class: 'gpugeek-pool-util' }, [
    svg(
      'svg',
      {
        class: 'gpugeek-sparkline',
        width: String(SPARKLINE_WIDTH),
        height: String(SPARKLINE_HEIGHT),
        viewBox: `0 0 ${SPARKLINE_WIDTH} ${SPARKLINE_HEIGHT}`,
        preserveAspectRatio: 'none',
        role: 'img',
        'aria-label': `${pool.util_kind === 'cpu' ? 'CPU' : 'SM'} utilisation, last ${samples} samples`
      },
      points ? [svg('polyline', { points, fill: 'none' })] : []
    ),
    h('span', {
      class: 'gpugeek-sm-util',
      text: `${pool.util_kind === 'cpu' ? 'CPU' : 'SM'} ${formatUtilisation(pool.mean_sm_util)}`,
      title:
        pool.util_kind === 'cpu'
          ? 'Mean CPU utilisation of the pool\'s workers'
          : 'Mean streaming-multiprocessor utilisation across the pool'
    })
  ]);
}

function renderDetails(pool: IPoolModel, metrics: IPoolMetrics | null): HTMLElement {
  const rows: [string, string][] = [
    ['Scheduler', pool.scheduler_address],
    ['Owner', formatOwner(pool)],
    ['Namespace', pool.namespace ?? '–'],
    ['Created', formatTimestamp(pool.created_at)]
  ];
  const latest = metrics?.samples[metrics.samples.length - 1];
  return h('div', { class: 'gpugeek-pool-details' }, [
    renderKeyValues(rows),
    metrics === null
      ? h('div', { class: 'gpugeek-muted', text: 'Loading metrics…' })
      : latest
        ? h('div', { class: 'gpugeek-pool-metrics' }, [
            h('div', {
              class: 'gpugeek-muted',
              text: `Latest of ${metrics.samples.length} samples`
            }),
            renderKeyValues(
              Object.entries(latest).map(([key, value]) => [
                key,
                typeof value === 'string' ? value : JSON.stringify(value)
              ])
            )
          ])
        : h('div', {
            class: 'gpugeek-muted',
            text: metrics.reason ?? 'No metric samples yet.'
          })
  ]);
}

export function renderKeyValues(rows: [string, string][]): HTMLElement {
  const list = h('dl', { class: 'gpugeek-key-values' });
  for (const [key, value] of rows) {
    list.appendChild(h('dt', { text: key }));
    list.appendChild(h('dd', { text: value }));
  }
  return list;
}
