/**
 * The user's schedules (scheduled runs kept by the agent), in a sidebar of
 * their own: name, status, when, the next run and the last run's outcome,
 * job and cost, from `GET /gpugeek/schedules`; refreshed by a Lumino `Poll`
 * that backs off on failures and pauses while the sidebar is hidden. Each row
 * has Pause (or Resume) and Delete; Delete asks first, with Cancel the default.
 */

import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { IPoll, Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { GpugeekApi, RequestFn } from './api';
import { actionLabel, IScheduleModel, ScheduleAction, scheduleActions, scheduleRow } from './scheduleRows';

export const SCHEDULES_PANEL_ID = 'gpugeek-schedules-panel';
const REFRESH_MS = 5000;

export class SchedulesPanel extends Widget {
  private readonly _poll: Poll;
  private readonly _body: HTMLElement;
  private readonly _status: HTMLElement;
  private readonly _api: GpugeekApi;

  constructor(private readonly request: RequestFn) {
    super();
    this._api = new GpugeekApi(request);
    this.id = SCHEDULES_PANEL_ID;
    this.addClass('gpugeek-schedules');
    this.node.style.padding = '0 8px';
    this.node.style.overflowY = 'auto';
    const title = document.createElement('h2');
    title.textContent = 'Schedules';
    this._status = document.createElement('div');
    this._status.className = 'gpugeek-schedules-status';
    this._body = document.createElement('div');
    this._body.className = 'gpugeek-schedules-list';
    this.node.append(title, this._status, this._body);
    this._poll = new Poll({
      factory: () => this.refresh(),
      frequency: { interval: REFRESH_MS, backoff: true, max: 60_000 } as IPoll.Frequency,
      standby: () => (this.isVisible ? 'when-hidden' : true)
    });
  }

  dispose(): void {
    this._poll.dispose();
    super.dispose();
  }

  /** Read the schedules now and show them. */
  async refresh(): Promise<void> {
    let models: IScheduleModel[];
    try {
      const response = await this.request('gpugeek/schedules', { method: 'GET' });
      if (!response.ok) {
        throw new Error(`the server answered ${response.status}`);
      }
      models = ((await response.json()) as { schedules: IScheduleModel[] }).schedules;
    } catch (error) {
      this._status.textContent = `Schedules unavailable: ${(error as Error).message} (is the gpugeek server extension installed?)`;
      throw error; // the poll backs off
    }
    this._status.textContent = models.length ? '' : 'No schedules: make one with %%gpugeek_schedule --every 1d';
    this.render(models, Date.now() / 1000);
  }

  private render(models: IScheduleModel[], nowSeconds: number): void {
    this._body.replaceChildren(
      ...models.map(model => {
        const row = scheduleRow(model, nowSeconds);
        const item = document.createElement('div');
        item.className = 'gpugeek-schedule';
        item.dataset.schedule = model.name;
        item.style.padding = '4px 0';
        item.style.borderBottom = '1px solid var(--jp-border-color2)';
        for (const [key, text] of Object.entries(row)) {
          const cell = document.createElement('span');
          cell.className = `gpugeek-schedule-${key}`;
          cell.style.display = key === 'name' ? 'block' : 'inline-block';
          cell.style.marginRight = '8px';
          cell.style.fontWeight = key === 'name' ? 'bold' : 'normal';
          cell.textContent = key === 'next' ? `next run ${text}` : key === 'last' ? `last run ${text}` : text;
          item.append(cell);
        }
        const buttons = document.createElement('div');
        buttons.className = 'gpugeek-schedule-actions';
        for (const action of scheduleActions(model)) {
          const button = document.createElement('button');
          button.className = `jp-mod-styled gpugeek-schedule-${action}`;
          button.textContent = actionLabel(action);
          button.onclick = () => void this.act(model, action);
          buttons.append(button);
        }
        item.append(buttons);
        return item;
      })
    );
  }

  /** Pause, resume or delete a schedule (delete asks first); resolves to whether it was done. */
  async act(model: IScheduleModel, action: ScheduleAction): Promise<boolean> {
    if (action === 'delete') {
      const result = await showDialog({
        title: `Delete schedule ${model.name}?`,
        body: 'No more runs start. A run going on now goes on; runs so far stay in the history.',
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete schedule' })],
        defaultButton: 0 // Enter keeps the schedule: the destructive choice takes a click
      });
      if (!result.button.accept) {
        return false;
      }
    }
    try {
      await this._api.actOnSchedule(model.id, action);
      return true;
    } catch (error) {
      await showErrorMessage(`Could not ${action} schedule ${model.name}`, error as Error);
      return false;
    } finally {
      void this._poll.refresh();
    }
  }

  protected onAfterShow(): void {
    void this._poll.refresh();
  }
}
