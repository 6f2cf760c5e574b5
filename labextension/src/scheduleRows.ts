/**
 * Schedules as the server describes them, and the text of their rows in the
 * schedules sidebar: pure (no DOM), so every rule is unit-tested.
 */

/** One run of a schedule, as the server describes it. */
export interface IScheduleRunModel {
  id: number;
  due_at: number;
  status: string;
  missed: number;
  job_id: string | null;
  pool: string | null;
  resumed_from: string | null;
  reason: string | null;
  started_at: number | null;
  ended_at: number | null;
  cost_usd: number | null;
}

/** A schedule, as `GET /gpugeek/schedules` lists it. */
export interface IScheduleModel {
  id: string;
  name: string;
  status: string;
  reason: string | null;
  when: string;
  next_run_at: number | null;
  pool: string | null;
  last_run: IScheduleRunModel | null;
}

/** The text of one row's cells: pure, so every rule is unit-tested. */
export interface IScheduleRow {
  name: string;
  status: string;
  when: string;
  next: string;
  last: string;
}

/** `now`, `in 42s`, `in 3h 05m`, or a dash when no run is coming (paused). */
export function formatNextRun(nextRunAt: number | null, nowSeconds: number): string {
  if (nextRunAt === null) {
    return '–';
  }
  const left = Math.round(nextRunAt - nowSeconds);
  if (left <= 1) {
    return 'now';
  }
  const days = Math.floor(left / 86400);
  const hours = Math.floor((left % 86400) / 3600);
  const minutes = Math.floor((left % 3600) / 60);
  const pad = (n: number): string => String(n).padStart(2, '0');
  if (days > 0) {
    return `in ${days}d ${pad(hours)}h`;
  }
  if (hours > 0) {
    return `in ${hours}h ${pad(minutes)}m`;
  }
  return minutes > 0 ? `in ${minutes}m ${pad(left % 60)}s` : `in ${left}s`;
}

export function scheduleRow(model: IScheduleModel, nowSeconds: number): IScheduleRow {
  const last = model.last_run;
  let lastText = 'no run yet';
  if (last) {
    const cost = last.cost_usd === null ? '' : `, $${last.cost_usd.toFixed(4)}`;
    lastText = `${last.status}${last.job_id ? ` (${last.job_id}${cost})` : ''}`;
  }
  return {
    name: model.name,
    status: model.status === 'paused' && model.reason ? `paused: ${model.reason}` : model.status,
    when: model.when,
    next: formatNextRun(model.next_run_at, nowSeconds),
    last: lastText
  };
}

/** What a row's button does: pause or resume it (by its status), or delete it (confirmed first). */
export type ScheduleAction = 'pause' | 'resume' | 'delete';

/** The row's buttons, in order: Pause for an active schedule, Resume for a paused one, then Delete. */
export function scheduleActions(model: IScheduleModel): ScheduleAction[] {
  return [model.status === 'paused' ? 'resume' : 'pause', 'delete'];
}

/** A button's label. */
export function actionLabel(action: ScheduleAction): string {
  return action === 'pause' ? 'Pause' : action === 'resume' ? 'Resume' : 'Delete';
}
