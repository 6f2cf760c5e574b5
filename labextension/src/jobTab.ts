/**
 * A job as a JupyterLab main-area tab that docks beside the notebook: its
 * status, each rank's state, the grouped tail of its output (the panel's job
 * view, longer) and a chart per value its ranks log with `gg.log` (x: step,
 * a line per rank). Polled every 2 s while the tab is attached and the job
 * has not ended; once an answer says it ended, one last look and no more.
 * Restored with the layout by the job's id (index.ts).
 */

import { Widget } from '@lumino/widgets';

import { GpugeekApi } from './api';
import { h } from './dom';
import { formatValue, IMetricChart, metricCharts } from './jobMetricsModel';
import { isScrolledToBottom, rankChips } from './jobView';
import { renderLineChart } from './lineChart';
import { IJobOutput, isJobFinal, JobStatus } from './models';

export const JOB_TAB_POLL_MS = 2000;
/** Lines of the grouped tail the tab shows (the panel's row shows 40). */
export const JOB_TAB_LINES = 500;
/** Rows per chart line the tab asks for: the server thins a long run's course to that (its ends and spikes kept). */
export const JOB_TAB_POINTS = 400;

export function jobTabId(job: string): string {
  return `gpugeek-job-${job}`;
}

export class JobTab extends Widget {
  private _timer: number | undefined;
  private _status: JobStatus | null = null;
  private _follow = true;
  private readonly _heading: HTMLElement;
  private readonly _chips: HTMLElement;
  private readonly _error: HTMLElement;
  private readonly _tail: HTMLPreElement;
  private readonly _charts: HTMLElement;

  constructor(
    private readonly _api: GpugeekApi,
    readonly jobId: string
  ) {
    super();
    this.addClass('gpugeek-job-tab');
    this.id = `${jobTabId(jobId)}-content`;
    this._heading = h('div', { class: 'gpugeek-job-tab-heading', text: `Job ${jobId}` });
    this._chips = h('div', { class: 'gpugeek-rank-chips', attrs: { role: 'list', 'aria-label': 'Ranks' } });
    this._error = h('div', { class: 'gpugeek-job-error', attrs: { role: 'alert' } });
    this._tail = h('pre', {
      class: 'gpugeek-job-output-tail gpugeek-job-tab-tail',
      text: 'Loading output…',
      title: "The last lines of the ranks' output; lines alike across ranks shown once",
      attrs: { tabindex: '0' },
      on: { scroll: () => (this._follow = isScrolledToBottom(this._tail)) }
    }) as HTMLPreElement;
    this._charts = h('div', { class: 'gpugeek-job-tab-charts' });
    this.node.append(this._heading, this._chips, this._error, this._tail, this._charts);
  }

  /** Whether an answer said the job has ended (the tab no longer polls). */
  get ended(): boolean {
    return this._status !== null && isJobFinal(this._status);
  }

  protected onAfterAttach(): void {
    void this.poll();
    if (!this.ended) {
      this._timer = window.setInterval(() => void this.poll(), JOB_TAB_POLL_MS);
    }
  }

  protected onBeforeDetach(): void {
    window.clearInterval(this._timer);
    this._timer = undefined;
  }

  async poll(): Promise<void> {
    try {
      const [output, metrics] = await Promise.all([
        this._api.jobOutput(this.jobId, JOB_TAB_LINES),
        this._api.jobMetrics(this.jobId, JOB_TAB_POINTS)
      ]);
      this._error.textContent = '';
      this._showOutput(output);
      this._showCharts(metricCharts(metrics));
      this._showStatus(metrics.status as JobStatus);
    } catch (error) {
      this._error.textContent = `Could not read the job: ${(error as Error).message}`;
    }
  }

  private _showStatus(status: JobStatus): void {
    this._status = status;
    this._heading.textContent = `Job ${this.jobId}: ${status}`;
    this._heading.dataset.status = status;
    if (this.ended) {
      window.clearInterval(this._timer);
      this._timer = undefined;
    }
  }

  private _showOutput(output: IJobOutput): void {
    this._chips.replaceChildren(
      ...rankChips(output.ranks).map(chip =>
        h('span', {
          class: `gpugeek-rank-chip gpugeek-rank-${chip.state.replace(/[^a-z-]/g, '')}`,
          text: chip.label,
          attrs: { role: 'listitem' }
        })
      )
    );
    const text = output.tail || (isJobFinal(output.status) ? 'No output was kept.' : 'No output yet.');
    if (this._tail.textContent !== text) {
      this._tail.textContent = text;
      if (this._follow) {
        this._tail.scrollTop = this._tail.scrollHeight;
      }
    }
  }

  private _showCharts(charts: IMetricChart[]): void {
    this._charts.replaceChildren(...charts.map(chart => this._chart(chart)));
  }

  private _chart(chart: IMetricChart): HTMLElement {
    const [s0, s1] = chart.steps;
    const [low, high] = chart.values;
    return renderLineChart({
      key: chart.name,
      title: `${chart.name} (steps ${s0}–${s1}, ${formatValue(low)} to ${formatValue(high)})`,
      label: `${chart.name} by step, a line per rank`,
      x: [s0, s1],
      top: high - low,
      lines: chart.lines.map(line => ({
        // values from the chart's low: the chart draws [0, top]
        points: line.points.map(p => ({ t: p.t, v: p.v - low })),
        legend: `rank ${line.rank} ${formatValue(line.latest)}`
      }))
    });
  }
}
