/**
 * Pure formatting for the panel: money, durations, utilisation and the
 * sparkline geometry. No DOM here, so every rule is unit-tested.
 */

import { IGpuType, IPoolModel } from './models';

/** Dollars with cents; sub-cent amounts keep four decimals so a young pool's cost visibly grows. */
export function formatUsd(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) {
    return '–';
  }
  const sign = value < 0 ? '-' : '';
  const magnitude = Math.abs(value);
  // One rule for money, as the notebook's (ledger.usd_quantum): cents from $1 up; below it two
  // significant digits, so a young pool's $0.00019 and a $0.015 spot price do not read $0.00.
  const digits =
    magnitude === 0 || magnitude >= 1 ? 2 : Math.max(2, 1 - Math.floor(Math.log10(magnitude)));
  // No thousands separators: the text stays machine-readable.
  return `${sign}$${magnitude.toFixed(digits)}`;
}

export function formatUsdPerHour(value: number | null | undefined): string {
  return `${formatUsd(value)}/h`;
}

/** `0.3s`, `42s`, `3m 05s`, `2h 04m`; a dash for unknown. A job of under 10 s keeps a tenth (a
 * warm cell lasts milliseconds: `0s` would read as "did not run"), one under 0.05 s says so. */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds) || seconds < 0) {
    return '–';
  }
  if (seconds > 0 && seconds < 0.05) {
    return '<0.1s';
  }
  if (seconds < 9.95) {
    return `${seconds.toFixed(1).replace(/\.0$/, '')}s`;
  }
  const total = Math.round(seconds);
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const secs = total % 60;
  const pad = (n: number): string => String(n).padStart(2, '0');
  if (hours > 0) {
    return `${hours}h ${pad(minutes)}m`;
  }
  if (minutes > 0) {
    return `${minutes}m ${pad(secs)}s`;
  }
  return `${secs}s`;
}

/** A utilisation in percent (0..100), rounded; `n/a` when unknown. */
export function formatUtilisation(percent: number | null | undefined): string {
  if (percent === null || percent === undefined || !Number.isFinite(percent)) {
    return 'n/a';
  }
  return `${Math.round(clamp(percent, 0, 100))}%`;
}

export function clamp(value: number, low: number, high: number): number {
  return Math.min(high, Math.max(low, value));
}

/** `A100 × 4` */
export function formatGpuSummary(pool: Pick<IPoolModel, 'gpu_type' | 'count'>): string {
  return `${pool.gpu_type} × ${pool.count}`;
}

/** How the workers split between spot, reserved and on-demand capacity. */
export function formatCapacitySplit(
  pool: Pick<IPoolModel, 'count' | 'spot_workers' | 'reserved_workers'>
): string {
  const onDemand = Math.max(0, pool.count - pool.spot_workers - pool.reserved_workers);
  return `${pool.spot_workers} spot · ${pool.reserved_workers} reserved · ${onDemand} on-demand`;
}

export type BudgetLevel = 'ok' | 'warn' | 'over';

export interface IBudgetBar {
  /** Width of the filled part, 0..1. */
  fill: number;
  level: BudgetLevel;
  label: string;
}

/** The budget bar for a pool, or null when it has no budget. */
export function budgetBar(
  pool: Pick<IPoolModel, 'usd_so_far' | 'budget_usd' | 'budget_fraction'>
): IBudgetBar | null {
  if (pool.budget_usd === null || pool.budget_usd === undefined) {
    return null;
  }
  let fraction = pool.budget_fraction;
  if (fraction === null || fraction === undefined || !Number.isFinite(fraction)) {
    fraction = pool.budget_usd > 0 ? pool.usd_so_far / pool.budget_usd : 1;
  }
  const level: BudgetLevel = fraction >= 1 ? 'over' : fraction >= 0.8 ? 'warn' : 'ok';
  return {
    fill: clamp(fraction, 0, 1),
    level,
    label: `${formatUsd(pool.usd_so_far)} of ${formatUsd(pool.budget_usd)} budget (${Math.round(fraction * 100)}%)`
  };
}

/**
 * Polyline points for utilisation samples in percent, oldest on the left,
 * 100% at the top. A single sample is drawn as a flat line.
 */
export function sparklinePoints(
  history: readonly number[],
  width: number,
  height: number
): string {
  const values = history.filter(value => Number.isFinite(value));
  if (values.length === 0) {
    return '';
  }
  const series = values.length === 1 ? [values[0], values[0]] : values;
  const step = width / (series.length - 1);
  const round = (n: number): number => Math.round(n * 100) / 100;
  return series
    .map((value, index) => {
      const x = round(index * step);
      const y = round(height - (clamp(value, 0, 100) / 100) * height);
      return `${x},${y}`;
    })
    .join(' ');
}

/** Hourly cost of a pool at list prices, blending spot and on-demand by `spotFraction`. */
export function estimateUsdPerHour(gpu: IGpuType, count: number, spotFraction: number): number {
  const spotGpus = Math.round(count * clamp(spotFraction, 0, 1));
  return spotGpus * gpu.prices.spot + (count - spotGpus) * gpu.prices.on_demand;
}

/** A timestamp as local time, or the raw text when it does not parse. */
export function formatTimestamp(iso: string | null | undefined): string {
  if (!iso) {
    return '–';
  }
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

/** The first 12 hex digits, the way short hashes are usually shown. */
export function shortHash(hash: string | null | undefined): string {
  return hash ? hash.slice(0, 12) : '–';
}

/** Hyperparameters as sorted [key, text] pairs for display. */
export function hyperparamRows(hyperparams: Record<string, unknown> | null | undefined): [string, string][] {
  return Object.keys(hyperparams ?? {})
    .sort()
    .map(key => {
      const value = (hyperparams as Record<string, unknown>)[key];
      return [key, typeof value === 'string' ? value : JSON.stringify(value)];
    });
}

/**
 * How long ago `iso` was, coarsely (`just now`, `5 min ago`, `3 h ago`,
 * `2 d ago`): coarse so a row redraws at most once a minute. A dash for
 * unknown; a time in the future (clock skew) counts as just now.
 */
export function formatAgo(iso: string | null | undefined, now: number): string {
  if (!iso) {
    return '–';
  }
  const then = new Date(iso).getTime();
  if (Number.isNaN(then)) {
    return iso;
  }
  const minutes = Math.floor(Math.max(0, now - then) / 60_000);
  if (minutes < 1) {
    return 'just now';
  }
  if (minutes < 60) {
    return `${minutes} min ago`;
  }
  const hours = Math.floor(minutes / 60);
  if (hours < 48) {
    return `${hours} h ago`;
  }
  return `${Math.floor(hours / 24)} d ago`;
}

/** The first non-empty line of `text`, cut to `max` characters with an ellipsis. */
export function firstLine(text: string, max = 120): string {
  const line = text.split('\n').find(part => part.trim() !== '')?.trim() ?? '';
  const more = line.length > max || text.trim() !== line;
  const cut = line.length > max ? line.slice(0, max - 1).trimEnd() : line;
  return more ? `${cut}…` : cut;
}

/**
 * A pool's owner as a person knows it: the notebook it was launched from
 * ("notebook train.ipynb"), else the process ("server", "pid N", "kernel <id>").
 */
export function formatOwner(pool: { owner: string; owner_label?: string | null }): string {
  return pool.owner_label || pool.owner;
}
