/**
 * The pool monitor's data: what `GET /gpugeek/pools/<name>/metrics?since=T`
 * answered on each poll (every sample of every GPU or CPU worker newer than
 * the last one seen; the workers keep their last 10 minutes), kept per device
 * over a sliding window (5 minutes by default, chosen in the tab) and turned
 * into the polylines the monitor draws. Pure: tested in Node.
 */

export const MONITOR_WINDOW_S = 300;
/** The windows the monitor offers, in seconds; past 10 minutes it fills while the tab is open. */
export const MONITOR_WINDOWS_S: readonly number[] = [60, 300, 600, 1800, 3600];

/** `1 minute`, `5 minutes`, `1 hour`. */
export function windowLabel(seconds: number): string {
  if (seconds >= 3600 && seconds % 3600 === 0) {
    const hours = seconds / 3600;
    return `${hours} ${hours === 1 ? 'hour' : 'hours'}`;
  }
  const minutes = Math.round(seconds / 60);
  return `${minutes} ${minutes === 1 ? 'minute' : 'minutes'}`;
}

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
  { field: 'rss_bytes', title: 'Memory (RSS)', scale: 1 / 2 ** 30, unit: 'GiB', max: null },
  { field: 'pcie_rx_mb_s', title: 'PCIe receive', scale: 1, unit: 'MB/s', max: null },
  { field: 'pcie_tx_mb_s', title: 'PCIe transmit', scale: 1, unit: 'MB/s', max: null },
  { field: 'nvlink_rx_mb_s', title: 'NVLink receive', scale: 1, unit: 'MB/s', max: null },
  { field: 'nvlink_tx_mb_s', title: 'NVLink transmit', scale: 1, unit: 'MB/s', max: null }
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

  /** The newest sample time seen (seconds since the epoch); null before the first. */
  newest: number | null = null;

  constructor(public windowS: number = MONITOR_WINDOW_S) {}

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
        insertPoint(points, { t, v: raw * metric.scale });
      }
    }
    if (Number.isFinite(newest)) {
      this.newest = Math.max(this.newest ?? -Infinity, newest);
      this._trim(this.newest - this.windowS);
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

/** Put `point` in time order (a window widened later brings older samples); one per time. */
function insertPoint(points: IPoint[], point: IPoint): void {
  let index = points.length;
  while (index > 0 && points[index - 1].t > point.t) {
    index -= 1;
  }
  if (index > 0 && points[index - 1].t === point.t) {
    return;
  }
  points.splice(index, 0, point);
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
