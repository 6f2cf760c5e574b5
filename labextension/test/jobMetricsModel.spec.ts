import { formatValue, IJobMetricRow, metricCharts } from '../src/jobMetricsModel';

function row(rank: number, step: number, name: string, value: number | null, attempt = 0): IJobMetricRow {
  return { attempt, rank, step, time: 100 + step, name, value };
}

describe('metricCharts', () => {
  it('draws one chart per name, a line per rank in step order, from the newest attempt', () => {
    const charts = metricCharts({
      job: 'job-1',
      status: 'running',
      names: ['loss', 'lr'],
      metrics: [
        row(0, 0, 'loss', 9, 0), // an earlier attempt: not drawn
        row(1, 1, 'loss', 2.0, 1),
        row(0, 1, 'loss', 2.5, 1),
        row(0, 0, 'loss', 3.0, 1),
        row(0, 2, 'loss', null, 1), // a NaN is left out
        row(0, 0, 'lr', 0.1, 1)
      ]
    });
    expect(charts.map(chart => chart.name)).toEqual(['loss', 'lr']);
    const [loss] = charts;
    expect(loss.lines.map(line => line.rank)).toEqual([0, 1]);
    expect(loss.lines[0].points).toEqual([
      { t: 0, v: 3.0 },
      { t: 1, v: 2.5 }
    ]);
    expect(loss.lines[0].latest).toBe(2.5);
    expect(loss.steps).toEqual([0, 1]);
    expect(loss.values).toEqual([0, 3.0]);
  });

  it('has no chart for a name whose values are all NaN, nor for a job that logged nothing', () => {
    expect(metricCharts({ job: 'j', status: 'running', names: ['x'], metrics: [row(0, 0, 'x', null)] })).toEqual([]);
    expect(metricCharts({ job: 'j', status: 'succeeded', names: [], metrics: [] })).toEqual([]);
  });
});

describe('formatValue', () => {
  it('shows four significant digits without trailing zeros', () => {
    expect([3, 2.5, 0.1, 0.00031234, 2.51349, 123456.7, -0.5].map(formatValue)).toEqual([
      '3',
      '2.5',
      '0.1',
      '0.0003123',
      '2.513',
      '1.235e+5',
      '-0.5'
    ]);
  });
});
