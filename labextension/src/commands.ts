/** Command ids; the panel's buttons run these so they also work from the palette. */
export namespace CommandIDs {
  export const showPanel = 'gpugeek:show-panel';
  export const refreshPools = 'gpugeek:refresh-pools';
  /** Args: `{ name: string }` */
  export const stopPool = 'gpugeek:stop-pool';
  /** Args: `{ name: string }` */
  export const usePool = 'gpugeek:use-pool';
}
