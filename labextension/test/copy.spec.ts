import { copyText, IClipboardLike } from '../src/copy';

/** A fake of `navigator.clipboard`: keeps what was written, or refuses as a browser may. */
class FakeClipboard implements IClipboardLike {
  written: string[] = [];
  constructor(private readonly _refusal: Error | null = null) {}
  async writeText(text: string): Promise<void> {
    if (this._refusal) {
      throw this._refusal;
    }
    this.written.push(text);
  }
}

describe('copyText', () => {
  it('copies the full id and says so on the button', async () => {
    const clipboard = new FakeClipboard();
    const id = 'job-5fadba82c3e14d0a9b7f';
    expect(await copyText(clipboard, id, 'job id')).toEqual({
      label: 'Copied',
      title: `Copied the job id ${id}`
    });
    expect(clipboard.written).toEqual([id]);
  });

  it('says why a refused copy failed and still shows the id to select', async () => {
    const clipboard = new FakeClipboard(new Error('Document is not focused.'));
    const outcome = await copyText(clipboard, 'job-5fadba82', 'job id');
    expect(outcome).toEqual({
      label: 'Copy failed',
      title: 'Could not copy the job id: Document is not focused.; select it to copy it: job-5fadba82'
    });
  });

  it('names the reason when the page has no clipboard at all (plain http)', async () => {
    const outcome = await copyText(undefined, 'job-5fadba82', 'job id');
    expect(outcome.label).toBe('Copy failed');
    expect(outcome.title).toContain('needs https or localhost');
    expect(outcome.title).toContain('job-5fadba82');
  });
});
