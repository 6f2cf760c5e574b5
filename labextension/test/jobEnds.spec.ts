import { endMessage, JobEndWatcher, orderJobs } from '../src/jobEnds';
import { makeJob } from './fixtures';

describe('orderJobs', () => {
  it('lists running detached jobs first, then other open jobs, then ended ones, each as listed', () => {
    const jobs = [
      makeJob({ id: 'ended', status: 'succeeded' }),
      makeJob({ id: 'attached', status: 'running' }),
      makeJob({ id: 'detached', status: 'running', detached: true }),
      makeJob({ id: 'queued', status: 'queued', position: 1, detached: true })
    ];
    expect(orderJobs(jobs).map(job => job.id)).toEqual(['detached', 'queued', 'attached', 'ended']);
  });
});

describe('JobEndWatcher', () => {
  it('tells once when a detached job it saw running has ended', () => {
    const watcher = new JobEndWatcher();
    expect(watcher.ended([makeJob({ id: 'j', status: 'running', detached: true })])).toEqual([]);
    const ended = makeJob({ id: 'j', status: 'failed', detached: true, failure_reason: 'rank 1: boom' });
    expect(watcher.ended([ended]).map(job => job.id)).toEqual(['j']);
    expect(watcher.ended([ended])).toEqual([]);
  });

  it('says nothing of jobs that had ended before it saw them, nor of attached jobs', () => {
    const watcher = new JobEndWatcher();
    expect(watcher.ended([makeJob({ status: 'succeeded', detached: true })])).toEqual([]);
    watcher.ended([makeJob({ id: 'a', status: 'running' })]);
    expect(watcher.ended([makeJob({ id: 'a', status: 'succeeded' })])).toEqual([]);
  });
});

describe('endMessage', () => {
  it('says the outcome, and the failure when there is one', () => {
    expect(endMessage(makeJob({ id: 'j', pool: 'train', status: 'succeeded' }))).toBe(
      'Job j on pool train succeeded'
    );
    expect(
      endMessage(makeJob({ id: 'j', pool: 'train', status: 'failed', failure_reason: 'rank 1: boom' }))
    ).toBe('Job j on pool train failed: rank 1: boom');
  });
});
