/**
 * The "GPU pools" side panel in the order of work: a header that stays put,
 * live pools, jobs, then the day's ended pools in a collapsed "Recent"
 * section (older history a "Show more" away) and the launch form, collapsed
 * below them; refreshed by one Lumino `Poll` that backs off while the server
 * does not answer, and at once when the registry changes (`ChangeWatcher`).
 */

import { Dialog, Notification, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { CommandRegistry } from '@lumino/commands';
import { Message } from '@lumino/messaging';
import { IPoll, Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { GpugeekApi } from './api';
import { ChangeWatcher } from './changes';
import { CommandIDs } from './commands';
import { h, KeyedList } from './dom';
import {
  JobCancelTracker,
  JobOutputTracker,
  JobWhereTracker,
  OnScreenRows,
  renderJobRow,
  scrollTailsToBottom,
  wantsOutput
} from './jobView';
import { endMessage, JobEndWatcher, orderJobs } from './jobEnds';
import { LaunchForm } from './launchForm';
import { IJobModel, IPoolMetrics, IPoolModel } from './models';
import {
  buildPoolsView,
  HISTORY_PAGE_SIZE,
  HistoryPager,
  IEndedPoolRow,
  ILivePoolRow,
  poolKey,
  quotaLine
} from './poolsView';
import { renderEndedRow, renderPoolRow } from './poolView';
import { PageConfig } from '@jupyterlab/coreutils';
import { OutageMonitor } from './state';

export const PANEL_ID = 'gpugeek-sidebar';

export const DEFAULT_REFRESH_PERIOD_SECONDS = 2;
export const MIN_REFRESH_PERIOD_SECONDS = 0.5;
/** The quota line is asked for at most this often (a team ledger service may be behind it). */
export const QUOTA_PERIOD_MS = 15 * 1000;
/** Longest wait between polls while the server keeps failing. */
const MAX_BACKOFF_MS = 20 * 1000;

export interface IGpugeekPanelOptions {
  api: GpugeekApi;
  commands: CommandRegistry;
  refreshPeriodSeconds?: number;
}

export class GpugeekPanel extends Widget {
  readonly api: GpugeekApi;
  private readonly _commands: CommandRegistry;
  private readonly _poll: Poll;
  /** Lists again as soon as the registry changes (a stop from a notebook, a job's end). */
  private readonly _changes: ChangeWatcher;
  private readonly _outage = new OutageMonitor();
  private readonly _outageNode: HTMLElement;
  private readonly _pools: KeyedList<ILivePoolRow>;
  private readonly _recent: KeyedList<IEndedPoolRow>;
  private readonly _older: KeyedList<IEndedPoolRow>;
  private readonly _jobs: KeyedList<IJobModel>;
  private readonly _jobEnds = new JobEndWatcher();
  /** What each running job's Where button has shown. */
  private readonly _where: JobWhereTracker;
  private readonly _cancel: JobCancelTracker;
  /** What each shown job's ranks' states and output tail last were. */
  private readonly _output: JobOutputTracker;
  /** Job rows on screen: their running jobs' output is fetched on every poll. */
  private readonly _onScreen: OnScreenRows;
  private readonly _poolsEmpty: HTMLElement;
  private readonly _glanceBox: HTMLElement;
  private readonly _glance: HTMLElement;
  private readonly _glanceSpent: HTMLElement;
  private readonly _quota: HTMLElement;
  /** When the quota line was last asked for (0: ask at the next poll). */
  private _quotaAt = 0;
  private readonly _recentEmpty: HTMLElement;
  private readonly _recentToggle: HTMLButtonElement;
  private readonly _recentSummary: HTMLElement;
  private readonly _recentBody: HTMLElement;
  private readonly _launchToggle: HTMLButtonElement;
  private readonly _launchBody: HTMLElement;
  private readonly _olderHeading: HTMLElement;
  private readonly _historyError: HTMLElement;
  private readonly _historyEnd: HTMLElement;
  private readonly _showMore: HTMLButtonElement;
  private readonly _jobsEmpty: HTMLElement;
  private readonly _form: LaunchForm;
  private readonly _history: HistoryPager;
  /** The last default listing (live and recently ended pools), with Stop and launch answers applied. */
  private _listed: IPoolModel[] = [];
  private _jobModels: IJobModel[] = [];
  private _recentOpen = false;
  private readonly _expandedEnded = new Set<string>();
  private readonly _expandedPools = new Set<string>();
  private readonly _poolMetrics = new Map<string, IPoolMetrics>();
  private readonly _stoppingPools = new Set<string>();
  private _selectedJob: string | null = null;
  private _jobRecord: IJobModel | null = null;
  private _jobRecordError: string | null = null;
  private _catalogRequest: Promise<void> | null = null;

  constructor(options: IGpugeekPanelOptions) {
    super();
    this.id = PANEL_ID;
    this.addClass('gpugeek-panel');
    this.api = options.api;
    this._commands = options.commands;

    this._outageNode = h('div', { class: 'gpugeek-outage', attrs: { role: 'alert', hidden: '' } });
    const poolList = h('div', { class: 'gpugeek-pool-list' });
    const recentList = h('div', { class: 'gpugeek-ended-list gpugeek-recent-list' });
    const olderList = h('div', { class: 'gpugeek-ended-list gpugeek-older-list' });
    const jobList = h('div', { class: 'gpugeek-job-list' });
    this._poolsEmpty = h('div', {
      class: 'gpugeek-empty gpugeek-muted',
      text: 'No live pools. Launch one with the form below, or from a notebook.'
    });
    this._recentEmpty = h('div', {
      class: 'gpugeek-empty gpugeek-muted',
      text: 'No pool ended in the last 24 h.'
    });
    this._jobsEmpty = h('div', { class: 'gpugeek-empty gpugeek-muted', text: 'No jobs yet.' });
    this._pools = new KeyedList(poolList, row => row.pool.name, row => this._renderPool(row));
    this._recent = new KeyedList(recentList, row => row.key, row => this._renderEnded(row));
    this._older = new KeyedList(olderList, row => row.key, row => this._renderEnded(row));
    this._jobs = new KeyedList(jobList, job => job.id, job => this._renderJob(job));
    this._where = new JobWhereTracker(
      id => this.api.jobWhere(id),
      id => this._redrawJob(id)
    );
    this._cancel = new JobCancelTracker(
      id => this.api.cancelJob(id),
      id => this._redrawJob(id)
    );
    this._output = new JobOutputTracker(
      id => this.api.jobOutput(id),
      id => this._redrawJob(id)
    );
    this._onScreen = new OnScreenRows(() => void this._refreshOutput());
    this._form = new LaunchForm({ api: this.api, onLaunched: pool => this._onLaunched(pool) });
    this._history = new HistoryPager(before => this.api.listEndedPools(before, HISTORY_PAGE_SIZE));

    this._recentSummary = h('span', { class: 'gpugeek-recent-summary' });
    this._glanceSpent = h('span', { class: 'gpugeek-glance-spent' });
    this._glance = h('span', { class: 'gpugeek-glance-text' });
    this._quota = h('div', {
      class: 'gpugeek-quota',
      title: "Your limits and what counts against them (the team's settings)",
      attrs: { hidden: '' }
    });
    this._glanceBox = h('div', { class: 'gpugeek-glance', attrs: { role: 'status' } }, [
      this._glance,
      h('span', { class: 'gpugeek-glance-spend' }, ['spent ', this._glanceSpent])
    ]);
    this._recentToggle = h(
      'button',
      {
        class: 'gpugeek-recent-toggle',
        title: 'Show or hide the pools that ended in the last 24 h',
        attrs: { 'aria-expanded': 'false', 'aria-controls': `${PANEL_ID}-recent` },
        on: { click: () => this._toggleRecent() }
      },
      [h('span', { class: 'gpugeek-caret', attrs: { 'aria-hidden': 'true' } }), 'Recent', this._recentSummary]
    );
    this._olderHeading = h('div', { class: 'gpugeek-subheading gpugeek-older-heading', text: 'Older' });
    this._historyError = h('div', { class: 'gpugeek-history-error', attrs: { role: 'alert' } });
    this._historyEnd = h('div', { class: 'gpugeek-history-end gpugeek-muted', text: 'No older pools.' });
    this._showMore = h('button', {
      class: 'jp-mod-styled gpugeek-show-more',
      text: 'Show more',
      title: 'Load older pools from the history',
      on: { click: () => void this.showMoreHistory() }
    });
    this._recentBody = h(
      'div',
      { class: 'gpugeek-recent-body', attrs: { id: `${PANEL_ID}-recent`, hidden: '' } },
      [
        this._recentEmpty,
        recentList,
        this._olderHeading,
        olderList,
        this._historyError,
        this._historyEnd,
        this._showMore
      ]
    );

    this._launchToggle = h(
      'button',
      {
        class: 'gpugeek-launch-toggle',
        title: 'Show or hide the form that launches a pool',
        attrs: { 'aria-expanded': 'false', 'aria-controls': `${PANEL_ID}-launch` },
        on: { click: () => this.toggleLaunchForm() }
      },
      [h('span', { class: 'gpugeek-caret', attrs: { 'aria-hidden': 'true' } }), 'Launch a pool']
    );
    this._launchBody = h(
      'div',
      { class: 'gpugeek-launch-body', attrs: { id: `${PANEL_ID}-launch`, hidden: '' } },
      [this._form.node]
    );

    this.node.appendChild(
      h('div', { class: 'gpugeek-panel-content' }, [
        // Sticky: the header (and Refresh) stays in view however far the jobs scroll.
        h('header', { class: 'gpugeek-panel-header' }, [
          h('div', { class: 'gpugeek-panel-title' }, [
            h('h2', { text: 'GPU pools' }),
            h('button', {
              class: 'jp-mod-styled gpugeek-refresh-button',
              text: 'Refresh',
              title: 'Refresh pools and jobs now',
              on: { click: () => void this._commands.execute(CommandIDs.refreshPools) }
            })
          ]),
          // Pools and spend at a glance, however far the panel scrolls.
          this._glanceBox,
          this._quota
        ]),
        this._outageNode,
        // Live pools come straight under the header: they are what costs money now.
        h('section', { class: 'gpugeek-section gpugeek-pools', attrs: { 'aria-label': 'Live pools' } }, [
          this._poolsEmpty,
          poolList
        ]),
        // Then what runs on them: a job's details, failure and Where report stay near the top.
        h('section', { class: 'gpugeek-section gpugeek-jobs' }, [
          h('h3', { text: 'Jobs' }),
          this._jobsEmpty,
          jobList
        ]),
        h('section', { class: 'gpugeek-section gpugeek-recent' }, [
          h('h3', {}, [this._recentToggle]),
          this._recentBody
        ]),
        h('section', { class: 'gpugeek-section gpugeek-launch' }, [
          h('h3', {}, [this._launchToggle]),
          this._launchBody
        ])
      ])
    );

    const seconds = options.refreshPeriodSeconds ?? DEFAULT_REFRESH_PERIOD_SECONDS;
    this._poll = new Poll({
      auto: true,
      factory: () => this._tick(),
      frequency: GpugeekPanel.frequency(seconds),
      name: 'gpugeek:pools',
      // Pause while the browser tab is hidden, and while this panel is.
      standby: () => (this.isVisible ? 'when-hidden' : true)
    });
    this._changes = new ChangeWatcher({
      wait: (since, seconds) => this.api.waitForChange(since, seconds),
      onChange: () => void this.refresh(),
      isActive: () => this.isVisible && document.visibilityState !== 'hidden'
    });
    this._changes.start();
  }

  /** Poll frequency for a refresh period, with backoff on failures. */
  static frequency(seconds: number): IPoll.Frequency {
    const interval = Math.max(MIN_REFRESH_PERIOD_SECONDS, seconds) * 1000;
    return { interval, backoff: true, max: Math.max(MAX_BACKOFF_MS, interval) };
  }

  set refreshPeriodSeconds(seconds: number) {
    this._poll.frequency = GpugeekPanel.frequency(seconds);
  }

  /** Poll now, without waiting for the next tick. */
  refresh(): Promise<void> {
    return this._poll.refresh();
  }

  /** Open or close the launch form (closed at first: pools and jobs come first). */
  toggleLaunchForm(open?: boolean): void {
    const opened = open ?? this._launchBody.hidden;
    this._launchToggle.setAttribute('aria-expanded', String(opened));
    this._launchBody.hidden = !opened;
  }

  /** Ask for confirmation, then stop the pool. Resolves to whether it was stopped. */
  async stopPool(name: string): Promise<boolean> {
    const result = await showDialog({
      title: `Stop pool ${name}?`,
      body:
        'Its workers shut down, jobs running on it are cancelled and its cost stops growing. ' +
        'Kernels using it lose their dask client.',
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Stop pool' })],
      // Enter (or a stray key press) keeps the pool: the destructive choice takes a click.
      defaultButton: 0
    });
    if (!result.button.accept) {
      return false;
    }
    this._stoppingPools.add(name);
    this._pools.rerender(name);
    try {
      const pool = await this.api.stopPool(name);
      this._stoppingPools.delete(name);
      // An ended pool leaves the live cards for a row in Recent.
      this._upsertPool(pool);
      return true;
    } catch (error) {
      this._stoppingPools.delete(name);
      this._pools.rerender(name);
      await showErrorMessage(`Could not stop pool ${name}`, error as Error);
      return false;
    } finally {
      void this.refresh();
    }
  }

  /** Load older ended pools into Recent ("Show more"). */
  async showMoreHistory(): Promise<void> {
    const shown = new Set([...this._listed, ...this._history.pools].map(poolKey));
    const loading = this._history.loadMore(pool => !shown.has(poolKey(pool)));
    this._historyError.textContent = '';
    this._showHistoryState();
    try {
      await loading;
    } catch (error) {
      this._historyError.textContent = `Could not load older pools: ${(error as Error).message}`;
    }
    this._showPools();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    void this._changes.stop();
    this._onScreen.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.refresh();
  }

  private async _tick(): Promise<void> {
    let pools: IPoolModel[];
    let jobs: IJobModel[];
    try {
      [pools, jobs] = await Promise.all([this.api.listPools(), this.api.listJobs()]);
    } catch (error) {
      if (this._outage.fail(error)) {
        this._showOutage();
      }
      // Rejecting makes the poll back off.
      throw error;
    }
    if (this._outage.succeed()) {
      this._showOutage();
    }
    this._listed = pools;
    if (Date.now() - this._quotaAt >= QUOTA_PERIOD_MS) {
      void this._refreshQuota();
    }
    this._showJobs(jobs);
    void this._refreshOutput();
    this._showPools();
    if (!this._form.catalog) {
      void this._loadCatalog();
    }
    void this._refreshMetrics();
  }

  private _showOutage(): void {
    const outage = this._outage.current;
    this.toggleClass('gpugeek-mod-stale', outage !== null);
    if (outage === null) {
      this._outageNode.hidden = true;
      this._outageNode.replaceChildren();
      return;
    }
    this._outageNode.replaceChildren(
      h('div', { class: 'gpugeek-outage-message', text: outage.message }),
      h('div', { class: 'gpugeek-outage-hint', text: outage.hint })
    );
    this._outageNode.hidden = false;
  }

  /** Draw the pools from the last listing, the jobs and the history loaded so far. */
  private _showPools(): void {
    const view = buildPoolsView(this._listed, this._jobModels, this._history.pools, Date.now());
    const live = new Set(view.live.map(row => row.pool.name));
    for (const name of [...this._expandedPools]) {
      if (!live.has(name)) {
        this._expandedPools.delete(name);
        this._poolMetrics.delete(name);
      }
    }
    const ended = new Set([...view.recent, ...view.older].map(row => row.key));
    for (const key of [...this._expandedEnded]) {
      if (!ended.has(key)) {
        this._expandedEnded.delete(key);
      }
    }
    this._pools.update(view.live);
    this._poolsEmpty.hidden = view.live.length > 0;
    this._recent.update(view.recent);
    this._older.update(view.older);
    this._recentSummary.textContent = view.recentSummary;
    this._glance.textContent = view.glance.text;
    this._glanceSpent.textContent = view.glance.spent;
    this._glanceBox.title = view.glance.title;
    this._recentEmpty.hidden = view.recent.length > 0;
    this._olderHeading.hidden = view.older.length === 0;
    this._showHistoryState();
    this._form.setPoolNames(this._listed.map(pool => pool.name));
  }

  private _showHistoryState(): void {
    const loading = this._history.loading;
    this._showMore.hidden = this._history.done;
    this._showMore.disabled = loading;
    this._showMore.textContent = loading ? 'Loading…' : 'Show more';
    this._historyEnd.hidden = !this._history.done;
    this._historyError.hidden = this._historyError.textContent === '';
  }

  private _toggleRecent(): void {
    this._recentOpen = !this._recentOpen;
    this._recentToggle.setAttribute('aria-expanded', String(this._recentOpen));
    this._recentBody.hidden = !this._recentOpen;
  }

  private _showJobs(listed: IJobModel[]): void {
    const jobs = orderJobs(listed);
    for (const job of this._jobEnds.ended(jobs)) {
      const notify = job.status === 'succeeded' ? Notification.success : Notification.error;
      notify(endMessage(job), { autoClose: job.status === 'succeeded' ? 8000 : false });
    }
    if (this._selectedJob !== null && !jobs.some(job => job.id === this._selectedJob)) {
      this._selectedJob = null;
      this._jobRecord = null;
    }
    this._jobModels = jobs;
    this._where.keepOnly(jobs.map(job => job.id));
    this._output.keepOnly(jobs.map(job => job.id));
    this._jobs.update(jobs);
    this._afterJobsDrawn();
    this._jobsEmpty.hidden = jobs.length > 0;
  }

  private _redrawJob(id: string): void {
    this._jobs.rerender(id);
    this._afterJobsDrawn();
  }

  /** Tails that follow their newest line stay at the bottom; rows that are new elements are watched. */
  private _afterJobsDrawn(): void {
    scrollTailsToBottom(this._jobs.container, id => this._output.follows(id));
    this._onScreen.watch(this._jobs.container);
  }

  /** Fetch the output of the jobs whose rows show it: running ones on screen, a selected one. */
  private async _refreshOutput(): Promise<void> {
    const wanted = this._jobModels.filter(job =>
      wantsOutput(
        job,
        this._output.state(job.id),
        this._onScreen.has(job.id),
        job.id === this._selectedJob
      )
    );
    await Promise.all(wanted.map(job => this._output.fetch(job.id)));
  }

  /** The quota line: shown when a limit applies; left as it was when the server cannot say. */
  private async _refreshQuota(): Promise<void> {
    this._quotaAt = Date.now();
    try {
      const line = quotaLine(await this.api.quota());
      this._quota.textContent = line ?? '';
      this._quota.hidden = line === null;
    } catch (error) {
      console.warn('gpugeek: could not read the quota', error);
    }
  }

  private _upsertPool(pool: IPoolModel): void {
    this._quotaAt = 0; // a launch or a stop changes what counts against the quota
    const pools = this._listed.slice();
    const index = pools.findIndex(candidate => candidate.name === pool.name);
    if (index >= 0) {
      pools[index] = pool;
    } else {
      pools.push(pool);
    }
    this._listed = pools;
    this._showPools();
  }

  private _onLaunched(pool: IPoolModel): void {
    this._upsertPool(pool);
    void this.refresh();
  }

  private _loadCatalog(): Promise<void> {
    if (!this._catalogRequest) {
      this._catalogRequest = this.api
        .getCatalog()
        .then(catalog => this._form.setCatalog(catalog))
        .catch(error => {
          // Tried again on the next tick; the outage notice covers a dead server.
          console.warn('gpugeek: could not load the GPU catalog', error);
        })
        .finally(() => {
          this._catalogRequest = null;
        });
    }
    return this._catalogRequest;
  }

  private async _refreshMetrics(): Promise<void> {
    await Promise.all(
      [...this._expandedPools].map(async name => {
        try {
          this._poolMetrics.set(name, await this.api.poolMetrics(name));
        } catch (error) {
          this._poolMetrics.set(name, {
            samples: [],
            reason: `Could not load metrics: ${(error as Error).message}`
          });
        }
        if (this._expandedPools.has(name)) {
          this._pools.rerender(name);
        }
      })
    );
  }

  private _renderPool({ pool, jobs }: ILivePoolRow): HTMLElement {
    return renderPoolRow(
      pool,
      {
        expanded: this._expandedPools.has(pool.name),
        metrics: this._poolMetrics.get(pool.name) ?? null,
        stopping: this._stoppingPools.has(pool.name),
        jobs
      },
      {
        commands: this._commands,
        onToggleDetails: name => this._togglePoolDetails(name),
        baseUrl: PageConfig.getBaseUrl()
      }
    );
  }

  private _renderEnded(row: IEndedPoolRow): HTMLElement {
    return renderEndedRow(row, { expanded: this._expandedEnded.has(row.key) }, key =>
      this._toggleEnded(key)
    );
  }

  private _toggleEnded(key: string): void {
    if (!this._expandedEnded.delete(key)) {
      this._expandedEnded.add(key);
    }
    this._recent.rerender(key);
    this._older.rerender(key);
  }

  private _togglePoolDetails(name: string): void {
    if (this._expandedPools.delete(name)) {
      this._poolMetrics.delete(name);
    } else {
      this._expandedPools.add(name);
      void this._refreshMetrics();
    }
    this._pools.rerender(name);
  }

  private _renderJob(job: IJobModel): HTMLElement {
    const selected = job.id === this._selectedJob;
    return renderJobRow(
      job,
      {
        selected,
        record: selected ? this._jobRecord : null,
        error: selected ? this._jobRecordError : null
      },
      id => void this._toggleJob(id),
      {
        where: this._where,
        cancel: this._cancel,
        open: id => void this._commands.execute(CommandIDs.openJob, { id })
      },
      { tracker: this._output }
    );
  }

  private async _toggleJob(id: string): Promise<void> {
    const previous = this._selectedJob;
    this._selectedJob = previous === id ? null : id;
    this._jobRecord = null;
    this._jobRecordError = null;
    if (previous !== null) {
      this._redrawJob(previous);
    }
    if (this._selectedJob === null) {
      return;
    }
    this._redrawJob(id);
    void this._refreshOutput();
    try {
      const record = await this.api.getJob(id);
      if (this._selectedJob === id) {
        this._jobRecord = record;
      }
    } catch (error) {
      if (this._selectedJob === id) {
        this._jobRecordError = `Could not load the job record: ${(error as Error).message}`;
      }
    }
    this._redrawJob(id);
  }
}
