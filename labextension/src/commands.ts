/** Command ids; the panel's buttons run these so they also work from the palette. */
export const CommandIDs = {
  showPanel: 'gpugeek:show-panel',
  refreshPools: 'gpugeek:refresh-pools',
  /** Args: `{ name: string }` */
  stopPool: 'gpugeek:stop-pool',
  /** Args: `{ name: string }` */
  usePool: 'gpugeek:use-pool',
  /** Args: `{ name?: string }` (asked for when missing, as from the palette) */
  openMonitor: 'gpugeek:open-monitor',
  /** Args: `{ id?: string }` (asked for when missing) */
  openJob: 'gpugeek:open-job'
} as const;
