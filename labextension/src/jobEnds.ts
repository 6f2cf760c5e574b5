/**
 * Detached jobs in the panel: listed first while they run, and a notification when one ends,
 * since no notebook cell is there to say so.
 */
import { IJobModel, isJobFinal } from './models';

/** Jobs still queued or running first (detached ones before the others), then the rest, each as listed. */
export function orderJobs(jobs: readonly IJobModel[]): IJobModel[] {
  const rank = (job: IJobModel): number => (isJobFinal(job.status) ? 2 : job.detached ? 0 : 1);
  return jobs
    .map((job, index) => ({ job, index }))
    .sort((a, b) => rank(a.job) - rank(b.job) || a.index - b.index)
    .map(({ job }) => job);
}

/** What a detached job's end says: its outcome, and why it failed when it did. */
export function endMessage(job: IJobModel): string {
  const outcome = `Job ${job.id} on pool ${job.pool} ${job.status}`;
  return job.status === 'succeeded' || !job.failure_reason
    ? outcome
    : `${outcome}: ${job.failure_reason}`;
}

/**
 * Remembers the detached jobs seen open; `ended()` gives those that have ended since (once each).
 * Jobs that had ended before the panel first saw them are not news.
 */
export class JobEndWatcher {
  private readonly _open = new Set<string>();

  ended(jobs: readonly IJobModel[]): IJobModel[] {
    const news: IJobModel[] = [];
    for (const job of jobs) {
      if (!job.detached) {
        continue;
      }
      if (!isJobFinal(job.status)) {
        this._open.add(job.id);
      } else if (this._open.delete(job.id)) {
        news.push(job);
      }
    }
    return news;
  }
}
