/**
 * Panel state that is worth testing without a DOM: which rows changed
 * between two polls, and when the single outage notice appears and clears.
 */

import { GpugeekApiError } from './api';

export interface IKeyedDiff<T> {
  /** Items whose key was not in the previous list. */
  added: T[];
  /** Items whose key was there before, with different content. */
  changed: T[];
  /** Keys that are gone. */
  removed: string[];
  /** Keys of the new list, in its order. */
  order: string[];
}

/** Compare two lists of keyed items so only the rows that changed are redrawn. */
export function diffByKey<T>(
  previous: readonly T[],
  next: readonly T[],
  keyOf: (item: T) => string,
  equal: (a: T, b: T) => boolean = deepEqual
): IKeyedDiff<T> {
  const before = new Map(previous.map(item => [keyOf(item), item] as const));
  const order = next.map(keyOf);
  const seen = new Set(order);
  const added: T[] = [];
  const changed: T[] = [];
  for (const item of next) {
    const old = before.get(keyOf(item));
    if (old === undefined) {
      added.push(item);
    } else if (!equal(old, item)) {
      changed.push(item);
    }
  }
  const removed = [...before.keys()].filter(key => !seen.has(key));
  return { added, changed, removed, order };
}

/** Structural equality for JSON values. */
export function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) {
    return true;
  }
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) {
    return Number.isNaN(a) && Number.isNaN(b);
  }
  if (Array.isArray(a) !== Array.isArray(b)) {
    return false;
  }
  const aKeys = Object.keys(a);
  const bKeys = Object.keys(b);
  if (aKeys.length !== bKeys.length) {
    return false;
  }
  return aKeys.every(
    key =>
      Object.prototype.hasOwnProperty.call(b, key) &&
      deepEqual((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key])
  );
}

export const OUTAGE_HINT =
  'is the gpugeek_jupyter server extension installed and enabled? (jupyter server extension list)';

export interface IOutage {
  /** What failed, in one line. */
  message: string;
  hint: string;
}

/** One line saying what went wrong with the last poll. */
export function describeOutage(error: unknown): string {
  if (error instanceof GpugeekApiError) {
    if (error.status === 0) {
      return 'The Jupyter server is not answering.';
    }
    if (error.routeMissing) {
      return 'The Jupyter server has no /gpugeek routes.';
    }
    return `The GPU pools API failed: ${error.message}`;
  }
  return `The GPU pools API failed: ${error instanceof Error ? error.message : String(error)}`;
}

/**
 * Tracks server health across polls so the panel shows one outage notice
 * however many polls fail, and removes it when the server answers again.
 */
export class OutageMonitor {
  private _current: IOutage | null = null;
  private _failures = 0;

  /** The outage being shown, or null while the server answers. */
  get current(): IOutage | null {
    return this._current;
  }

  /** Consecutive failed polls. */
  get failures(): number {
    return this._failures;
  }

  /** Record a failed poll; true when the notice must be drawn or redrawn. */
  fail(error: unknown): boolean {
    this._failures += 1;
    const message = describeOutage(error);
    if (this._current?.message === message) {
      return false;
    }
    this._current = { message, hint: OUTAGE_HINT };
    return true;
  }

  /** Record an answered poll; true when a notice must be removed. */
  succeed(): boolean {
    this._failures = 0;
    const hadOutage = this._current !== null;
    this._current = null;
    return hadOutage;
  }
}
