/**
 * The "GPU pools" side panel: pools, the launch form and jobs, refreshed
 * by one Lumino `Poll` that backs off while the server does not answer.
 */

import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { CommandRegistry } from '@lumino/commands';
import { Message } from '@lumino/messaging';
import { IPoll, Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { GpugeekApi } from './api';
import { CommandIDs } from './commands';
import { h, KeyedList } from './dom';
import { renderJobRow } from './jobView';
import { LaunchForm } from './launchForm';
import { IJobModel, IPoolMetrics, IPoolModel } from './models';
import { renderPoolRow } from './poolView';
import { OutageMonitor } from './state';

export const PANEL_ID = 'gpugeek-sidebar';

export const DEFAULT_REFRESH_PERIOD_SECONDS = 2;
export const MIN_REFRESH_PERIOD_SECONDS = 0.5;
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
  private readonly _outage = new OutageMonitor();
  private readonly _outageNode: HTMLElement;
  private readonly _pools: KeyedList<IPoolModel>;
  private readonly _jobs: KeyedList<IJobModel>;
  private readonly _poolsEmpty: HTMLElement;
  private readonly _jobsEmpty: HTMLElement;
  private readonly _form: LaunchForm;
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
    const jobList = h('div', { class: 'gpugeek-job-list' });
    this._poolsEmpty = h('div', {
      class: 'gpugeek-empty gpugeek-muted',
      text: 'No pools yet. Launch one below, or from a notebook.'
    });
    this._jobsEmpty = h('div', { class: 'gpugeek-empty gpugeek-muted', text: 'No jobs yet.' });
    this._pools = new KeyedList(poolList, pool => pool.name, pool => this._renderPool(pool));
    this._jobs = new KeyedList(jobList, job => job.id, job => this._renderJob(job));
    this._form = new LaunchForm({ api: this.api, onLaunched: pool => this._onLaunched(pool) });

    this.node.appendChild(
      h('div', { class: 'gpugeek-panel-content' }, [
        h('header', { class: 'gpugeek-panel-header' }, [
          h('h2', { text: 'GPU pools' }),
          h('button', {
            class: 'jp-mod-styled gpugeek-refresh-button',
            text: 'Refresh',
            title: 'Refresh pools and jobs now',
            on: { click: () => void this._commands.execute(CommandIDs.refreshPools) }
          })
        ]),
        this._outageNode,
        h('section', { class: 'gpugeek-section gpugeek-pools' }, [
          h('h3', { text: 'Pools' }),
          this._poolsEmpty,
          poolList
        ]),
        h('section', { class: 'gpugeek-section gpugeek-launch' }, [
          h('h3', { text: 'Launch a pool' }),
          this._form.node
        ]),
        h('section', { class: 'gpugeek-section gpugeek-jobs' }, [
          h('h3', { text: 'Jobs' }),
          this._jobsEmpty,
          jobList
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

  /** Ask for confirmation, then stop the pool. Resolves to whether it was stopped. */
  async stopPool(name: string): Promise<boolean> {
    const result = await showDialog({
      title: `Stop pool ${name}?`,
      body:
        'Its workers shut down, jobs running on it are cancelled and its cost stops growing. ' +
        'Kernels using it lose their dask client.',
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Stop pool' })]
    });
    if (!result.button.accept) {
      return false;
    }
    this._stoppingPools.add(name);
    this._pools.rerender(name);
    try {
      const pool = await this.api.stopPool(name);
      this._stoppingPools.delete(name);
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

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
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
    this._showPools(pools);
    this._showJobs(jobs);
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

  private _showPools(pools: IPoolModel[]): void {
    const names = new Set(pools.map(pool => pool.name));
    for (const name of [...this._expandedPools]) {
      if (!names.has(name)) {
        this._expandedPools.delete(name);
        this._poolMetrics.delete(name);
      }
    }
    this._pools.update(pools);
    this._poolsEmpty.hidden = pools.length > 0;
    this._form.setPoolNames([...names]);
  }

  private _showJobs(jobs: IJobModel[]): void {
    if (this._selectedJob !== null && !jobs.some(job => job.id === this._selectedJob)) {
      this._selectedJob = null;
      this._jobRecord = null;
    }
    this._jobs.update(jobs);
    this._jobsEmpty.hidden = jobs.length > 0;
  }

  private _upsertPool(pool: IPoolModel): void {
    const pools = this._pools.items.slice();
    const index = pools.findIndex(candidate => candidate.name === pool.name);
    if (index >= 0) {
      pools[index] = pool;
    } else {
      pools.push(pool);
    }
    this._showPools(pools);
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

  private _renderPool(pool: IPoolModel): HTMLElement {
    return renderPoolRow(
      pool,
      {
        expanded: this._expandedPools.has(pool.name),
        metrics: this._poolMetrics.get(pool.name) ?? null,
        stopping: this._stoppingPools.has(pool.name)
      },
      { commands: this._commands, onToggleDetails: name => this._togglePoolDetails(name) }
    );
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
      id => void this._toggleJob(id)
    );
  }

  private async _toggleJob(id: string): Promise<void> {
    const previous = this._selectedJob;
    this._selectedJob = previous === id ? null : id;
    this._jobRecord = null;
    this._jobRecordError = null;
    if (previous !== null) {
      this._jobs.rerender(previous);
    }
    if (this._selectedJob === null) {
      return;
    }
    this._jobs.rerender(id);
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
    this._jobs.rerender(id);
  }
}
