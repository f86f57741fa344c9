// The files panel: what the open conversation's tools wrote into its sandbox's workspace
// (GET /v1/sessions/{id}/files through the client library's SessionsClient), each file
// downloadable. The download is fetched with the client, so it carries the same token as
// every other call, and saved through an object URL and an <a download>.
import type { SessionsClient, WorkspaceFile } from '../../client/src/index.ts';
import { h, setText } from './dom.ts';
import { ago, bytes } from './format.ts';
import { icon } from './icons.ts';

export interface FilesPanelOptions {
  client: SessionsClient;
  /** The panel (an element that is hidden while closed) and what is inside it. */
  panel: HTMLElement;
  list: HTMLUListElement;
  empty: HTMLElement;
  error: HTMLElement;
  status: HTMLElement;
  /** The button that opens and closes it (aria-expanded follows). */
  toggle: HTMLButtonElement;
  close: HTMLButtonElement;
  refresh: HTMLButtonElement;
  /** opened is told the panel opened (the page closes its other drawer). */
  opened(): void;
}

const modified = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export class FilesPanel {
  /** The conversation whose files are shown; null for a new one nothing was sent to. */
  private sessionId: string | null = null;
  /** Counts fetches: an answer for an earlier one (or another conversation) is dropped. */
  private seq = 0;
  private downloading = new Set<string>();

  constructor(private o: FilesPanelOptions) {
    o.toggle.addEventListener('click', () => this.setOpen(!this.isOpen));
    o.close.addEventListener('click', () => this.setOpen(false));
    o.refresh.addEventListener('click', () => void this.refresh());
    o.panel.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') {
        e.stopPropagation();
        this.setOpen(false);
      }
    });
  }

  get isOpen(): boolean {
    return !this.o.panel.hidden;
  }

  /** setOpen opens (and fetches the list again) or closes the panel, moving focus with it. */
  setOpen(open: boolean): void {
    const { o } = this;
    const was = this.isOpen;
    o.panel.hidden = !open;
    o.toggle.setAttribute('aria-expanded', String(open));
    if (open && !was) {
      o.opened();
      o.close.focus();
      void this.refresh();
    }
    if (!open && was) {
      this.seq++;
      const active = document.activeElement;
      if (!active || active === document.body || o.panel.contains(active)) o.toggle.focus();
    }
  }

  /** show follows the open conversation: its list, fetched now when the panel is open. */
  show(sessionId: string | null): void {
    if (sessionId === this.sessionId) return;
    this.sessionId = sessionId;
    this.seq++;
    this.o.list.replaceChildren();
    this.o.empty.hidden = true;
    this.o.error.hidden = true;
    if (this.isOpen) void this.refresh();
  }

  /** refresh fetches the list again, if the panel is open. */
  async refresh(): Promise<void> {
    const { o } = this;
    if (!this.isOpen) return;
    const seq = ++this.seq;
    const id = this.sessionId;
    if (id === null) {
      this.render([], false);
      return;
    }
    setText(o.status, 'Loading…');
    o.refresh.disabled = true;
    try {
      const { files, truncated } = await o.client.files(id);
      if (seq !== this.seq) return;
      o.error.hidden = true;
      this.render(files, truncated);
    } catch (err) {
      if (seq !== this.seq) return;
      setText(o.status, '');
      setText(o.error, `Could not list the files: ${message(err)}`);
      o.error.hidden = false;
    } finally {
      if (seq === this.seq) o.refresh.disabled = false;
    }
  }

  private render(files: WorkspaceFile[], truncated: boolean): void {
    const { o } = this;
    o.empty.hidden = files.length > 0;
    const n = files.length;
    setText(o.status, n === 0 ? '' : `${n} file${n === 1 ? '' : 's'}${truncated ? ' (more not listed)' : ''}`);
    const sorted = [...files].sort((a, b) => a.path.localeCompare(b.path));
    // Keep focus on a download button that is listed again.
    const focused = o.list.contains(document.activeElement) ? (document.activeElement as HTMLElement).dataset.path : undefined;
    o.list.replaceChildren(...sorted.map((f) => this.row(f)));
    if (focused !== undefined) o.list.querySelector<HTMLElement>(`[data-testid=file-download][data-path="${CSS.escape(focused)}"]`)?.focus();
  }

  private row(f: WorkspaceFile): HTMLLIElement {
    const t = Date.parse(f.modifiedAt);
    const when = h(
      'time',
      { datetime: f.modifiedAt, title: Number.isNaN(t) ? null : modified.format(t), 'data-testid': 'file-modified' },
      ago(f.modifiedAt),
    );
    const download = h('button', {
      type: 'button',
      class: 'icon-button file-download',
      'data-testid': 'file-download',
      'data-path': f.path,
      'aria-label': `Download ${f.path}`,
      title: 'Download',
      disabled: this.downloading.has(f.path),
    });
    download.append(icon('download'));
    download.addEventListener('click', () => void this.download(f.path, download));
    return h(
      'li',
      { class: 'file-row', 'data-testid': 'file-row', 'data-path': f.path },
      h(
        'div',
        { class: 'file-info' },
        h('span', { class: 'file-path', 'data-testid': 'file-path', title: f.path }, f.path),
        h('span', { class: 'file-meta' }, h('span', { 'data-testid': 'file-size', title: `${f.size} bytes` }, bytes(f.size)), ' · ', when),
      ),
      download,
    );
  }

  private async download(path: string, button: HTMLButtonElement): Promise<void> {
    const id = this.sessionId;
    if (id === null || this.downloading.has(path)) return;
    this.downloading.add(path);
    button.disabled = true;
    try {
      const blob = await this.o.client.download(id, path);
      const url = URL.createObjectURL(blob);
      const a = h('a', { href: url, download: path.split('/').pop() || 'download', hidden: true });
      document.body.append(a);
      a.click();
      a.remove();
      // The browser has taken the URL once the click's download started.
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    } catch (err) {
      setText(this.o.error, `Could not download ${path}: ${message(err)}`);
      this.o.error.hidden = false;
    } finally {
      this.downloading.delete(path);
      if (button.isConnected) button.disabled = false;
      else this.o.list.querySelectorAll<HTMLButtonElement>('[data-testid=file-download]').forEach((b) => {
        if (b.dataset.path === path) b.disabled = false;
      });
    }
  }
}
