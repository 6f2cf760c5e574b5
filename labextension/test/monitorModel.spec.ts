import { deviceKey, MonitorSeries, polylinePoints } from '../src/monitorModel';

const T = 1_764_700_000;

function cpu(t: number, rank: string, cpuPct: number): Record<string, unknown> {
  return { time: t, worker_name: rank, gpu: -1, cpu_pct: cpuPct, rss_bytes: 2 ** 30, sm_util_pct: null };
}

describe('MonitorSeries', () => {
  it('keeps each device series over the window and drops what is older', () => {
    const series = new MonitorSeries(300);
    series.add([cpu(T, '0', 10), cpu(T, '1', 20)]);
    series.add([cpu(T + 200, '0', 30), cpu(T + 200, '1', 40)]);
    series.add([cpu(T + 400, '0', 50), cpu(T + 400, '1', 60)]);
    expect(series.series('cpu_pct')).toEqual([
      ['rank 0', [{ t: T + 200, v: 30 }, { t: T + 400, v: 50 }]],
      ['rank 1', [{ t: T + 200, v: 40 }, { t: T + 400, v: 60 }]]
    ]);
    expect(series.series('rss_bytes')[0][1][0].v).toBe(1); // GiB
  });

  it('adds a sample answered twice once, and shows only the metrics that have points', () => {
    const series = new MonitorSeries();
    series.add([cpu(T, '0', 10)]);
    series.add([cpu(T, '0', 10)]);
    expect(series.series('cpu_pct')[0][1]).toHaveLength(1);
    expect(series.shown().map(m => m.title)).toEqual(['CPU', 'Memory (RSS)']);
  });

  it('orders devices by rank as numbers and names a worker GPU', () => {
    const series = new MonitorSeries();
    series.add([cpu(T, '10', 1), cpu(T, '2', 1)]);
    expect(series.series('cpu_pct').map(([d]) => d)).toEqual(['rank 2', 'rank 10']);
    expect(deviceKey({ worker_name: '0', gpu: 1 })).toBe('rank 0 gpu 1');
  });
});

describe('polylinePoints', () => {
  it('maps time to x and value to y from the bottom, capped at the top', () => {
    const points = [
      { t: 0, v: 0 },
      { t: 50, v: 50 },
      { t: 100, v: 150 }
    ];
    expect(polylinePoints(points, 0, 100, 100, 200, 100)).toBe('0.0,100.0 100.0,50.0 200.0,0.0');
  });
});
