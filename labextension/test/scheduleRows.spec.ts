import { actionLabel, formatNextRun, IScheduleModel, scheduleActions, scheduleRow } from '../src/scheduleRows';

const NOW = 1_800_000_000;

function makeSchedule(changes: Partial<IScheduleModel> = {}): IScheduleModel {
  return {
    id: 'sched-1a2b3c4d',
    name: 'daily',
    status: 'active',
    reason: null,
    when: 'every 1d',
    next_run_at: NOW + 3 * 3600 + 5 * 60,
    pool: null,
    last_run: null,
    ...changes
  };
}

describe('next run', () => {
  it('counts down in the largest units that matter', () => {
    expect(formatNextRun(NOW + 42, NOW)).toBe('in 42s');
    expect(formatNextRun(NOW + 125, NOW)).toBe('in 2m 05s');
    expect(formatNextRun(NOW + 3 * 3600 + 5 * 60, NOW)).toBe('in 3h 05m');
    expect(formatNextRun(NOW + 2 * 86400 + 3600, NOW)).toBe('in 2d 01h');
  });

  it('says now for a run due, and a dash when none is coming', () => {
    expect(formatNextRun(NOW - 5, NOW)).toBe('now');
    expect(formatNextRun(null, NOW)).toBe('–');
  });
});

describe('a schedule row', () => {
  it('shows when, the next run and that no run came yet', () => {
    expect(scheduleRow(makeSchedule(), NOW)).toEqual({
      name: 'daily',
      status: 'active',
      when: 'every 1d',
      next: 'in 3h 05m',
      last: 'no run yet'
    });
  });

  it("shows the last run's outcome, job and cost, and why a schedule is paused", () => {
    const row = scheduleRow(
      makeSchedule({
        status: 'paused',
        reason: 'paused after 3 failed runs in a row (the last: exit code 1)',
        next_run_at: null,
        last_run: {
          id: 7,
          due_at: NOW - 60,
          status: 'failed',
          missed: 0,
          job_id: 'job-0000beef',
          pool: 'daily-7',
          resumed_from: null,
          reason: 'exit code 1',
          started_at: NOW - 60,
          ended_at: NOW - 30,
          cost_usd: 0.00042
        }
      }),
      NOW
    );
    expect(row.status).toBe('paused: paused after 3 failed runs in a row (the last: exit code 1)');
    expect(row.next).toBe('–');
    expect(row.last).toBe('failed (job-0000beef, $0.0004)');
  });
});

describe("a schedule row's buttons", () => {
  it('pause an active schedule, resume a paused one, and always delete', () => {
    expect(scheduleActions(makeSchedule())).toEqual(['pause', 'delete']);
    expect(scheduleActions(makeSchedule({ status: 'paused', next_run_at: null }))).toEqual(['resume', 'delete']);
    expect(['pause', 'resume', 'delete'].map(a => actionLabel(a as never))).toEqual(['Pause', 'Resume', 'Delete']);
  });
});
