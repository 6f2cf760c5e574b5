/**
 * One small SVG line chart, as the pool monitor and the job tab draw them:
 * a titled plot of a line per device or rank, over an x range and from 0 to
 * a top value, with a legend of each line's colour and latest value.
 */

import { h, svg } from './dom';
import { IPoint, polylinePoints } from './monitorModel';

const WIDTH = 480;
const HEIGHT = 90;
const COLOURS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f'];

export interface ILineChart {
  /** What the chart shows, kept as its `data-metric`. */
  readonly key: string;
  readonly title: string;
  /** The plot's accessible name. */
  readonly label: string;
  /** The x range drawn. */
  readonly x: readonly [number, number];
  /** The y range drawn is 0 to this (points are given from 0). */
  readonly top: number;
  /** Each line's points and its legend text (its name and latest value). */
  readonly lines: readonly { readonly points: readonly IPoint[]; readonly legend: string }[];
}

export function renderLineChart(chart: ILineChart): HTMLElement {
  const [x0, x1] = chart.x;
  const plot = svg('svg', {
    class: 'gpugeek-monitor-plot',
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    preserveAspectRatio: 'none',
    role: 'img',
    'aria-label': chart.label
  });
  chart.lines.forEach((line, index) => {
    plot.appendChild(
      svg('polyline', {
        points: polylinePoints(line.points, x0, x1, chart.top, WIDTH, HEIGHT),
        fill: 'none',
        stroke: COLOURS[index % COLOURS.length],
        'stroke-width': '1.5',
        'vector-effect': 'non-scaling-stroke'
      })
    );
  });
  const legend = chart.lines.map((line, index) =>
    h('span', { class: 'gpugeek-monitor-legend-item' }, [
      h('span', { class: 'gpugeek-monitor-swatch', attrs: { style: `background:${COLOURS[index % COLOURS.length]}` } }),
      line.legend
    ])
  );
  return h('div', { class: 'gpugeek-monitor-chart', data: { metric: chart.key } }, [
    h('div', { class: 'gpugeek-monitor-chart-title', text: chart.title }),
    plot as unknown as HTMLElement,
    h('div', { class: 'gpugeek-monitor-legend' }, legend)
  ]);
}
