import { deviceKey, MonitorSeries, polylinePoints, windowLabel } from '../src/monitorModel';

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

  it('takes older samples in time order when the window widens, each time once, and knows the newest', () => {
    const series = new MonitorSeries(60);
    series.add([cpu(T + 100, '0', 3), cpu(T + 110, '0', 4)]);
    expect(series.newest).toBe(T + 110);
    series.windowS = 600;
    series.add([cpu(T, '0', 1), cpu(T + 50, '0', 2), cpu(T + 100, '0', 3), cpu(T + 110, '0', 4)]);
    expect(series.series('cpu_pct')[0][1].map(p => p.v)).toEqual([1, 2, 3, 4]);
    expect(series.newest).toBe(T + 110);
    series.windowS = 60; // narrowed: the next answer trims what is older than the window
    series.add([cpu(T + 120, '0', 5)]);
    expect(series.series('cpu_pct')[0][1].map(p => p.v)).toEqual([3, 4, 5]);
  });

  it("draws a GPU's PCIe and NVLink traffic when its samples have them", () => {
    const series = new MonitorSeries();
    series.add([{ time: T, worker_name: '0', gpu: 0, sm_util_pct: 50, pcie_rx_mb_s: 120, nvlink_tx_mb_s: 900 }]);
    expect(series.shown().map(m => m.title)).toEqual(['GPU SM', 'PCIe receive', 'NVLink transmit']);
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

describe('windowLabel', () => {
  it('names windows in minutes and hours', () => {
    expect([60, 300, 600, 3600, 7200].map(windowLabel)).toEqual([
      '1 minute',
      '5 minutes',
      '10 minutes',
      '1 hour',
      '2 hours'
    ]);
  });
});
