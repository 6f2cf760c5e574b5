/**
 * A minimal element builder for the panel's plain-DOM views.
 */

import { diffByKey } from './state';

export type Child = Node | string | null | undefined | false;

export interface IElementProps {
  class?: string;
  text?: string;
  title?: string;
  attrs?: Record<string, string>;
  data?: Record<string, string>;
  on?: Partial<{ [K in keyof HTMLElementEventMap]: (event: HTMLElementEventMap[K]) => void }>;
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: IElementProps = {},
  children: Child[] = []
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  if (props.class) {
    element.className = props.class;
  }
  if (props.text !== undefined) {
    element.textContent = props.text;
  }
  if (props.title) {
    element.title = props.title;
  }
  for (const [name, value] of Object.entries(props.attrs ?? {})) {
    element.setAttribute(name, value);
  }
  for (const [name, value] of Object.entries(props.data ?? {})) {
    element.dataset[name] = value;
  }
  for (const [type, listener] of Object.entries(props.on ?? {})) {
    element.addEventListener(type, listener as EventListener);
  }
  append(element, children);
  return element;
}

export function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) {
      continue;
    }
    parent.appendChild(typeof child === 'string' ? document.createTextNode(child) : child);
  }
}

const SVG_NS = 'http://www.w3.org/2000/svg';

export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  children: Node[] = []
): SVGElementTagNameMap[K] {
  const element = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    element.setAttribute(name, value);
  }
  children.forEach(child => element.appendChild(child));
  return element;
}

/**
 * Keeps a container's children in step with a keyed list of models,
 * re-rendering only the items whose model changed.
 */
export class KeyedList<T> {
  private _items: T[] = [];
  private readonly _elements = new Map<string, HTMLElement>();

  constructor(
    readonly container: HTMLElement,
    private readonly _keyOf: (item: T) => string,
    private readonly _render: (item: T) => HTMLElement
  ) {}

  get items(): readonly T[] {
    return this._items;
  }

  find(key: string): T | undefined {
    return this._items.find(item => this._keyOf(item) === key);
  }

  update(next: readonly T[]): void {
    const diff = diffByKey(this._items, next, this._keyOf);
    for (const key of diff.removed) {
      this._elements.get(key)?.remove();
      this._elements.delete(key);
    }
    for (const item of [...diff.added, ...diff.changed]) {
      this._replace(item);
    }
    diff.order.forEach((key, index) => {
      const element = this._elements.get(key)!;
      if (this.container.children[index] !== element) {
        this.container.insertBefore(element, this.container.children[index] ?? null);
      }
    });
    this._items = next.slice();
  }

  /** Redraw one item from its current model (for view state such as selection). */
  rerender(key: string): void {
    const item = this.find(key);
    if (item !== undefined) {
      this._replace(item);
    }
  }

  private _replace(item: T): void {
    const key = this._keyOf(item);
    const element = this._render(item);
    const old = this._elements.get(key);
    if (old && sameShape(old, element)) {
      // Patch in place so a button under the pointer or with focus survives a poll.
      morph(old, element);
    } else {
      old?.replaceWith(element);
      this._elements.set(key, element);
    }
  }
}

/**
 * Same tag and same class: nodes that can be patched into each other.
 * Requiring the same class keeps an element's listeners with the part
 * they were made for (a Stop button never becomes a "Use" button).
 */
function sameShape(a: Node, b: Node): boolean {
  if (a.nodeType !== b.nodeType || a.nodeName !== b.nodeName) {
    return false;
  }
  if (a instanceof Element && b instanceof Element) {
    return a.getAttribute('class') === b.getAttribute('class');
  }
  return true;
}

/**
 * Make `target` match `source`, reusing target's nodes where their shape
 * matches. Listeners stay those of the reused nodes, so renderers must
 * make listeners that depend only on the item's key.
 */
export function morph(target: Element, source: Element): void {
  for (const attr of [...target.attributes]) {
    if (!source.hasAttribute(attr.name)) {
      target.removeAttribute(attr.name);
    }
  }
  for (const attr of [...source.attributes]) {
    if (target.getAttribute(attr.name) !== attr.value) {
      target.setAttribute(attr.name, attr.value);
    }
  }
  if (target instanceof HTMLButtonElement && source instanceof HTMLButtonElement) {
    target.disabled = source.disabled;
  }
  const targetChildren = [...target.childNodes];
  const sourceChildren = [...source.childNodes];
  sourceChildren.forEach((child, index) => {
    const existing = targetChildren[index];
    if (!existing) {
      target.appendChild(child);
    } else if (!sameShape(existing, child)) {
      target.replaceChild(child, existing);
    } else if (existing instanceof Element) {
      morph(existing, child as Element);
    } else if (existing.nodeValue !== child.nodeValue) {
      existing.nodeValue = child.nodeValue;
    }
  });
  for (const extra of targetChildren.slice(sourceChildren.length)) {
    extra.remove();
  }
}
