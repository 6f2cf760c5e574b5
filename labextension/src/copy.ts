/**
 * Copying a full id (a job's, a pool's) to the clipboard: the panel's rows
 * shorten ids to fit, and a user matches them with the notebook's output by
 * pasting the whole id. The result is said on the button itself.
 */

import { h } from './dom';

/** What the browser's `navigator.clipboard` offers that a copy needs. */
export interface IClipboardLike {
  writeText(text: string): Promise<void>;
}

/** What a copy button says after a click. */
export interface ICopyOutcome {
  label: 'Copied' | 'Copy failed';
  /** The button's title: what was copied, or why it could not be. */
  title: string;
}

/** How long the button says the outcome before it reads "Copy" again. */
export const COPY_SAID_MS = 1500;

/**
 * Copy `text` (described as `what`, e.g. "job id") to `clipboard`; never
 * throws. A page served over plain HTTP from another host has no
 * `navigator.clipboard` at all: the title says so.
 */
export async function copyText(
  clipboard: IClipboardLike | undefined,
  text: string,
  what: string
): Promise<ICopyOutcome> {
  if (!clipboard) {
    return {
      label: 'Copy failed',
      title: `This page cannot use the clipboard (it needs https or localhost); select the ${what} to copy it: ${text}`
    };
  }
  try {
    await clipboard.writeText(text);
    return { label: 'Copied', title: `Copied the ${what} ${text}` };
  } catch (error) {
    return {
      label: 'Copy failed',
      title: `Could not copy the ${what}: ${(error as Error).message}; select it to copy it: ${text}`
    };
  }
}

/** `text` in full, selectable, with a Copy button beside it. */
export function renderFullId(text: string, what: string): HTMLElement {
  return h('span', { class: 'gpugeek-full-id' }, [
    h('code', { class: 'gpugeek-full-id-text', text }),
    renderCopyButton(text, what)
  ]);
}

/** A button that copies `text` (the `what` its title names), saying whether it could. */
export function renderCopyButton(text: string, what: string): HTMLElement {
  const button = h('button', {
    class: 'gpugeek-copy-button jp-Button jp-mod-minimal',
    text: 'Copy',
    title: `Copy the ${what} ${text}`,
    attrs: { type: 'button', 'aria-label': `Copy the ${what} ${text}` }
  });
  let reset: number | undefined;
  button.addEventListener('click', event => {
    event.stopPropagation(); // a click in a row's summary must not also toggle the row
    void copyText(navigator.clipboard, text, what).then(outcome => {
      button.textContent = outcome.label;
      button.title = outcome.title;
      window.clearTimeout(reset);
      reset = window.setTimeout(() => {
        button.textContent = 'Copy';
        button.title = `Copy the ${what} ${text}`;
      }, COPY_SAID_MS);
    });
  });
  return button;
}
