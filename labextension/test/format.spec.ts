import {
  budgetBar,
  estimateUsdPerHour,
  firstLine,
  formatAgo,
  formatCapacitySplit,
  formatDuration,
  formatGpuSummary,
  formatOwner,
  formatUsd,
  formatUsdPerHour,
  formatUtilisation,
  hyperparamRows,
  shortHash,
  sparklinePoints
} from '../src/format';
import { CATALOG, makePool } from './fixtures';

describe('money', () => {
  it('shows cents from a dollar up, and two significant digits below', () => {
    expect(formatUsd(0.42)).toBe('$0.42');
    expect(formatUsd(0.2)).toBe('$0.20'); // a price per hour beside ...
    expect(formatUsd(0.00019)).toBe('$0.00019'); // ... what a young pool cost: one rule, not 4 and 6 decimals
    expect(formatUsd(0.015)).toBe('$0.015');
    expect(formatUsd(1234.5)).toBe('$1234.50');
    expect(formatUsd(0)).toBe('$0.00');
  });

  it('keeps a cost under a cent visible, as the notebook does', () => {
    expect(formatUsd(0.00421)).toBe('$0.0042');
  });

  it('shows a dash for an unknown amount', () => {
    expect(formatUsd(null)).toBe('–');
    expect(formatUsd(NaN)).toBe('–');
  });

  it('appends /h to hourly rates', () => {
    expect(formatUsdPerHour(9.5)).toBe('$9.50/h');
  });

  it('estimates a pool at list prices, blending spot and on-demand', () => {
    const a100 = CATALOG.gpu_types[0];
    expect(estimateUsdPerHour(a100, 4, 0)).toBe(12);
    expect(estimateUsdPerHour(a100, 4, 0.5)).toBe(8);
    expect(estimateUsdPerHour(a100, 4, 1)).toBe(4);
  });
});

describe('durations', () => {
  it.each([
    [0, '0s'],
    [0.004, '<0.1s'],
    [0.31, '0.3s'],
    [2, '2s'],
    [9.94, '9.9s'],
    [42, '42s'],
    [185, '3m 05s'],
    [7440, '2h 04m']
  ])('formats %p seconds as %p', (seconds, text) => {
    expect(formatDuration(seconds)).toBe(text);
  });

  it('shows a dash for a job that has not started', () => {
    expect(formatDuration(null)).toBe('–');
  });
});

describe('pool summaries', () => {
  it('shows the GPU type and count', () => {
    expect(formatGpuSummary(makePool())).toBe('A100 × 4');
  });

  it('splits capacity into spot, reserved and on-demand', () => {
    expect(formatCapacitySplit(makePool())).toBe('2 spot · 1 reserved · 1 on-demand');
  });

  it('rounds and clamps SM utilisation, and says n/a without samples', () => {
    expect(formatUtilisation(63.4)).toBe('63%');
    expect(formatUtilisation(140)).toBe('100%');
    expect(formatUtilisation(null)).toBe('n/a');
  });
});

describe('budget bar', () => {
  it('is absent without a budget', () => {
    expect(budgetBar(makePool({ budget_usd: null, budget_fraction: null }))).toBeNull();
  });

  it('fills by the budget fraction', () => {
    expect(budgetBar(makePool({ usd_so_far: 5, budget_usd: 10, budget_fraction: 0.5 }))).toEqual({
      fill: 0.5,
      level: 'ok',
      label: '$5.00 of $10.00 budget (50%)'
    });
  });

  it('warns from 80% and turns red when spent, without overflowing', () => {
    expect(budgetBar(makePool({ budget_fraction: 0.85 }))?.level).toBe('warn');
    const over = budgetBar(makePool({ usd_so_far: 12, budget_usd: 10, budget_fraction: 1.2 }));
    expect(over?.level).toBe('over');
    expect(over?.fill).toBe(1);
  });

  it('computes the fraction itself when the server leaves it out', () => {
    expect(budgetBar(makePool({ usd_so_far: 2, budget_usd: 8, budget_fraction: null }))?.fill).toBe(0.25);
  });
});

describe('sparkline', () => {
  it('is empty without samples', () => {
    expect(sparklinePoints([], 120, 24)).toBe('');
  });

  it('spans the width with 100% at the top', () => {
    expect(sparklinePoints([0, 50, 100], 120, 24)).toBe('0,24 60,12 120,0');
  });

  it('draws one sample as a flat line', () => {
    expect(sparklinePoints([50], 100, 20)).toBe('0,10 100,10');
  });

  it('clamps out-of-range samples and skips non-numbers', () => {
    expect(sparklinePoints([-10, NaN, 150], 10, 10)).toBe('0,10 10,0');
  });
});

describe('job records', () => {
  it('sorts hyperparameters and shows non-strings as JSON', () => {
    expect(hyperparamRows({ lr: 0.001, arch: 'resnet', layers: [1, 2] })).toEqual([
      ['arch', 'resnet'],
      ['layers', '[1,2]'],
      ['lr', '0.001']
    ]);
  });

  it('shortens hashes to 12 digits', () => {
    expect(shortHash('0123456789abcdef')).toBe('0123456789ab');
    expect(shortHash(null)).toBe('–');
  });
});

describe('when a pool ended', () => {
  const now = Date.parse('2026-11-30T12:00:00Z');

  it('says how long ago, coarsely', () => {
    expect(formatAgo('2026-11-30T11:59:30Z', now)).toBe('just now');
    expect(formatAgo('2026-11-30T11:55:00Z', now)).toBe('5 min ago');
    expect(formatAgo('2026-11-30T09:00:00Z', now)).toBe('3 h ago');
    expect(formatAgo('2026-11-29T00:00:00Z', now)).toBe('36 h ago');
    expect(formatAgo('2026-11-20T12:00:00Z', now)).toBe('10 d ago');
  });

  it('treats a time ahead of the clock as just now, and shows a dash for none', () => {
    expect(formatAgo('2026-11-30T12:05:00Z', now)).toBe('just now');
    expect(formatAgo(null, now)).toBe('–');
    expect(formatAgo('not a time', now)).toBe('not a time');
  });
});

describe('firstLine', () => {
  it('keeps a short one-line text as it is', () => {
    expect(firstLine('no heartbeat for 30 s')).toBe('no heartbeat for 30 s');
  });

  it('marks a cut with an ellipsis: more lines, or too long', () => {
    expect(firstLine('\nworker failed\nTraceback ...')).toBe('worker failed…');
    expect(firstLine('x'.repeat(200), 10)).toBe('xxxxxxxxx…');
  });
});

describe('formatOwner', () => {
  it('names the notebook a pool was launched from, not its kernel id', () => {
    expect(formatOwner(makePool({ owner: 'kernel 5f0c9e2a-1b', owner_label: 'notebook train.ipynb' }))).toBe(
      'notebook train.ipynb'
    );
  });

  it('falls back to the process when there was no notebook', () => {
    expect(formatOwner(makePool({ owner: 'server', owner_label: null }))).toBe('server');
    expect(formatOwner({ owner: 'pid 4242' })).toBe('pid 4242');
  });
});
