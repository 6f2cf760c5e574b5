/**
 * One row of the jobs list; a selected row also shows the job's record.
 */

import { h } from './dom';
import {
  formatDuration,
  formatTimestamp,
  formatUsd,
  hyperparamRows,
  shortHash
} from './format';
import { IJobModel, IWhereReport } from './models';
import { renderKeyValues } from './poolView';

export interface IJobRowState {
  selected: boolean;
  /** The record from `GET /gpugeek/jobs/{id}`, once fetched. */
  record: IJobModel | null;
  /** Why the record could not be fetched. */
  error: string | null;
}

/** What the Where button of one job has shown (kept across the poll's redraws). */
export interface IJobWhereState {
  /** A request is in flight. */
  asking: boolean;
  /** The grouped report of the last answer (`text` of `GET /gpugeek/jobs/{id}/where`). */
  text: string | null;
  /** Why the last request failed (e.g. the job ended: 409). */
  error: string | null;
}

/** What a job row shows for Where: a pure function of the job and its state. */
export interface IWhereView {
  /** Only a running job has a Where button. */
  button: boolean;
  label: string;
  disabled: boolean;
  text: string | null;
  error: string | null;
}

export function whereView(job: IJobModel, state: IJobWhereState | null): IWhereView {
  const running = job.status === 'running';
  const asking = state?.asking ?? false;
  return {
    button: running,
    label: asking ? 'Asking…' : 'Where',
    disabled: asking,
    // a report of a job that has since ended would read as the present: shown only while it runs
    text: running ? (state?.text ?? null) : null,
    error: running ? (state?.error ?? null) : null
  };
}

/**
 * Asks the server where a job's ranks are and keeps the last answer per job,
 * so that the rows, redrawn on every poll, keep showing it.
 */
export class JobWhereTracker {
  private readonly _states = new Map<string, IJobWhereState>();

  constructor(
    private readonly _ask: (id: string) => Promise<IWhereReport>,
    /** Called when a job's state changed: redraw its row. */
    private readonly _changed: (id: string) => void
  ) {}

  state(id: string): IJobWhereState | null {
    return this._states.get(id) ?? null;
  }

  /** Ask once for job `id`; a second click while asking is ignored. */
  async ask(id: string): Promise<void> {
    const previous = this._states.get(id);
    if (previous?.asking) {
      return;
    }
    this._states.set(id, { asking: true, text: previous?.text ?? null, error: null });
    this._changed(id);
    let next: IJobWhereState;
    try {
      const report = await this._ask(id);
      next = { asking: false, text: report.text, error: null };
    } catch (error) {
      const reason = (error as Error).message;
      next = { asking: false, text: null, error: `Could not ask where the ranks are: ${reason}` };
    }
    this._states.set(id, next);
    this._changed(id);
  }

  /** Forget the jobs no longer listed. */
  keepOnly(ids: Iterable<string>): void {
    const listed = new Set(ids);
    for (const id of [...this._states.keys()]) {
      if (!listed.has(id)) {
        this._states.delete(id);
      }
    }
  }
}

export function renderJobRow(
  job: IJobModel,
  state: IJobRowState,
  onToggle: (id: string) => void,
  where?: { tracker: JobWhereTracker }
): HTMLElement {
  const summary = h(
    'div',
    {
      class: 'gpugeek-job-summary',
      title: state.selected ? 'Hide the job record' : 'Show the job record',
      attrs: { role: 'button', tabindex: '0', 'aria-expanded': String(state.selected) },
      on: {
        click: () => onToggle(job.id),
        keydown: event => {
          if (event.key === 'Enter' || event.key === ' ') {
            event.preventDefault();
            onToggle(job.id);
          }
        }
      }
    },
    [
      h('span', { class: 'gpugeek-job-id', text: job.id, title: job.id }),
      h('span', { class: 'gpugeek-job-pool', text: job.pool }),
      h('span', { class: `gpugeek-status gpugeek-status-${job.status}`, text: job.status }),
      h('span', { class: 'gpugeek-job-ranks', text: `${job.ranks} ranks` }),
      h('span', { class: 'gpugeek-job-duration', text: formatDuration(job.duration_s) }),
      h('span', { class: 'gpugeek-job-usd', text: formatUsd(job.usd) })
    ]
  );
  return h(
    'div',
    {
      class: `gpugeek-job-row${state.selected ? ' gpugeek-mod-selected' : ''}`,
      data: { jobId: job.id }
    },
    [
      summary,
      where && renderWhere(job, where.tracker),
      state.selected && renderJobRecord(state.record ?? job, state)
    ]
  );
}

function renderWhere(job: IJobModel, tracker: JobWhereTracker): HTMLElement | null {
  const view = whereView(job, tracker.state(job.id));
  if (!view.button) {
    return null;
  }
  const button = h('button', {
    class: 'jp-mod-styled gpugeek-job-where-button',
    text: view.label,
    title: "Show each rank's stack now and the collective it waits in (as %gpugeek_where does)",
    on: { click: () => void tracker.ask(job.id) }
  });
  button.disabled = view.disabled;
  return h('div', { class: 'gpugeek-job-where' }, [
    button,
    view.error && h('div', { class: 'gpugeek-job-error', attrs: { role: 'alert' }, text: view.error }),
    view.text !== null && h('pre', { class: 'gpugeek-job-where-text', text: view.text })
  ]);
}

function renderJobRecord(job: IJobModel, state: IJobRowState): HTMLElement {
  const rows: [string, string][] = [
    ['Job', job.id],
    ['Pool', job.pool],
    ['Status', job.status],
    ['Ranks', String(job.ranks)],
    ['Started', formatTimestamp(job.started_at)],
    ['Ended', formatTimestamp(job.ended_at)],
    ['Duration', formatDuration(job.duration_s)],
    ['Cost', formatUsd(job.usd)]
  ];
  if (job.failure_reason) {
    rows.push(['Failure', job.failure_reason]);
  }
  const params = hyperparamRows(job.hyperparams);
  return h('div', { class: 'gpugeek-job-detail' }, [
    state.error && h('div', { class: 'gpugeek-job-error', text: state.error }),
    renderKeyValues(rows),
    h('div', { class: 'gpugeek-job-code' }, [
      'Code SHA-256 ',
      h('code', {
        class: 'gpugeek-job-code-sha',
        text: job.code_sha256 ?? '–',
        title: job.code_sha256 ? `short: ${shortHash(job.code_sha256)}` : ''
      })
    ]),
    h('div', { class: 'gpugeek-job-hyperparams' }, [
      h('div', { class: 'gpugeek-subheading', text: 'Hyperparameters' }),
      params.length > 0
        ? renderKeyValues(params)
        : h('div', { class: 'gpugeek-muted', text: 'none recorded' })
    ])
  ]);
}
