import { INotebookLike, insertPoolMagic, notebookOf, poolMagic } from '../src/notebook';

interface IFakeCell {
  type: string;
  source: string;
}

/** Just enough of JupyterLab's Notebook: cells, an active index, insertCell. */
function fakeNotebook(cells: IFakeCell[], activeCellIndex: number): INotebookLike & { cells: IFakeCell[] } {
  const notebook = {
    cells,
    activeCellIndex,
    get activeCell() {
      const cell = cells[notebook.activeCellIndex];
      return cell
        ? {
            model: {
              type: cell.type,
              sharedModel: {
                getSource: () => cell.source,
                setSource: (source: string) => {
                  cell.source = source;
                }
              }
            }
          }
        : null;
    },
    model: {
      sharedModel: {
        insertCell: (index: number, cell: { cell_type: 'code'; source: string }) => {
          cells.splice(index, 0, { type: cell.cell_type, source: cell.source });
        }
      }
    }
  };
  return notebook;
}

describe('Use in notebook', () => {
  it('writes the magic for the pool', () => {
    expect(poolMagic('train-a100')).toBe('%gpugeek_use train-a100');
  });

  it('fills the active cell when it is an empty code cell', () => {
    const notebook = fakeNotebook([{ type: 'code', source: 'x = 1' }, { type: 'code', source: '  ' }], 1);
    expect(insertPoolMagic(notebook, 'p')).toBe(1);
    expect(notebook.cells).toEqual([
      { type: 'code', source: 'x = 1' },
      { type: 'code', source: '%gpugeek_use p' }
    ]);
  });

  it('inserts a new code cell above a non-empty active cell and selects it', () => {
    const notebook = fakeNotebook([{ type: 'code', source: 'a' }, { type: 'code', source: 'b' }], 1);
    expect(insertPoolMagic(notebook, 'p')).toBe(1);
    expect(notebook.cells.map(cell => cell.source)).toEqual(['a', '%gpugeek_use p', 'b']);
    expect(notebook.activeCellIndex).toBe(1);
  });

  it('never writes code into an empty markdown cell', () => {
    const notebook = fakeNotebook([{ type: 'markdown', source: '' }], 0);
    insertPoolMagic(notebook, 'p');
    expect(notebook.cells).toEqual([
      { type: 'code', source: '%gpugeek_use p' },
      { type: 'markdown', source: '' }
    ]);
  });

  it('recognises notebook panels by their content', () => {
    const notebook = fakeNotebook([], -1);
    expect(notebookOf({ content: notebook })).toBe(notebook);
    expect(notebookOf({ content: { activeCellIndex: 0, model: null } })).toBeNull();
    expect(notebookOf(null)).toBeNull();
  });
});
