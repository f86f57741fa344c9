// The app's few DOM helpers: no framework, so these keep element creation readable.

type Child = Node | string | null | undefined | false;
type Attrs = Record<string, string | number | boolean | null | undefined>;

/**
 * h creates an element. Attributes set to false, null or undefined are left out; true
 * sets an empty attribute. Children that are strings become text nodes (never HTML).
 */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === false || v === null || v === undefined) continue;
    el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}

/** byId returns the element with this id, which index.html has. */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`index.html has no #${id}`);
  return el as T;
}

/** setText sets an element's text only when it changed (no needless layout). */
export function setText(el: Element, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

/** setAttr sets or removes an attribute only when it changed. */
export function setAttr(el: Element, name: string, value: string | null): void {
  if (value === null) {
    if (el.hasAttribute(name)) el.removeAttribute(name);
  } else if (el.getAttribute(name) !== value) {
    el.setAttribute(name, value);
  }
}

/** frameScheduler runs fn at most once per animation frame, however often it is asked. */
export function frameScheduler(fn: () => void): () => void {
  let queued = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const run = () => {
    if (!queued) return;
    queued = false;
    clearTimeout(timer);
    fn();
  };
  return () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(run);
    // A hidden tab gets no frames; render it anyway, less often, so that it is current
    // when shown and a second tab driven by a test is not starved.
    timer = setTimeout(run, 250);
  };
}
