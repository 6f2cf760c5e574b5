/**
 * The pool monitor's data: what `GET /gpugeek/pools/<name>/metrics` answered
 * on each poll (the newest sample of every GPU or CPU worker), kept per
 * device over a sliding window (5 minutes by default) and turned into the
 * polylines the monitor draws. Pure: tested in Node.
 */

export const MONITOR_WINDOW_S = 300;

/** One chart of the monitor: a sample field and how to show it. */
export interface IMonitorMetric {
  field: string;
  title: string;
  /** Multiplies the field's value into the unit shown (bytes -> GiB). */
  scale: number;
  unit: string;
  /** A fixed top of the axis (percentages), else the window's largest value. */
  max: number | null;
}

export const MONITOR_METRICS: readonly IMonitorMetric[] = [
  { field: 'sm_util_pct', title: 'GPU SM', scale: 1, unit: '%', max: 100 },
  { field: 'mem_used_bytes', title: 'GPU memory', scale: 1 / 2 ** 30, unit: 'GiB', max: null },
  { field: 'power_w', title: 'GPU power', scale: 1, unit: 'W', max: null },
  { field: 'cpu_pct', title: 'CPU', scale: 1, unit: '%', max: null },
  { field: 'rss_bytes', title: 'Memory (RSS)', scale: 1 / 2 ** 30, unit: 'GiB', max: null }
];

export interface IPoint {
  /** Seconds since the epoch, the worker's clock. */
  t: number;
  v: number;
}

/** `rank 0`, or `rank 0 gpu 1` for a worker with several GPUs. */
export function deviceKey(sample: Record<string, unknown>): string {
  const worker = String(sample.worker_name ?? sample.worker ?? '?');
  const gpu = typeof sample.gpu === 'number' && sample.gpu >= 0 ? ` gpu ${sample.gpu}` : '';
  return `rank ${worker}${gpu}`;
}

export class MonitorSeries {
  /** field -> device -> points, oldest first. */
  private readonly _points = new Map<string, Map<string, IPoint[]>>();

  constructor(readonly windowS: number = MONITOR_WINDOW_S) {}

  /** Add one poll's samples; a sample seen before (same device and time) is not added twice. */
  add(samples: readonly Record<string, unknown>[]): void {
    let newest = -Infinity;
    for (const sample of samples) {
      const t = Number(sample.time);
      if (!Number.isFinite(t)) {
        continue;
      }
      newest = Math.max(newest, t);
      const device = deviceKey(sample);
      for (const metric of MONITOR_METRICS) {
        const raw = sample[metric.field];
        if (typeof raw !== 'number' || !Number.isFinite(raw)) {
          continue;
        }
        const byDevice = this._points.get(metric.field) ?? new Map<string, IPoint[]>();
        this._points.set(metric.field, byDevice);
        const points = byDevice.get(device) ?? [];
        byDevice.set(device, points);
        if (points.length === 0 || points[points.length - 1].t < t) {
          points.push({ t, v: raw * metric.scale });
        }
      }
    }
    if (Number.isFinite(newest)) {
      this._trim(newest - this.windowS);
    }
  }

  /** The devices' points of `field` within the window, devices in their order (rank 0 first). */
  series(field: string): [string, IPoint[]][] {
    const byDevice = this._points.get(field);
    if (!byDevice) {
      return [];
    }
    return [...byDevice]
      .filter(([, points]) => points.length > 0)
      .sort(([a], [b]) => a.localeCompare(b, undefined, { numeric: true }));
  }

  /** The metrics that have any point (a CPU pool has no GPU charts). */
  shown(): IMonitorMetric[] {
    return MONITOR_METRICS.filter(metric => this.series(metric.field).length > 0);
  }

  private _trim(oldest: number): void {
    for (const byDevice of this._points.values()) {
      for (const [device, points] of byDevice) {
        const kept = points.filter(p => p.t >= oldest);
        byDevice.set(device, kept);
      }
    }
  }
}

/**
 * The `points` attribute of an SVG polyline `width` x `height` for `points`
 * over the time span [`t0`, `t1`] and values [0, `top`] (y grows down).
 */
export function polylinePoints(
  points: readonly IPoint[],
  t0: number,
  t1: number,
  top: number,
  width: number,
  height: number
): string {
  const span = t1 - t0 > 0 ? t1 - t0 : 1;
  const high = top > 0 ? top : 1;
  return points
    .map(p => {
      const x = ((p.t - t0) / span) * width;
      const y = height - (Math.min(p.v, high) / high) * height;
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(' ');
}
