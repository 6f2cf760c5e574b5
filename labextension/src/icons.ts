import { LabIcon } from '@jupyterlab/ui-components';

const GPU_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M2 6h17a3 3 0 0 1 3 3v7a3 3 0 0 1-3 3h-1v2h-2v-2H6v2H4v-2H2V6zm2 2v9h15a1 1 0 0 0 1-1V9a1 1 0 0 0-1-1H4z"/>
    <circle cx="9" cy="12.5" r="2.5"/>
    <circle cx="16" cy="12.5" r="2.5"/>
  </g>
</svg>`;

export const gpuIcon = new LabIcon({ name: 'gpugeek:gpu', svgstr: GPU_SVG });
