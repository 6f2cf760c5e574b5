import {
  cancelView,
  formatRanks,
  IJobCancelState,
  IJobOutputState,
  IJobWhereState,
  isScrolledToBottom,
  JobCancelTracker,
  JobOutputTracker,
  JobWhereTracker,
  jobStatusText,
  jobOutputView,
  rankChips,
  slowRankText,
  wantsOutput,
  whereView
} from '../src/jobView';
import { IJobOutput, IWhereReport } from '../src/models';
import { makeJob, makeJobOutput, makeWhereReport } from './fixtures';

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

describe('cancelView', () => {
  it('offers Cancel on every job that runs or waits, never on an ended one', () => {
    expect(cancelView(makeJob({ status: 'running', detached: true }), null)).toEqual({
      button: true,
      label: 'Cancel',
      title: 'Stop this detached job on every rank (a queued one leaves the queue)',
      disabled: false,
      error: null
    });
    expect(cancelView(makeJob({ status: 'queued', detached: true }), null).button).toBe(true);
    const attached = cancelView(makeJob({ status: 'running', detached: false, submitter: 'notebook a.ipynb' }), null);
    expect(attached.button).toBe(true);
    expect(attached.title).toBe('Stop this job of notebook a.ipynb on every rank (a queued one leaves the queue)');
    for (const status of ['succeeded', 'failed', 'cancelled'] as const) {
      expect(cancelView(makeJob({ status, detached: true }), null).button).toBe(false);
      expect(cancelView(makeJob({ status, detached: false }), null).button).toBe(false);
    }
  });

  it('says it is cancelling while the request is out, and why it failed while the job still runs', () => {
    const job = makeJob({ status: 'running', detached: true });
    expect(cancelView(job, { asking: true, error: null })).toMatchObject({
      label: 'Cancelling…',
      disabled: true
    });
    expect(cancelView(job, { asking: false, error: 'Could not cancel the job: gone' }).error).toBe(
      'Could not cancel the job: gone'
    );
    expect(
      cancelView(makeJob({ status: 'cancelled', detached: true }), { asking: false, error: 'x' }).error
    ).toBeNull();
  });
});

describe('JobCancelTracker', () => {
  it('cancels through the server once, redrawing the row before and after, and keeps a failure', async () => {
    const cancelled: string[] = [];
    const seen: (IJobCancelState | null)[] = [];
    const tracker: JobCancelTracker = new JobCancelTracker(
      async id => {
        cancelled.push(id);
        if (id === 'job-2') {
          throw new Error('409 the job has ended');
        }
      },
      id => seen.push(tracker.state(id))
    );
    const first = tracker.cancel('job-1');
    void tracker.cancel('job-1'); // a second click while the first is out: ignored
    await first;
    await tracker.cancel('job-2');
    expect(cancelled).toEqual(['job-1', 'job-2']);
    expect(seen).toEqual([
      { asking: true, error: null },
      { asking: false, error: null },
      { asking: true, error: null },
      { asking: false, error: 'Could not cancel the job: 409 the job has ended' }
    ]);
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

/** An output view state as the tracker keeps it. */
function outputState(overrides: Partial<IJobOutputState> = {}): IJobOutputState {
  return {
    fetching: false,
    output: makeJobOutput(),
    error: null,
    follow: true,
    seenRunning: true,
    ...overrides
  };
}

describe('rankChips', () => {
  it('names ranks as the tail labels them', () => {
    expect(formatRanks([3])).toBe('rank 3');
    expect(formatRanks([0, 1, 2, 3, 4, 5, 6, 7])).toBe('ranks 0-7');
    expect(formatRanks([5, 0, 1, 2, 3])).toBe('ranks 0-3,5');
  });

  it('groups ranks by state, in the order of their lowest rank', () => {
    const ranks = [7, 0, 1, 2, 3, 4, 5, 6].map(rank => ({
      rank,
      state: rank === 7 ? 'failed' : 'running'
    }));
    expect(rankChips(ranks).map(chip => chip.label)).toEqual(['ranks 0-6 running', 'rank 7 failed']);
    expect(rankChips(ranks)[1]).toEqual({ label: 'rank 7 failed', state: 'failed', ranks: [7] });
  });

  it('gives every rank of one state a single chip, however many', () => {
    const ranks = Array.from({ length: 64 }, (_, rank) => ({ rank, state: 'done' }));
    expect(rankChips(ranks)).toEqual([{ label: 'ranks 0-63 done', state: 'done', ranks: ranks.map(r => r.rank) }]);
    expect(rankChips([])).toEqual([]);
  });

  it('keeps ranks of one state together when others lie between them', () => {
    const ranks = [
      { rank: 0, state: 'running' },
      { rank: 1, state: 'died' },
      { rank: 2, state: 'running' }
    ];
    expect(rankChips(ranks).map(chip => chip.label)).toEqual(['ranks 0,2 running', 'rank 1 died']);
  });
});

describe('jobOutputView', () => {
  it("shows a running job's chips and grouped tail", () => {
    expect(jobOutputView(makeJob({ status: 'running' }), outputState(), false)).toEqual({
      shown: true,
      chips: [{ label: 'ranks 0-1 running', state: 'running', ranks: [0, 1] }],
      tail: '[ranks 0-1] step 1\n[ranks 0-1] step 2\n[rank 1] warning: slow batch',
      note: null,
      error: null
    });
  });

  it('says it is loading before the first answer, and when the job printed nothing yet', () => {
    const job = makeJob({ status: 'running' });
    expect(jobOutputView(job, null, false)).toMatchObject({ shown: true, tail: null, note: 'Loading output…' });
    const quiet = outputState({ output: makeJobOutput({ tail: '' }) });
    expect(jobOutputView(job, quiet, false)).toMatchObject({ tail: null, note: 'No output yet.' });
  });

  it('shows an ended job only when selected, unless its row showed it running', () => {
    const ended = makeJob({ status: 'succeeded' });
    const fetched = outputState({ seenRunning: false, output: makeJobOutput({ status: 'succeeded' }) });
    expect(jobOutputView(ended, null, false).shown).toBe(false);
    expect(jobOutputView(ended, fetched, false).shown).toBe(false);
    expect(jobOutputView(ended, fetched, true).shown).toBe(true);
    const watched = outputState({
      output: makeJobOutput({ status: 'succeeded', ranks: [{ rank: 0, state: 'done' }, { rank: 1, state: 'done' }] })
    });
    expect(jobOutputView(ended, watched, false)).toMatchObject({
      shown: true,
      chips: [{ label: 'ranks 0-1 done' }]
    });
  });

  it('keeps the last tail under an error, and says the error', () => {
    const view = jobOutputView(makeJob(), outputState({ error: 'Could not load the output: gone' }), false);
    expect(view).toMatchObject({ tail: expect.stringContaining('step 2'), error: 'Could not load the output: gone' });
    expect(jobOutputView(makeJob(), outputState({ output: null, error: 'x' }), false).note).toBeNull();
  });
});

describe('wantsOutput', () => {
  const running = makeJob({ status: 'running' });
  const ended = makeJob({ status: 'failed' });

  it('fetches a running job on every poll while its row is on screen or selected', () => {
    expect(wantsOutput(running, outputState(), true, false)).toBe(true);
    expect(wantsOutput(running, outputState(), false, true)).toBe(true);
    expect(wantsOutput(running, outputState(), false, false)).toBe(false);
    expect(wantsOutput(running, outputState({ fetching: true }), true, true)).toBe(false);
  });

  it('fetches an ended job once when selected, and no other ended job', () => {
    expect(wantsOutput(ended, null, true, false)).toBe(false);
    expect(wantsOutput(ended, null, true, true)).toBe(true);
    const final = outputState({ seenRunning: false, output: makeJobOutput({ status: 'failed' }) });
    expect(wantsOutput(ended, final, true, true)).toBe(false);
  });

  it('fetches once more a job seen running that has ended, for its final states', () => {
    expect(wantsOutput(ended, outputState(), true, false)).toBe(true);
    const final = outputState({ output: makeJobOutput({ status: 'failed' }) });
    expect(wantsOutput(ended, final, true, false)).toBe(false);
    expect(wantsOutput(ended, outputState({ error: 'gone' }), true, false)).toBe(false);
  });
});

describe('JobOutputTracker', () => {
  it('keeps the last answer per job and redraws the row when it arrives', async () => {
    const output = makeJobOutput();
    const asked: string[] = [];
    const changed: (IJobOutputState | null)[] = [];
    const tracker: JobOutputTracker = new JobOutputTracker(
      async id => {
        asked.push(id);
        return output;
      },
      id => changed.push(tracker.state(id))
    );
    await tracker.fetch('job-1');
    expect(asked).toEqual(['job-1']);
    expect(changed).toEqual([{ fetching: false, output, error: null, follow: true, seenRunning: true }]);
    expect(tracker.state('job-2')).toBeNull();
  });

  it('fetches once while a request is in flight', async () => {
    let resolve!: (output: IJobOutput) => void;
    let calls = 0;
    const tracker = new JobOutputTracker(
      () => {
        calls += 1;
        return new Promise<IJobOutput>(res => (resolve = res));
      },
      () => undefined
    );
    const first = tracker.fetch('job-1');
    await tracker.fetch('job-1');
    resolve(makeJobOutput());
    await first;
    expect(calls).toBe(1);
    expect(tracker.state('job-1')?.fetching).toBe(false);
  });

  it('keeps the last output and says why a request failed', async () => {
    const answers: (IJobOutput | Error)[] = [makeJobOutput(), new Error('no answer from the Jupyter server')];
    const tracker = new JobOutputTracker(async () => {
      const answer = answers.shift()!;
      if (answer instanceof Error) {
        throw answer;
      }
      return answer;
    }, () => undefined);
    await tracker.fetch('job-1');
    await tracker.fetch('job-1');
    expect(tracker.state('job-1')).toMatchObject({
      output: makeJobOutput(),
      error: 'Could not load the output: no answer from the Jupyter server'
    });
  });

  it('stops following the newest line once the user scrolled up, and follows again at the bottom', async () => {
    const tracker = new JobOutputTracker(async () => makeJobOutput(), () => undefined);
    expect(tracker.follows('job-1')).toBe(true);
    await tracker.fetch('job-1');
    tracker.setFollow('job-1', isScrolledToBottom({ scrollTop: 10, scrollHeight: 300, clientHeight: 100 }));
    expect(tracker.follows('job-1')).toBe(false);
    await tracker.fetch('job-1');
    expect(tracker.follows('job-1')).toBe(false);
    tracker.setFollow('job-1', isScrolledToBottom({ scrollTop: 200, scrollHeight: 300, clientHeight: 100 }));
    expect(tracker.follows('job-1')).toBe(true);
  });

  it('forgets jobs that are no longer listed', async () => {
    const tracker = new JobOutputTracker(async () => makeJobOutput(), () => undefined);
    await tracker.fetch('job-1');
    await tracker.fetch('job-2');
    tracker.keepOnly(['job-2']);
    expect(tracker.state('job-1')).toBeNull();
    expect(tracker.state('job-2')).not.toBeNull();
  });
});

describe('jobStatusText', () => {
  it("shows a queued job's place in its pool's queue", () => {
    expect(jobStatusText(makeJob({ status: 'queued', position: 2 }))).toBe('queued #2');
  });

  it('shows any other job by its status', () => {
    expect(jobStatusText(makeJob({ status: 'running' }))).toBe('running');
    expect(jobStatusText(makeJob({ status: 'cancelled', position: null }))).toBe('cancelled');
  });
});

describe('slowRankText', () => {
  it("drops the job's id that starts the line, and keeps a line without one", () => {
    const line =
      'job job-3f2a9c7b: rank 1 (host gpu-b) is slower than the others: 61.3 ms a step; likely cause: ...';
    expect(slowRankText(line)).toBe('rank 1 (host gpu-b) is slower than the others: 61.3 ms a step; likely cause: ...');
    expect(slowRankText('rank 1 is slower')).toBe('rank 1 is slower');
  });
});
