/**
 * One row of the jobs list; a selected row also shows the job's record.
 */

import { h } from './dom';
import {
  formatDuration,
  formatTimestamp,
  formatUsd,
  hyperparamRows,
  shortHash
} from './format';
import { IJobModel } from './models';
import { renderKeyValues } from './poolView';

export interface IJobRowState {
  selected: boolean;
  /** The record from `GET /gpugeek/jobs/{id}`, once fetched. */
  record: IJobModel | null;
  /** Why the record could not be fetched. */
  error: string | null;
}

export function renderJobRow(
  job: IJobModel,
  state: IJobRowState,
  onToggle: (id: string) => void
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
      h('span', { class: `gpugeek-status gpugeek-status-${job.status}`, text: job.status }),
      h('span', { class: 'gpugeek-job-ranks', text: `${job.ranks} ranks` }),
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
    [summary, state.selected && renderJobRecord(state.record ?? job, state)]
  );
}

function renderJobRecord(job: IJobModel, state: IJobRowState): HTMLElement {
  const rows: [string, string][] = [
    ['Job', job.id],
    ['Pool', job.pool],
    ['Status', job.status],
    ['Ranks', String(job.ranks)],
    ['Started', formatTimestamp(job.started_at)],
    ['Ended', formatTimestamp(job.ended_at)],
    ['Duration', formatDuration(job.duration_s)],
    ['Cost', formatUsd(job.usd)]
  ];
  if (job.failure_reason) {
    rows.push(['Failure', job.failure_reason]);
  }
  const params = hyperparamRows(job.hyperparams);
  return h('div', { class: 'gpugeek-job-detail' }, [
    state.error && h('div', { class: 'gpugeek-job-error', text: state.error }),
    renderKeyValues(rows),
    h('div', { class: 'gpugeek-job-code' }, [
      'Code SHA-256 ',
      h('code', {
        class: 'gpugeek-job-code-sha',
        text: job.code_sha256 ?? '–',
        title: job.code_sha256 ? `short: ${shortHash(job.code_sha256)}` : ''
      })
    ]),
    h('div', { class: 'gpugeek-job-hyperparams' }, [
      h('div', { class: 'gpugeek-subheading', text: 'Hyperparameters' }),
      params.length > 0
        ? renderKeyValues(params)
        : h('div', { class: 'gpugeek-muted', text: 'none recorded' })
    ])
  ]);
}
