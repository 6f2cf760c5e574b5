/**
 * Putting `%gpugeek_use NAME` into a notebook.
 *
 * Written against the few members of JupyterLab's `Notebook` it touches,
 * so the extension needs no build-time dependency on `@jupyterlab/notebook`
 * (which would pull hundreds of megabytes of renderers into node_modules)
 * and the logic is tested with a plain object.
 */

export interface ISharedCellLike {
  getSource(): string;
  setSource(source: string): void;
}

export interface INotebookLike {
  activeCellIndex: number;
  readonly activeCell: {
    readonly model: { readonly type: string; readonly sharedModel: ISharedCellLike };
  } | null;
  readonly model: {
    readonly sharedModel: {
      insertCell(index: number, cell: { cell_type: 'code'; source: string }): unknown;
    };
  } | null;
}

/** The line that attaches a pool to the notebook's kernel. */
export function poolMagic(name: string): string {
  return `%gpugeek_use ${name}`;
}

/** Whether a main-area widget is a notebook panel we can write into. */
export function notebookOf(widget: unknown): INotebookLike | null {
  const content = (widget as { content?: Partial<INotebookLike> } | null)?.content;
  if (
    content &&
    typeof content.activeCellIndex === 'number' &&
    content.model &&
    typeof content.model.sharedModel?.insertCell === 'function'
  ) {
    return content as INotebookLike;
  }
  return null;
}

/**
 * Fill the active cell when it is an empty code cell, otherwise insert a new
 * code cell above it and make that one active; returns the cell's index.
 */
export function insertPoolMagic(notebook: INotebookLike, name: string): number {
  const source = poolMagic(name);
  const active = notebook.activeCell;
  if (active && active.model.type === 'code' && active.model.sharedModel.getSource().trim() === '') {
    active.model.sharedModel.setSource(source);
    return notebook.activeCellIndex;
  }
  if (!notebook.model) {
    throw new Error('the notebook has no model yet');
  }
  const index = Math.max(0, notebook.activeCellIndex);
  notebook.model.sharedModel.insertCell(index, { cell_type: 'code', source });
  notebook.activeCellIndex = index;
  return index;
}
