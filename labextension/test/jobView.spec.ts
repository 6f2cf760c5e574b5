import { IJobWhereState, JobWhereTracker, whereView } from '../src/jobView';
import { IWhereReport } from '../src/models';
import { makeJob, makeWhereReport } from './fixtures';

/** A request the test answers when it chooses. */
function pending(): {
  promise: Promise<IWhereReport>;
  resolve: (report: IWhereReport) => void;
  reject: (error: Error) => void;
} {
  let resolve!: (report: IWhereReport) => void;
  let reject!: (error: Error) => void;
  const promise = new Promise<IWhereReport>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe('whereView', () => {
  it('gives a running job a Where button and no other job one', () => {
    expect(whereView(makeJob({ status: 'running' }), null)).toEqual({
      button: true,
      label: 'Where',
      disabled: false,
      text: null,
      error: null
    });
    for (const status of ['pending', 'succeeded', 'failed', 'cancelled'] as const) {
      expect(whereView(makeJob({ status }), null).button).toBe(false);
    }
  });

  it('disables the button while asking and shows the grouped text once answered', () => {
    const job = makeJob({ status: 'running' });
    const asking: IJobWhereState = { asking: true, text: null, error: null };
    expect(whereView(job, asking)).toMatchObject({ label: 'Asking…', disabled: true });
    const answered: IJobWhereState = { asking: false, text: 'rank 0 at cell:3', error: null };
    expect(whereView(job, answered)).toMatchObject({
      label: 'Where',
      disabled: false,
      text: 'rank 0 at cell:3'
    });
  });

  it('no longer shows a report once the job has ended', () => {
    const answered: IJobWhereState = { asking: false, text: 'rank 0 at cell:3', error: 'old' };
    expect(whereView(makeJob({ status: 'succeeded' }), answered)).toMatchObject({
      button: false,
      text: null,
      error: null
    });
  });
});

describe('JobWhereTracker', () => {
  it('asks the server for the job and keeps its grouped text, redrawing the row before and after', async () => {
    const report = makeWhereReport();
    const asked: string[] = [];
    const changed: (IJobWhereState | null)[] = [];
    const tracker: JobWhereTracker = new JobWhereTracker(
      async id => {
        asked.push(id);
        return report;
      },
      id => changed.push(tracker.state(id))
    );
    await tracker.ask('job-1');
    expect(asked).toEqual(['job-1']);
    expect(changed).toEqual([
      { asking: true, text: null, error: null },
      { asking: false, text: report.text, error: null }
    ]);
    expect(tracker.state('job-1')?.text).toBe(report.text);
    expect(tracker.state('job-2')).toBeNull();
  });

  it('asks once while a request is in flight', async () => {
    const answer = pending();
    let calls = 0;
    const tracker = new JobWhereTracker(
      () => {
        calls += 1;
        return answer.promise;
      },
      () => undefined
    );
    const first = tracker.ask('job-1');
    await tracker.ask('job-1');
    answer.resolve(makeWhereReport());
    await first;
    expect(calls).toBe(1);
    expect(tracker.state('job-1')?.asking).toBe(false);
  });

  it("shows the server's reason when it cannot say, e.g. the job just ended", async () => {
    const tracker = new JobWhereTracker(
      () => Promise.reject(new Error('job "job-1" is not running (it is succeeded)')),
      () => undefined
    );
    await tracker.ask('job-1');
    expect(tracker.state('job-1')).toEqual({
      asking: false,
      text: null,
      error: 'Could not ask where the ranks are: job "job-1" is not running (it is succeeded)'
    });
  });

  it('forgets jobs that are no longer listed', async () => {
    const tracker = new JobWhereTracker(async () => makeWhereReport(), () => undefined);
    await tracker.ask('job-1');
    await tracker.ask('job-2');
    tracker.keepOnly(['job-2']);
    expect(tracker.state('job-1')).toBeNull();
    expect(tracker.state('job-2')).not.toBeNull();
  });
});
