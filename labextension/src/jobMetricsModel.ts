/**
 * A job's `gg.log` values as charts: what `GET /gpugeek/jobs/<id>/metrics`
 * answered, grouped by name, then by rank, as points (step, value) of the
 * newest attempt. Pure: tested in Node.
 */

import { IPoint } from './monitorModel';

/** One row of `GET /gpugeek/jobs/<id>/metrics`. */
export interface IJobMetricRow {
  attempt: number;
  rank: number;
  step: number;
  time: number;
  name: string;
  /** null for a NaN or an infinity. */
  value: number | null;
}

export interface IJobMetrics {
  job: string;
  status: string;
  names: string[];
  metrics: IJobMetricRow[];
}

/** One chart: a metric's name, each rank's points (x: step), and the rank's newest value. */
export interface IMetricChart {
  name: string;
  lines: { rank: number; points: IPoint[]; latest: number }[];
  /** The steps and values the chart spans. */
  steps: [number, number];
  values: [number, number];
}

/** The charts of `answer`, one per name in its order; the newest attempt's rows only. */
export function metricCharts(answer: IJobMetrics): IMetricChart[] {
  const attempt = Math.max(-1, ...answer.metrics.map(row => row.attempt));
  const charts: IMetricChart[] = [];
  for (const name of answer.names) {
    const byRank = new Map<number, IPoint[]>();
    for (const row of answer.metrics) {
      if (row.name !== name || row.attempt !== attempt || row.value === null) {
        continue;
      }
      const points = byRank.get(row.rank) ?? [];
      byRank.set(row.rank, points);
      points.push({ t: row.step, v: row.value });
    }
    if (byRank.size === 0) {
      continue;
    }
    const lines = [...byRank]
      .sort(([a], [b]) => a - b)
      .map(([rank, points]) => {
        points.sort((a, b) => a.t - b.t);
        return { rank, points, latest: points[points.length - 1].v };
      });
    const all = lines.flatMap(line => line.points);
    charts.push({
      name,
      lines,
      steps: [Math.min(...all.map(p => p.t)), Math.max(...all.map(p => p.t))],
      values: [Math.min(0, ...all.map(p => p.v)), Math.max(...all.map(p => p.v))]
    });
  }
  return charts;
}

/** Four significant digits: `0.0003`, `2.513`, `1.2e+5`. */
export function formatValue(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toPrecision(4).replace(/\.?0+(e|$)/, '$1');
}
