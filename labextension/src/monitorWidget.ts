/**
 * A pool's monitor as a JupyterLab main-area tab that docks beside the
 * notebook: every GPU's (or CPU worker's) SM, memory, power, PCIe and NVLink
 * traffic, CPU and RSS over a window the user picks (5 minutes by default),
 * drawn as plain SVG from the server's `GET /gpugeek/pools/<name>/metrics`:
 * the first poll asks for the window (what the workers keep, their last 10
 * minutes), each next one for what is newer, every 2 s while the tab is
 * attached. Once the pool has ended the tab says so and stops polling.
 * Restored with the layout (ILayoutRestorer + WidgetTracker in index.ts) by
 * the pool's name, with its window.
 */

import { caretDownEmptyIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { GpugeekApi } from './api';
import { h } from './dom';
import { renderLineChart } from './lineChart';
import { isLive } from './models';
import {
  IMonitorMetric,
  MONITOR_WINDOW_S,
  MONITOR_WINDOWS_S,
  MonitorSeries,
  windowLabel
} from './monitorModel';

export const MONITOR_POLL_MS = 2000;

export function monitorId(pool: string): string {
  return `gpugeek-monitor-${pool}`;
}

export interface IPoolMonitorOptions {
  /** The window shown at first, in seconds (5 minutes). */
  windowS?: number;
  /** Told when the user picks another window (the layout keeps it). */
  onWindowChanged?: (monitor: PoolMonitor) => void;
}

export class PoolMonitor extends Widget {
  readonly series: MonitorSeries;
  private _timer: number | undefined;
  /** The pool's final status once an answer said it ended; polling stops then. */
  private _ended: string | null = null;
  private readonly _status: HTMLElement;
  private readonly _charts: HTMLElement;
  private readonly _window: HTMLSelectElement;

  constructor(
    private readonly _api: GpugeekApi,
    readonly poolName: string,
    private readonly _options: IPoolMonitorOptions = {}
  ) {
    super();
    this.addClass('gpugeek-monitor');
    this.id = `${monitorId(poolName)}-content`;
    this.series = new MonitorSeries(_options.windowS ?? MONITOR_WINDOW_S);
    this._status = h('div', { class: 'gpugeek-monitor-status gpugeek-muted', text: 'Loading metrics…' });
    this._charts = h('div', { class: 'gpugeek-monitor-charts' });
    this._window = h('select', {
      class: 'gpugeek-monitor-window',
      title: 'How far back the charts reach (past 10 minutes they fill while this tab is open)',
      attrs: { 'aria-label': 'Window' },
      on: { change: () => this.setWindow(Number(this._window.value)) }
    }) as HTMLSelectElement;
    const windows = new Set([...MONITOR_WINDOWS_S, this.series.windowS]);
    for (const seconds of [...windows].sort((a, b) => a - b)) {
      this._window.appendChild(h('option', { text: windowLabel(seconds), attrs: { value: String(seconds) } }));
    }
    this._window.value = String(this.series.windowS);
    this.node.append(
      h('div', { class: 'gpugeek-monitor-heading' }, [
        h('span', { class: 'gpugeek-monitor-title', text: `Pool ${poolName}, last` }),
        h('div', { class: 'jp-HTMLSelect jp-DefaultStyle gpugeek-select gpugeek-monitor-window-select' }, [
          this._window,
          caretDownEmptyIcon.element({ tag: 'span', stylesheet: 'select', right: '4px', top: '4px' })
        ])
      ]),
      this._status,
      this._charts
    );
  }

  /** The window shown, in seconds. */
  get windowS(): number {
    return this.series.windowS;
  }

  /** Whether the pool has ended (the tab no longer polls). */
  get ended(): boolean {
    return this._ended !== null;
  }

  /** Show the last `seconds`: a wider window asks the workers for their older samples again. */
  setWindow(seconds: number): void {
    if (!Number.isFinite(seconds) || seconds <= 0 || seconds === this.series.windowS) {
      return;
    }
    this.series.windowS = seconds;
    this._window.value = String(seconds);
    this._options.onWindowChanged?.(this);
    if (this._ended === null) {
      void this.poll(true);
    } else {
      this._draw();
    }
  }

  protected onAfterAttach(): void {
    if (this._ended !== null) {
      return;
    }
    void this.poll(true);
    this._timer = window.setInterval(() => void this.poll(), MONITOR_POLL_MS);
  }

  protected onBeforeDetach(): void {
    this._stopPolling();
  }

  /** Ask for what is newer than the last sample (`whole`: the whole window, as at first). */
  async poll(whole = false): Promise<void> {
    const newest = this.series.newest;
    const since = whole || newest === null ? Date.now() / 1000 - this.series.windowS : newest;
    try {
      const metrics = await this._api.poolMetrics(this.poolName, since);
      this.series.add(metrics.samples);
      if (metrics.status && !isLive(metrics.status)) {
        this._ended = metrics.status;
        this._stopPolling();
        this.addClass('gpugeek-mod-ended');
        this._status.textContent =
          `Pool ${this.poolName} is ${metrics.status}` +
          (this.series.newest === null ? '.' : ': the charts end at its last sample.');
      } else {
        this._status.textContent = metrics.reason ?? (metrics.samples.length || newest !== null ? '' : 'No metric samples yet.');
      }
    } catch (error) {
      this._status.textContent = `Could not read the pool's metrics: ${(error as Error).message}`;
    }
    this._draw();
  }

  private _stopPolling(): void {
    window.clearInterval(this._timer);
    this._timer = undefined;
  }

  private _draw(): void {
    const charts = this.series.shown().map(metric => this._chart(metric));
    this._charts.replaceChildren(...charts);
  }

  private _chart(metric: IMonitorMetric): HTMLElement {
    const lines = this.series.series(metric.field);
    const times = lines.flatMap(([, points]) => points.map(p => p.t));
    const t1 = Math.max(...times);
    const t0 = Math.max(Math.min(...times), t1 - this.series.windowS);
    const top = metric.max ?? Math.max(1e-9, ...lines.flatMap(([, points]) => points.map(p => p.v))) * 1.1;
    const digits = metric.unit === '%' ? 0 : 2;
    return renderLineChart({
      key: metric.field,
      title: `${metric.title} (0–${top.toFixed(digits)} ${metric.unit})`,
      label: `${metric.title} of pool ${this.poolName}`,
      x: [t0, t1],
      top,
      lines: lines.map(([device, points]) => ({
        points,
        legend: `${device} ${points[points.length - 1].v.toFixed(digits)} ${metric.unit}`
      }))
    });
  }
}
