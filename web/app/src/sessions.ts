// The conversation list: the sessions API (GET/PATCH/DELETE /v1/sessions) through the
// client library's SessionsClient, most recently active first, paged with "Load more".
import type { SessionsClient, SessionSummary } from '../../client/src/index.ts';
import { h } from './dom.ts';
import { ago, renderMeter, renderProgress, type RunProgress } from './format.ts';
import { icon } from './icons.ts';

const PAGE = 20;

export interface SessionListOptions {
  client: SessionsClient;
  list: HTMLUListElement;
  status: HTMLElement;
  more: HTMLButtonElement;
  /** current is the open conversation's id. */
  current(): string | null;
  /** open opens a conversation (a click on its row). */
  open(id: string): void;
  /** deleted is told a conversation was deleted from the list. */
  deleted(id: string): void;
  /** error shows a failure to the user. */
  error(message: string): void;
  /** changed is told the items changed (a title the page shows may be new). */
  changed(): void;
}

export class SessionList {
  private items: SessionSummary[] = [];
  private next: string | null = null;
  private loaded = false;
  private editing: string | null = null;
  private refreshing: Promise<void> | null = null;
  private again = false;
  /** live is the open conversation's progress, as its tab sees it. */
  private live: { id: string; p: RunProgress | undefined } | null = null;

  constructor(private o: SessionListOptions) {
    o.more.addEventListener('click', () => void this.loadMore());
  }

  /**
   * setProgress shows p as the open conversation's progress: its active run's, live (the
   * list's own is what the database held when it was fetched, and only while the list
   * saw the run active). undefined: its run reported none, or none is active.
   */
  setProgress(id: string | null, p: RunProgress | undefined): void {
    const next = id ? { id, p } : null;
    if (JSON.stringify(next) === JSON.stringify(this.live)) return;
    this.live = next;
    this.render();
  }

  /** progress is what a row shows of its session's progress. */
  private progress(s: SessionSummary): RunProgress | undefined {
    if (this.live?.id === s.id) return this.live.p;
    return s.activeRun ? s.progress : undefined;
  }

  /** find returns the listed session with this id. */
  find(id: string | null): SessionSummary | undefined {
    return id ? this.items.find((s) => s.id === id) : undefined;
  }

  /**
   * refresh loads the first page again (as many rows as are shown, so "Load more" is not
   * undone). Calls while one is under way make one more after it, not one each.
   */
  refresh(): Promise<void> {
    if (this.refreshing) {
      this.again = true;
      return this.refreshing;
    }
    this.refreshing = (async () => {
      do {
        this.again = false;
        await this.fetchFirst();
      } while (this.again);
    })().finally(() => {
      this.refreshing = null;
    });
    return this.refreshing;
  }

  private async fetchFirst(): Promise<void> {
    try {
      const limit = Math.min(100, Math.max(PAGE, this.items.length));
      const page = await this.o.client.list({ limit });
      this.items = page.sessions;
      this.next = page.nextCursor;
      this.loaded = true;
      this.o.status.textContent = '';
    } catch (err) {
      this.o.status.textContent = `Could not load conversations: ${(err as Error).message}`;
    }
    this.render();
  }

  async loadMore(): Promise<void> {
    if (!this.next) return;
    this.o.more.disabled = true;
    try {
      const page = await this.o.client.list({ cursor: this.next, limit: PAGE });
      const have = new Set(this.items.map((s) => s.id));
      this.items.push(...page.sessions.filter((s) => !have.has(s.id)));
      this.next = page.nextCursor;
    } catch (err) {
      this.o.error(`Could not load more conversations: ${(err as Error).message}`);
    } finally {
      this.o.more.disabled = false;
    }
    this.render();
  }

  /** render shows the items; the current one is marked. */
  render(): void {
    if (this.editing) return; // a rename is being typed; the next render picks it up
    const current = this.o.current();
    this.o.list.replaceChildren(...this.items.map((s) => this.row(s, s.id === current)));
    this.o.changed();
    this.o.more.hidden = !this.next;
    if (this.loaded && this.items.length === 0 && !this.o.status.textContent) {
      this.o.status.textContent = 'No conversations yet.';
    } else if (this.items.length > 0 && this.o.status.textContent === 'No conversations yet.') {
      this.o.status.textContent = '';
    }
  }

  private row(s: SessionSummary, current: boolean): HTMLLIElement {
    const title = s.title || 'Untitled';
    const link = h('a', { class: 'session-link', href: `/c/${s.id}`, 'data-testid': 'session-title' }, title);
    link.addEventListener('click', (e) => {
      if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return; // a new tab
      e.preventDefault();
      this.o.open(s.id);
    });
    const meter = h('span', { class: 'meter', 'data-testid': 'session-meter' });
    renderMeter(meter, s.usage, true);
    const rename = h(
      'button',
      { type: 'button', 'aria-label': `Rename “${title}”`, title: 'Rename', 'data-testid': 'rename-session' },
      icon('pencil'),
    );
    rename.addEventListener('click', () => this.startRename(s, link));
    const del = h(
      'button',
      { type: 'button', 'aria-label': `Delete “${title}”`, title: 'Delete', 'data-testid': 'delete-session' },
      icon('trash'),
    );
    del.addEventListener('click', () => void this.remove(s));
    const li = h(
      'li',
      {
        class: 'session',
        'data-testid': 'session-item',
        'data-session-id': s.id,
        'aria-current': current ? 'page' : false,
      },
      link,
      s.preview ? h('span', { class: 'session-preview', 'data-testid': 'session-preview' }, s.preview) : null,
      h(
        'span',
        { class: 'session-meta' },
        h('time', { datetime: s.updatedAt, title: new Date(s.updatedAt).toLocaleString() }, ago(s.updatedAt)),
        s.activeRun ? h('span', { class: 'badge', 'data-testid': 'session-active' }, s.activeRun.status === 'running' ? 'replying' : 'waiting') : null,
        this.progress(s) ? renderProgress(this.progress(s)!, 'session-progress', true) : null,
        meter,
      ),
      h('span', { class: 'session-actions' }, rename, del),
    );
    return li;
  }

  private startRename(s: SessionSummary, link: HTMLAnchorElement): void {
    this.editing = s.id;
    const input = h('input', {
      class: 'session-rename',
      type: 'text',
      value: s.title,
      maxlength: 200,
      'aria-label': 'New title',
      'data-testid': 'rename-input',
    });
    link.replaceWith(input);
    input.focus();
    input.select();
    let done = false;
    const finish = async (save: boolean) => {
      if (done) return;
      done = true;
      const title = input.value.trim();
      if (save && title && title !== s.title) {
        try {
          const updated = await this.o.client.rename(s.id, title);
          this.items = this.items.map((it) => (it.id === s.id ? updated : it));
        } catch (err) {
          this.o.error(`Could not rename: ${(err as Error).message}`);
        }
      }
      this.editing = null;
      this.render();
      this.o.list.querySelector<HTMLElement>(`[data-session-id="${s.id}"] .session-link`)?.focus();
    };
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        void finish(true);
      } else if (e.key === 'Escape') {
        e.preventDefault();
        void finish(false);
      }
    });
    input.addEventListener('blur', () => void finish(true));
  }

  private async remove(s: SessionSummary): Promise<void> {
    if (!confirm(`Delete “${s.title || 'Untitled'}”? Its messages are deleted for good.`)) return;
    try {
      await this.o.client.delete(s.id);
    } catch (err) {
      this.o.error(`Could not delete: ${(err as Error).message}`);
      return;
    }
    this.items = this.items.filter((it) => it.id !== s.id);
    this.render();
    this.o.deleted(s.id);
  }
}
