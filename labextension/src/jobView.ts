/**
 * One row of the jobs list; a selected row also shows the job's record. A
 * running job's row (and a selected ended job's) shows its ranks' states as
 * chips and the grouped tail of their output.
 */

import { renderCopyButton, renderFullId } from './copy';
import { h } from './dom';
import {
  formatDuration,
  formatTimestamp,
  formatUsd,
  hyperparamRows,
  shortHash
} from './format';
import { IJobModel, IJobOutput, IRankState, isJobFinal, IWhereReport } from './models';
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

/**
 * What a job row shows for Cancel: every job that runs or waits has one. A
 * detached job's agent stops it; any other job is stopped through its pool's
 * scheduler by the notebook or script that runs it (its cell ends cancelled).
 */
export interface ICancelView {
  button: boolean;
  label: string;
  title: string;
  disabled: boolean;
  error: string | null;
}

export function cancelView(job: IJobModel, state: IJobCancelState | null): ICancelView {
  const open = job.status === 'running' || job.status === 'queued';
  const asking = state?.asking ?? false;
  const whose = job.detached ? 'this detached job' : `this job of ${job.submitter ?? 'another process'}`;
  return {
    button: open,
    label: asking ? 'Cancelling…' : 'Cancel',
    title: `Stop ${whose} on every rank (a queued one leaves the queue)`,
    disabled: asking,
    error: open ? (state?.error ?? null) : null
  };
}

/** What the Cancel button of one job has done (kept across the poll's redraws). */
export interface IJobCancelState {
  asking: boolean;
  error: string | null;
}

/**
 * Cancels jobs through the server (whichever process runs them stops them on
 * every rank, or takes them out of the queue) and keeps each request's state.
 */
export class JobCancelTracker {
  private readonly _states = new Map<string, IJobCancelState>();

  constructor(
    private readonly _cancel: (id: string) => Promise<unknown>,
    private readonly _changed: (id: string) => void
  ) {}

  state(id: string): IJobCancelState | null {
    return this._states.get(id) ?? null;
  }

  async cancel(id: string): Promise<void> {
    if (this._states.get(id)?.asking) {
      return;
    }
    this._states.set(id, { asking: true, error: null });
    this._changed(id);
    let next: IJobCancelState;
    try {
      await this._cancel(id);
      next = { asking: false, error: null };
    } catch (error) {
      next = { asking: false, error: `Could not cancel the job: ${(error as Error).message}` };
    }
    this._states.set(id, next);
    this._changed(id);
  }
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

/** `rank 3`, `ranks 0-7` or `ranks 0-3,5`: as the grouped tail labels its lines (`[ranks 0-3,5]`). */
export function formatRanks(ranks: readonly number[]): string {
  const ordered = [...new Set(ranks)].sort((a, b) => a - b);
  if (ordered.length === 1) {
    return `rank ${ordered[0]}`;
  }
  const spans: [number, number][] = [];
  for (const rank of ordered) {
    const last = spans[spans.length - 1];
    if (last && rank === last[1] + 1) {
      last[1] = rank;
    } else {
      spans.push([rank, rank]);
    }
  }
  return `ranks ${spans.map(([a, b]) => (a === b ? String(a) : `${a}-${b}`)).join(',')}`;
}

/** One chip of a job's ranks: the ranks in one state. */
export interface IRankChip {
  /** "ranks 0-6 running", "rank 7 failed". */
  label: string;
  state: string;
  ranks: number[];
}

/**
 * The ranks grouped by state, one chip per state in the order of its lowest
 * rank: eight ranks read as `ranks 0-6 running` and `rank 7 failed`, not as
 * eight chips, and the chips name ranks as the tail's labels do.
 */
export function rankChips(ranks: readonly IRankState[]): IRankChip[] {
  const byState = new Map<string, number[]>();
  for (const { rank, state } of [...ranks].sort((a, b) => a.rank - b.rank)) {
    const group = byState.get(state);
    if (group) {
      group.push(rank);
    } else {
      byState.set(state, [rank]);
    }
  }
  return [...byState].map(([state, group]) => ({
    label: `${formatRanks(group)} ${state}`,
    state,
    ranks: group
  }));
}

/** What a job's output view has fetched (kept across the poll's redraws). */
export interface IJobOutputState {
  /** A request is in flight. */
  fetching: boolean;
  /** The last answer of `GET /gpugeek/jobs/{id}/output`. */
  output: IJobOutput | null;
  /** Why the last request failed. */
  error: string | null;
  /** Keep the tail scrolled to its newest line; false while the user has scrolled up. */
  follow: boolean;
  /** An answer said the job was running: its row keeps the view once the job ends. */
  seenRunning: boolean;
}

/** What a job row shows of its ranks and their output: a pure function of the job and its state. */
export interface IJobOutputView {
  shown: boolean;
  chips: IRankChip[];
  /** The grouped tail, newest line last; null when there is none (yet). */
  tail: string | null;
  /** Said in place of the tail: "Loading output…", "No output yet." */
  note: string | null;
  error: string | null;
}

const HIDDEN_OUTPUT: IJobOutputView = { shown: false, chips: [], tail: null, note: null, error: null };

export function jobOutputView(
  job: IJobModel,
  state: IJobOutputState | null,
  selected: boolean
): IJobOutputView {
  // a row that showed a running job's output keeps it, with the final states, once the job ends
  const shown = job.status === 'running' || selected || (state?.seenRunning ?? false);
  if (!shown) {
    return HIDDEN_OUTPUT;
  }
  const output = state?.output ?? null;
  const error = state?.error ?? null;
  const tail = output && output.tail !== '' ? output.tail : null;
  let note: string | null = null;
  if (output === null) {
    note = error === null ? 'Loading output…' : null;
  } else if (tail === null) {
    note = isJobFinal(output.status) ? 'No output was kept.' : 'No output yet.';
  }
  return { shown, chips: output ? rankChips(output.ranks) : [], tail, note, error };
}

/**
 * Whether to fetch a job's output on this poll: on every poll while the job
 * runs (or waits to) and its row is on screen or selected; once for an ended
 * job that shows the view, until an answer says it has ended.
 */
export function wantsOutput(
  job: IJobModel,
  state: IJobOutputState | null,
  onScreen: boolean,
  selected: boolean
): boolean {
  if (state?.fetching || !(onScreen || selected)) {
    return false;
  }
  if (!isJobFinal(job.status)) {
    return job.status === 'running' || selected;
  }
  if (!jobOutputView(job, state, selected).shown) {
    return false;
  }
  const answeredEnded = state?.output ? isJobFinal(state.output.status) : false;
  return !(answeredEnded || (state?.error ?? null) !== null);
}

/**
 * Fetches jobs' output and keeps the last answer per job, so that the rows,
 * redrawn on every poll, keep showing it; and whether each tail follows its
 * newest line.
 */
export class JobOutputTracker {
  private readonly _states = new Map<string, IJobOutputState>();

  constructor(
    private readonly _fetch: (id: string) => Promise<IJobOutput>,
    /** Called when an answer (or a failure) arrived: redraw the job's row. */
    private readonly _changed: (id: string) => void
  ) {}

  state(id: string): IJobOutputState | null {
    return this._states.get(id) ?? null;
  }

  /** Whether job `id`'s tail is kept scrolled to its newest line. */
  follows(id: string): boolean {
    return this._states.get(id)?.follow ?? true;
  }

  /** The user scrolled the tail: follow the newest lines only while it is at the bottom. */
  setFollow(id: string, follow: boolean): void {
    const state = this._states.get(id);
    if (state) {
      state.follow = follow;
    }
  }

  /** Fetch job `id`'s output once; a call while one is in flight is ignored. */
  async fetch(id: string): Promise<void> {
    const previous = this._states.get(id);
    if (previous?.fetching) {
      return;
    }
    // no redraw for the request: the row keeps what it shows until the answer comes
    this._states.set(id, {
      fetching: true,
      output: previous?.output ?? null,
      error: previous?.error ?? null,
      follow: previous?.follow ?? true,
      seenRunning: previous?.seenRunning ?? false
    });
    let answer: Pick<IJobOutputState, 'output' | 'error'>;
    try {
      answer = { output: await this._fetch(id), error: null };
    } catch (error) {
      const reason = (error as Error).message;
      answer = { output: previous?.output ?? null, error: `Could not load the output: ${reason}` };
    }
    const current = this._states.get(id);
    if (current === undefined) {
      return; // no longer listed
    }
    this._states.set(id, {
      ...current,
      ...answer,
      fetching: false,
      seenRunning: current.seenRunning || answer.output?.status === 'running'
    });
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

/** Whether a scrolled box shows its last line (within a couple of pixels). */
export function isScrolledToBottom(box: {
  scrollTop: number;
  scrollHeight: number;
  clientHeight: number;
}): boolean {
  return box.scrollHeight - box.scrollTop - box.clientHeight <= 2;
}

/** Scroll every tail in `container` that follows its newest line to the bottom (after a redraw). */
export function scrollTailsToBottom(container: HTMLElement, follows: (id: string) => boolean): void {
  container.querySelectorAll<HTMLElement>('.gpugeek-job-output-tail').forEach(tail => {
    const id = tail.dataset.jobId;
    if (id !== undefined && follows(id)) {
      tail.scrollTop = tail.scrollHeight;
    }
  });
}

/**
 * Which job rows are on screen, so that output is fetched only for those:
 * an `IntersectionObserver` over the rows (every row counts as on screen
 * where there is none).
 */
export class OnScreenRows {
  private readonly _ids = new Set<string>();
  private readonly _observer: IntersectionObserver | null;

  /** `appeared` is called when a row came on screen. */
  constructor(private readonly _appeared: () => void) {
    this._observer =
      typeof IntersectionObserver === 'undefined'
        ? null
        : new IntersectionObserver(entries => this._seen(entries));
  }

  has(id: string): boolean {
    return this._observer === null || this._ids.has(id);
  }

  /** Watch the rows now in `container`; after every redraw, as a row may be a new element. */
  watch(container: HTMLElement): void {
    if (this._observer === null) {
      return;
    }
    this._observer.disconnect();
    for (const row of container.querySelectorAll<HTMLElement>('.gpugeek-job-row')) {
      this._observer.observe(row);
    }
  }

  dispose(): void {
    this._observer?.disconnect();
  }

  private _seen(entries: IntersectionObserverEntry[]): void {
    let appeared = false;
    for (const entry of entries) {
      const id = (entry.target as HTMLElement).dataset.jobId;
      if (id === undefined) {
        continue;
      }
      if (entry.isIntersecting) {
        appeared = appeared || !this._ids.has(id);
        this._ids.add(id);
      } else {
        this._ids.delete(id);
      }
    }
    if (appeared) {
      this._appeared();
    }
  }
}

/** `queued #1` while a job waits its turn (1: next to run), else its status. */
export function jobStatusText(job: IJobModel): string {
  return job.status === 'queued' && job.position !== null ? `queued #${job.position}` : job.status;
}

export function renderJobRow(
  job: IJobModel,
  state: IJobRowState,
  onToggle: (id: string) => void,
  actions?: IJobActions,
  output?: { tracker: JobOutputTracker }
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
      h('span', {
        class: `gpugeek-status gpugeek-status-${job.status}`,
        text: jobStatusText(job),
        title: job.status === 'queued' ? `waiting for its turn on pool ${job.pool}` : job.status
      }),
      h('span', { class: 'gpugeek-job-ranks', text: job.ranks === 1 ? '1 rank' : `${job.ranks} ranks` }),
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
      actions && renderActions(job, actions),
      output && renderOutput(job, state.selected, output.tracker),
      state.selected && renderJobRecord(state.record ?? job, state)
    ]
  );
}

/** What a job row's buttons do. */
export interface IJobActions {
  where: JobWhereTracker;
  cancel?: JobCancelTracker;
  /** Open the job as a main-area tab (its output and metrics). */
  open?: (id: string) => void;
}

/** Where, Cancel and Open in tab side by side, what they answered below them. */
function renderActions(job: IJobModel, actions: IJobActions): HTMLElement | null {
  const where = whereView(job, actions.where.state(job.id));
  const cancelTracker = actions.cancel;
  const cancel = cancelTracker ? cancelView(job, cancelTracker.state(job.id)) : null;
  const buttons: HTMLElement[] = [];
  if (where.button) {
    const button = h('button', {
      class: 'jp-mod-styled gpugeek-job-where-button',
      text: where.label,
      title: "Show each rank's stack now and the collective it waits in (as %gpugeek_where does)",
      on: { click: () => void actions.where.ask(job.id) }
    });
    button.disabled = where.disabled;
    buttons.push(button);
  }
  if (cancel?.button && cancelTracker) {
    const button = h('button', {
      class: 'jp-mod-styled jp-mod-warn gpugeek-job-cancel-button',
      text: cancel.label,
      title: cancel.title,
      on: { click: () => void cancelTracker.cancel(job.id) }
    });
    button.disabled = cancel.disabled;
    buttons.push(button);
  }
  const open = actions.open;
  if (open) {
    buttons.push(
      h('button', {
        class: 'jp-mod-styled gpugeek-job-open-button',
        text: 'Open in tab',
        title: "Open the job's output and its logged values in a tab that docks beside the notebook",
        on: { click: () => open(job.id) }
      })
    );
  }
  if (buttons.length === 0) {
    return null;
  }
  const error = (text: string | null) =>
    text && h('div', { class: 'gpugeek-job-error', attrs: { role: 'alert' }, text });
  return h('div', { class: 'gpugeek-job-actions' }, [
    h('div', { class: 'gpugeek-job-buttons' }, buttons),
    where.button && error(where.error),
    cancel?.button && error(cancel.error),
    where.button && where.text !== null && h('pre', { class: 'gpugeek-job-where-text', text: where.text })
  ]);
}

function renderOutput(job: IJobModel, selected: boolean, tracker: JobOutputTracker): HTMLElement | null {
  const view = jobOutputView(job, tracker.state(job.id), selected);
  if (!view.shown) {
    return null;
  }
  return h('div', { class: 'gpugeek-job-output' }, [
    view.chips.length > 0 &&
      h(
        'div',
        { class: 'gpugeek-rank-chips', attrs: { role: 'list', 'aria-label': 'Ranks' } },
        view.chips.map(chip =>
          h('span', {
            class: `gpugeek-rank-chip gpugeek-rank-${chip.state.replace(/[^a-z-]/g, '')}`,
            text: chip.label,
            attrs: { role: 'listitem' }
          })
        )
      ),
    view.error && h('div', { class: 'gpugeek-job-error', attrs: { role: 'alert' }, text: view.error }),
    view.tail !== null
      ? h('pre', {
          class: 'gpugeek-job-output-tail',
          text: view.tail,
          title: "The last lines of the ranks' output; lines alike across ranks shown once",
          data: { jobId: job.id },
          attrs: { tabindex: '0' },
          on: {
            scroll: event =>
              tracker.setFollow(job.id, isScrolledToBottom(event.currentTarget as HTMLElement))
          }
        })
      : view.note && h('div', { class: 'gpugeek-job-output-note gpugeek-muted', text: view.note })
  ]);
}

/**
 * The slow-rank line without the job's id that starts it (the view names the job already).
 */
export function slowRankText(line: string): string {
  return line.replace(/^job \S+: /, '');
}

function renderJobRecord(job: IJobModel, state: IJobRowState): HTMLElement {
  const rows: [string, string][] = [
    ['Job', job.id],
    ['Pool', job.pool],
    ['Status', jobStatusText(job)],
    ['Ranks', String(job.ranks)],
    ['Started', formatTimestamp(job.started_at)],
    ['Ended', formatTimestamp(job.ended_at)],
    ['Duration', formatDuration(job.duration_s)],
    ['Cost', formatUsd(job.usd)]
  ];
  if (job.submitter) {
    rows.push(['Submitted by', job.submitter]);
  }
  if (job.waited_s >= 0.5) {
    rows.push(['Waited in queue', formatDuration(job.waited_s)]);
  }
  if (job.failure_reason) {
    rows.push(['Failure', job.failure_reason]);
  }
  if (job.slow_rank) {
    rows.push(['Slow rank', slowRankText(job.slow_rank)]);
  }
  const params = hyperparamRows(job.hyperparams);
  return h('div', { class: 'gpugeek-job-detail' }, [
    state.error && h('div', { class: 'gpugeek-job-error', text: state.error }),
    h('div', { class: 'gpugeek-job-full-id' }, ['Id ', renderFullId(job.id, 'job id')]),
    renderKeyValues(rows),
    h('div', { class: 'gpugeek-job-code' }, [
      'Code ',
      h('code', {
        class: 'gpugeek-job-code-sha',
        text: shortHash(job.code_sha256),
        title: job.code_sha256 ? `SHA-256 of the code: ${job.code_sha256}` : ''
      }),
      job.code_sha256 && renderCopyButton(job.code_sha256, "code's SHA-256")
    ]),
    // a cell has no hyperparameters (a script's arguments are): no empty section for it
    params.length > 0 &&
      h('div', { class: 'gpugeek-job-hyperparams' }, [
        h('div', { class: 'gpugeek-subheading', text: 'Hyperparameters' }),
        renderKeyValues(params)
      ])
  ]);
}
