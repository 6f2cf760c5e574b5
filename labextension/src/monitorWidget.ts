/**
 * A pool's monitor as a JupyterLab main-area tab that docks beside the
 * notebook: every GPU's (or CPU worker's) SM, memory, power, CPU and RSS over
 * the last 5 minutes, drawn as plain SVG from the server's
 * `GET /gpugeek/pools/<name>/metrics`, polled every 2 s while the tab is
 * attached. Restored with the layout (ILayoutRestorer + WidgetTracker in
 * index.ts) by the pool's name.
 */

import { Widget } from '@lumino/widgets';

import { GpugeekApi } from './api';
import { h, svg } from './dom';
import { IMonitorMetric, MONITOR_WINDOW_S, MonitorSeries, polylinePoints } from './monitorModel';

export const MONITOR_POLL_MS = 2000;
const WIDTH = 480;
const HEIGHT = 90;
const COLOURS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f'];

export function monitorId(pool: string): string {
  return `gpugeek-monitor-${pool}`;
}

export class PoolMonitor extends Widget {
  readonly series = new MonitorSeries(MONITOR_WINDOW_S);
  private _timer: number | undefined;
  private readonly _status: HTMLElement;
  private readonly _charts: HTMLElement;

  constructor(
    private readonly _api: GpugeekApi,
    readonly poolName: string
  ) {
    super();
    this.addClass('gpugeek-monitor');
    this.id = `${monitorId(poolName)}-content`;
    this._status = h('div', { class: 'gpugeek-monitor-status gpugeek-muted', text: 'Loading metrics…' });
    this._charts = h('div', { class: 'gpugeek-monitor-charts' });
    this.node.append(
      h('div', { class: 'gpugeek-monitor-heading', text: `Pool ${poolName}, last ${MONITOR_WINDOW_S / 60} minutes` }),
      this._status,
      this._charts
    );
  }

  protected onAfterAttach(): void {
    void this.poll();
    this._timer = window.setInterval(() => void this.poll(), MONITOR_POLL_MS);
  }

  protected onBeforeDetach(): void {
    window.clearInterval(this._timer);
    this._timer = undefined;
  }

  async poll(): Promise<void> {
    try {
      const metrics = await this._api.poolMetrics(this.poolName);
      this.series.add(metrics.samples);
      this._status.textContent = metrics.reason ?? (metrics.samples.length ? '' : 'No metric samples yet.');
    } catch (error) {
      this._status.textContent = `Could not read the pool's metrics: ${(error as Error).message}`;
    }
    this._draw();
  }

  private _draw(): void {
    const charts = this.series.shown().map(metric => this._chart(metric));
    this._charts.replaceChildren(...charts);
  }

  private _chart(metric: IMonitorMetric): HTMLElement {
    const lines = this.series.series(metric.field);
    const times = lines.flatMap(([, points]) => points.map(p => p.t));
    const t1 = Math.max(...times);
    const t0 = Math.max(Math.min(...times), t1 - MONITOR_WINDOW_S);
    const top = metric.max ?? Math.max(1e-9, ...lines.flatMap(([, points]) => points.map(p => p.v))) * 1.1;
    const plot = svg('svg', {
      class: 'gpugeek-monitor-plot',
      viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
      preserveAspectRatio: 'none',
      role: 'img',
      'aria-label': `${metric.title} of pool ${this.poolName}`
    });
    lines.forEach(([, points], index) => {
      plot.appendChild(
        svg('polyline', {
          points: polylinePoints(points, t0, t1, top, WIDTH, HEIGHT),
          fill: 'none',
          stroke: COLOURS[index % COLOURS.length],
          'stroke-width': '1.5',
          'vector-effect': 'non-scaling-stroke'
        })
      );
    });
    const latest = lines
      .map(([device, points], index) =>
        h('span', { class: 'gpugeek-monitor-legend-item' }, [
          h('span', { class: 'gpugeek-monitor-swatch', attrs: { style: `background:${COLOURS[index % COLOURS.length]}` } }),
          `${device} ${points[points.length - 1].v.toFixed(metric.unit === '%' ? 0 : 2)} ${metric.unit}`
        ])
      );
    return h('div', { class: 'gpugeek-monitor-chart', data: { metric: metric.field } }, [
      h('div', { class: 'gpugeek-monitor-chart-title', text: `${metric.title} (0–${top.toFixed(metric.unit === '%' ? 0 : 2)} ${metric.unit})` }),
      plot as unknown as HTMLElement,
      h('div', { class: 'gpugeek-monitor-legend' }, latest)
    ]);
  }
}
