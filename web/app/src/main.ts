// chatd's chat app: the conversation list, one open conversation (a ChatClient, whose
// state the page renders), and the service worker. The client library does the
// protocol; this file only shows its state and turns clicks into its calls.
import { ChatClient, ChatError, SessionsClient, isUuid, splitToolName, uuid4 } from '../../client/src/index.ts';
import type { ChatState, Message, QueuedMessage, Run } from '../../client/src/index.ts';
import { byId, frameScheduler, h, setAttr, setText } from './dom.ts';
import { renderMeter, renderProgress, type ContextUsage } from './format.ts';
import { FilesPanel } from './files.ts';
import { fillIcons } from './icons.ts';
import { SessionList } from './sessions.ts';
import { Transcript } from './transcript.ts';

/** sessionFromURL is the conversation a URL names (/c/<id>), or null for a new one. */
function sessionFromURL(): string | null {
  const m = /^\/c\/([^/]+)$/.exec(location.pathname);
  return m ? decodeURIComponent(m[1]).toLowerCase() : null;
}

const connectionText: Record<string, string> = {
  connecting: 'Connecting…',
  'catching-up': 'Catching up…',
  live: 'Live',
  offline: 'Offline',
};

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** sentence ends s with a full stop, unless it already ends a sentence. */
function sentence(s: string): string {
  return /[.!?…]$/.test(s) ? s : s + '.';
}

/** describeEnded says how a run that did not complete ended. */
function describeEnded(run: Run): string {
  // The message may end with the provider's own words, which often end in a full stop.
  const why = run.error?.message ? `: ${run.error.message.trim()}` : '';
  switch (run.status) {
    case 'cancelled':
      if (run.cancelReason === 'abandoned') return 'This reply was stopped because nobody watched it for a long time.';
      if (run.cancelReason === 'shutdown') return 'The server stopped during this reply.';
      return 'You stopped this reply.';
    case 'interrupted':
      return sentence(`The server stopped during this reply${why}`);
    case 'error':
      return sentence(`This reply failed${why}`);
    default:
      return '';
  }
}

function firstLine(text: string, max = 80): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? line.slice(0, max - 1) + '…' : line;
}

class App {
  private els = {
    app: byId('app'),
    scrim: byId('scrim'),
    menu: byId<HTMLButtonElement>('menu-button'),
    closeDrawer: byId<HTMLButtonElement>('close-drawer'),
    newConversation: byId<HTMLButtonElement>('new-conversation'),
    title: byId('title'),
    meter: byId('context-meter'),
    connection: byId('connection'),
    scroller: byId('transcript'),
    loadOlder: byId<HTMLButtonElement>('load-older'),
    empty: byId('empty'),
    notFound: byId('not-found'),
    notFoundNew: byId<HTMLButtonElement>('not-found-new'),
    panels: byId('panels'),
    pending: byId<HTMLOListElement>('pending'),
    queued: byId<HTMLOListElement>('queued'),
    composer: byId<HTMLFormElement>('composer'),
    input: byId<HTMLTextAreaElement>('input'),
    send: byId<HTMLButtonElement>('send'),
    stop: byId<HTMLButtonElement>('stop'),
    toast: byId('toast'),
  };
  private transcript = new Transcript(byId<HTMLOListElement>('messages'), {
    // An edit while a reply streams stops that reply (kept as far as it got, on its own
    // branch): the new version is what the user wants answered.
    edit: (m, content) => this.client!.edit(m.id, content, { whileRunning: 'interrupt' }),
    regenerate: (runId) => this.client!.regenerate(runId),
    select: (messageId) => this.client!.selectBranch(messageId),
    error: (text) => this.toast(text),
  });
  private sessions: SessionList;
  private api = new SessionsClient();
  private files: FilesPanel;
  /** The tool calls of the open conversation that have ended, as last seen (null: none seen yet). */
  private toolsEnded: string | null = null;
  private schedule = frameScheduler(() => this.render());

  private client: ChatClient | null = null;
  private unsubscribe: (() => void) | null = null;
  /** sessionId: the open conversation's id; null for a new one until chatd named it. */
  private sessionId: string | null = null;
  /** closedClient: the client whose fatal close was already handled (onClosed). */
  private closedClient: ChatClient | null = null;
  /** fresh: a new conversation nothing was sent to yet; the URL stays "/". */
  private fresh = true;
  /** notFound: chatd has no such conversation for this user (4004 "session not found"). */
  private notFound = false;
  private state: ChatState | null = null;
  /** usage is the latest context usage seen in this conversation. */
  private usage: ContextUsage | null = null;
  private runKey: string | null = null;
  private panelKey = '';
  private pending = new Set<string>();
  /** The queued messages as last rendered (their requestIds), so a render that changes nothing keeps the DOM. */
  private queuedKey = '';
  private loadingOlder = false;
  private toastTimer: ReturnType<typeof setTimeout> | undefined;

  constructor() {
    this.sessions = new SessionList({
      client: this.api,
      list: byId<HTMLUListElement>('session-list'),
      status: byId('session-list-status'),
      more: byId<HTMLButtonElement>('load-more'),
      current: () => this.sessionId,
      open: (id) => this.open(id, 'push'),
      deleted: (id) => {
        if (id === this.sessionId) this.open(null, 'replace');
        // After open: closing the client stores its state one last time.
        ChatClient.forget(id);
      },
      error: (msg) => this.toast(msg),
      changed: () => this.schedule(),
    });
    this.files = new FilesPanel({
      client: this.api,
      panel: byId('files-panel'),
      list: byId<HTMLUListElement>('files-list'),
      empty: byId('files-empty'),
      error: byId('files-error'),
      status: byId('files-status'),
      toggle: byId<HTMLButtonElement>('files-button'),
      close: byId<HTMLButtonElement>('files-close'),
      refresh: byId<HTMLButtonElement>('files-refresh'),
      opened: () => this.setDrawer(false),
    });
    this.wire();
  }

  start(): void {
    fillIcons();
    this.open(sessionFromURL(), 'none');
    void this.sessions.refresh();
    if ('serviceWorker' in navigator) {
      // A new build's worker takes over at once (skipWaiting), but this page still runs
      // the old script: say so, unless this is the first worker (the page had none).
      const hadWorker = navigator.serviceWorker.controller !== null;
      navigator.serviceWorker.addEventListener('controllerchange', () => {
        if (hadWorker) this.toast('chatd was updated: reload the page for the new version.');
      });
      navigator.serviceWorker.register('/sw.js').catch((err) => console.warn('service worker not registered:', err));
    }
  }

  private wire(): void {
    const { els } = this;
    els.composer.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.sendMessage();
    });
    els.input.addEventListener('keydown', (e) => {
      // Enter sends, Shift+Enter is a new line; Enter that ends an IME composition is not a send.
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
        e.preventDefault();
        void this.sendMessage();
      }
    });
    els.input.addEventListener('input', () => this.autosize());
    els.stop.addEventListener('click', () => {
      const run = this.state?.activeRun;
      if (run) void this.act('stop', () => this.client!.cancel(run.runId));
    });
    els.loadOlder.addEventListener('click', () => void this.loadOlder());
    els.notFoundNew.addEventListener('click', () => this.open(null, 'push'));
    els.scroller.addEventListener('scroll', () => {
      if (els.scroller.scrollTop < 150) void this.loadOlder();
    }, { passive: true });

    els.newConversation.addEventListener('click', () => {
      if (this.fresh && (this.state?.messages.length ?? 0) === 0) {
        this.setDrawer(false);
        this.focusInput();
        return;
      }
      this.open(null, 'push');
    });
    document.querySelectorAll<HTMLAnchorElement>('a[data-nav]').forEach((a) =>
      a.addEventListener('click', (e) => {
        if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
        e.preventDefault();
        els.newConversation.click();
      }),
    );
    els.menu.addEventListener('click', () => {
      const open = els.app.dataset.drawer !== 'open';
      if (open) this.files.setOpen(false);
      this.setDrawer(open);
    });
    els.closeDrawer.addEventListener('click', () => this.setDrawer(false));
    els.scrim.addEventListener('click', () => this.setDrawer(false));
    document.addEventListener('keydown', (e) => {
      if (e.key !== 'Escape') return;
      if (this.files.isOpen) this.files.setOpen(false);
      else if (els.app.dataset.drawer === 'open') this.setDrawer(false);
    });

    window.addEventListener('popstate', () => {
      const id = sessionFromURL();
      if (id !== this.sessionId) this.open(id, 'none');
    });
    // The indicator of a new conversation follows the browser's network state.
    window.addEventListener('online', () => this.schedule());
    window.addEventListener('offline', () => this.schedule());
    // Another tab or device may have started, renamed or deleted conversations.
    window.addEventListener('focus', () => void this.sessions.refresh());
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') void this.sessions.refresh();
    });
  }

  /**
   * open shows a conversation: id, or a new one when null. how says what happens to the
   * URL: a new history entry (push), this entry rewritten (replace), or nothing (it is
   * already the URL: the first load, back and forward).
   */
  open(id: string | null, how: 'push' | 'replace' | 'none'): void {
    if (id !== null && !isUuid(id)) {
      this.toast('That address does not name a conversation.');
      id = null;
      how = 'replace';
    }
    this.unsubscribe?.();
    this.client?.close();
    this.fresh = id === null;
    this.notFound = false;
    // A new conversation has no id until chatd names it (see named).
    this.sessionId = id;
    if (id === null) delete this.els.app.dataset.sessionId;
    else this.els.app.dataset.sessionId = id;
    const url = id === null ? '/' : `/c/${id}`;
    if (how === 'push' && location.pathname !== url) history.pushState(null, '', url);
    if (how === 'replace' || (how === 'push' && location.pathname === url)) history.replaceState(null, '', url);

    this.transcript.clear();
    this.els.pending.replaceChildren();
    this.els.queued.replaceChildren();
    this.queuedKey = '';
    this.usage = this.sessions.find(id)?.usage ?? null;
    this.runKey = null;
    this.panelKey = '';
    this.pending.clear();
    this.loadingOlder = false;
    this.toolsEnded = null;
    this.files.show(id);

    // A new conversation's client has no id: its first hello asks chatd for a new
    // session, and the snapshot names it.
    const client = new ChatClient(id === null ? {} : { sessionId: id });
    this.client = client;
    this.state = client.state;
    this.unsubscribe = client.subscribe((s) => {
      if (this.client !== client) return;
      if (this.sessionId === null && s.sessionId !== null) this.named(s.sessionId);
      this.state = s;
      this.schedule();
    });
    // A new conversation connects with its first message: the hello would create the
    // session, and every visit to / would leave an empty one behind.
    if (!this.fresh) client.connect();
    this.sessions.render();
    this.setDrawer(false);
    this.render();
    this.focusInput();
  }

  /**
   * named takes the id chatd gave the new conversation: it gets its address, and the
   * list marks it as the open one (its row comes with the list's refresh when its first
   * run starts: a session without a run is not listed).
   */
  private named(id: string): void {
    this.sessionId = id;
    this.els.app.dataset.sessionId = id;
    history.replaceState(null, '', `/c/${id}`);
    this.sessions.render();
    this.files.show(id);
  }

  private render(): void {
    const s = this.state;
    if (!s) return;
    const { els } = this;

    // Keep the view pinned to the bottom while it was there, and in place when older
    // messages are added above.
    const sc = els.scroller;
    const fromBottom = sc.scrollHeight - sc.scrollTop;
    const pinned = fromBottom - sc.clientHeight < 80;
    const firstBefore = els.app.querySelector('.msg')?.getAttribute('data-message-id');
    this.transcript.render(s.messages, { running: s.activeRun !== null });
    const firstAfter = s.messages[0]?.id;
    if (pinned) sc.scrollTop = sc.scrollHeight;
    else if (firstBefore && firstAfter !== firstBefore) sc.scrollTop = sc.scrollHeight - fromBottom;

    const known = this.fresh || s.epoch !== null; // the server has answered, or nothing to ask
    // A placeholder goes as soon as its message is in the transcript (chat.started can
    // come before the ack, and a reconnect can come between them).
    for (const p of [...els.pending.children] as HTMLElement[]) {
      const id = p.dataset.requestId;
      if (id && s.messages.some((m: Message) => m.role === 'user' && m.requestId === id)) p.remove();
    }
    els.empty.hidden = this.notFound || !known || s.messages.length > 0 || s.hasMore || els.pending.childElementCount > 0;
    els.notFound.hidden = !this.notFound;
    els.input.disabled = this.notFound;
    els.send.disabled = this.notFound;
    els.loadOlder.hidden = !s.hasMore;
    els.loadOlder.disabled = this.loadingOlder;

    // A new conversation is not connected until its first message: nothing to show yet.
    // Offline is worth saying all the same: what is sent waits for the network.
    const unconnected = navigator.onLine ? 'new' : 'offline';
    const conn = s.closed ? 'closed' : this.fresh ? unconnected : s.connection;
    setAttr(els.connection, 'data-state', conn);
    setText(els.connection, this.notFound ? 'Not found' : s.closed ? 'Closed' : conn === 'new' ? 'New' : connectionText[conn] ?? conn);

    // A message sent during a run is queued (shown below, with a cancel) and starts its
    // run when this one ends: send stays next to stop.
    const active = s.activeRun;
    els.stop.hidden = !active;
    this.renderQueued(s.queued);
    els.stop.disabled = this.pending.has('stop');
    this.renderPanels(s);

    // The list's progress is what the database holds (stored every 2 s at most); this
    // conversation's row shows the live one.
    this.sessions.setProgress(this.sessionId, active?.progress);

    const usage = active?.usage ?? s.lastRun?.usage;
    if (usage) this.usage = usage;
    renderMeter(els.meter, this.usage);

    const listed = this.sessions.find(this.sessionId);
    const firstUser = s.messages.find((m: Message) => m.role === 'user');
    const title = this.notFound
      ? 'Conversation not found'
      : listed?.title || (firstUser ? firstLine(firstUser.content) : 'New conversation');
    setText(els.title, title);
    document.title = title === 'New conversation' ? 'chatd' : `${title} · chatd`;

    // A run started, changed or ended here: the list shows titles, previews and
    // statuses, so fetch it again.
    const runKey = active ? `${active.runId}:${active.status}` : `-:${s.lastRun?.runId ?? ''}`;
    // A conversation whose first state already has its run active (the snapshot and
    // chat.started in one frame) is fetched too, once, if the list lacks it: its row
    // shows the run and its progress.
    const unlisted = this.runKey === null && s.epoch !== null && !!active && !listed;
    if ((this.runKey !== null && runKey !== this.runKey) || unlisted) void this.sessions.refresh();
    if (s.epoch !== null) this.runKey = runKey;

    // A tool call that ended may have written files: an open files panel lists them again.
    const ended = s.messages
      .filter((m: Message) => m.role === 'tool' && m.tool && m.tool.status !== 'running' && m.tool.status !== 'awaiting_approval')
      .map((m: Message) => m.id)
      .join(' ');
    if (this.toolsEnded !== null && ended !== this.toolsEnded && this.files.isOpen) void this.files.refresh();
    if (s.epoch !== null) this.toolsEnded = ended;

    if (s.closed) this.onClosed(s.closed);
  }

  private onClosed(closed: { code: number; reason: string }): void {
    // Every later render still sees the closed state: say it once per client.
    if (this.closedClient === this.client) return;
    this.closedClient = this.client;
    const id = this.sessionId;
    if (closed.code === 4004 && closed.reason === 'session deleted') {
      this.toast('This conversation was deleted.');
      this.open(null, 'replace');
      if (id) ChatClient.forget(id);
      void this.sessions.refresh();
      return;
    }
    if (closed.code === 4004) {
      // Never there (a made-up or stale address, the database reset) or someone else's:
      // say so where the conversation would be, keep the address, offer a new one. The
      // client has stopped and forgotten what it stored.
      this.notFound = true;
      this.schedule();
      return;
    }
    this.unsubscribe?.();
    this.unsubscribe = null;
    const what = id ? `${id.slice(0, 8)}…` : 'the server';
    this.toast(`Disconnected from ${what}: ${closed.reason || `close code ${closed.code}`}. Reload to try again.`);
  }

  /** renderPanels shows, above the composer, what the run needs or how it ended. */
  private renderPanels(s: ChatState): void {
    const active = s.activeRun;
    const last = active ? null : s.lastRun;
    const pa = active?.pendingApproval;
    const away = s.connection === 'offline' || s.closed !== null;
    const key = JSON.stringify([
      away, active?.runId, active?.status, pa?.toolCallId, active?.progress,
      last?.runId, last?.status, last?.resumable, last?.error?.message, last?.cancelReason,
      s.approvalRules.map((r) => r.ruleId),
      [...this.pending].sort(),
    ]);
    if (key === this.panelKey) return;
    const hadFocus = this.els.panels.contains(document.activeElement);
    this.panelKey = key;
    const panels: HTMLElement[] = [];

    if (active) {
      const waiting = active.status === 'awaiting_approval' || active.status === 'paused';
      panels.push(
        h(
          'div',
          { class: 'run-status', 'data-testid': 'run-status', 'data-status': active.status, role: 'status' },
          waiting ? null : h('span', { class: 'spinner', 'aria-hidden': 'true' }),
          waiting ? (active.status === 'paused' ? 'Paused, waiting for your approval' : 'Waiting for your approval') : 'Replying…',
          // How far a long run is ("3 of 7 pages"), as its agent or a tool reports it.
          active.progress ? renderProgress(active.progress, 'run-progress') : null,
          // The run is the server's: it goes on, and this tab catches up when it is back.
          away ? ' The server goes on; this tab catches up when it reconnects.' : null,
        ),
      );
    }
    if (active && pa) {
      // Every decision names the input shown here (its hash): one on another input is refused.
      const shown = { inputHash: pa.inputHash };
      const approve = this.button('Approve', 'approve', 'primary', () => this.client!.decide(pa.toolCallId, 'approve', active.runId, shown));
      const allowLabel = pa.name === 'shell' && ruleWord(pa.input) ? `Allow “${ruleWord(pa.input)}” for this conversation` : 'Allow for this conversation';
      const allow = this.button(allowLabel, 'approve-session', '', () =>
        this.client!.decide(pa.toolCallId, 'approve', active.runId, { ...shown, scope: 'session' }),
      );
      const deny = this.button('Deny', 'deny', 'danger', () => this.client!.decide(pa.toolCallId, 'deny', active.runId, shown));
      panels.push(
        h(
          'div',
          { class: 'panel panel-approval', 'data-testid': 'approval', 'data-state': active.status, role: 'group', 'aria-label': 'Approval needed' },
          approvalLine(pa.name),
          active.status === 'paused'
            ? h('p', { 'data-testid': 'approval-paused' }, 'Its sandbox was paused while it waited; approving resumes it.')
            : null,
          h('pre', { 'data-testid': 'approval-input' }, JSON.stringify(pa.input ?? {}, null, 2)),
          h('div', { class: 'panel-actions' }, approve, allow, deny),
        ),
      );
    }
    if (s.approvalRules.length > 0) {
      panels.push(
        h(
          'div',
          { class: 'panel panel-rules', 'data-testid': 'approval-rules', role: 'group', 'aria-label': 'Allowed for this conversation' },
          h('p', {}, 'Allowed without asking in this conversation:'),
          h(
            'ul',
            {},
            ...s.approvalRules.map((r) =>
              h(
                'li',
                { 'data-testid': 'approval-rule', 'data-rule-id': r.ruleId },
                h('code', {}, r.command !== undefined ? `${r.tool}: ${r.command} …` : r.tool),
                ' ',
                this.button('Revoke', 'revoke-rule', '', () => this.client!.revokeRule(r.ruleId)),
              ),
            ),
          ),
        ),
      );
    }
    if (last?.resumable) {
      panels.push(
        h(
          'div',
          { class: 'panel', 'data-testid': 'resume-card', 'data-run-status': last.status, role: 'group', 'aria-label': 'Reply not finished' },
          h('p', {}, describeEnded(last)),
          h(
            'div',
            { class: 'panel-actions' },
            this.button('Continue', 'resume-continue', 'primary', () => this.client!.resume(last.runId, 'continue')),
            this.button('Retry', 'resume-retry', '', () => this.client!.resume(last.runId, 'retry')),
            this.button('Dismiss', 'resume-dismiss', '', () => this.client!.dismiss(last.runId)),
          ),
        ),
      );
    } else if (last && (last.status === 'error' || last.status === 'interrupted')) {
      panels.push(
        h('div', { class: 'panel panel-error', 'data-testid': 'run-error', 'data-run-status': last.status, role: 'alert' }, h('p', {}, describeEnded(last))),
      );
    }
    this.els.panels.replaceChildren(...panels);
    if (hadFocus) (this.els.panels.querySelector('button:not(:disabled)') as HTMLElement | null)?.focus();
  }

  private button(label: string, id: string, kind: string, fn: () => Promise<unknown>): HTMLButtonElement {
    const b = h('button', { type: 'button', class: `button ${kind}`.trim(), 'data-testid': id, disabled: this.pending.size > 0 }, label);
    b.addEventListener('click', () => void this.act(id, fn));
    return b;
  }

  private renderQueued(queued: QueuedMessage[]): void {
    const key = queued.map((q) => `${q.requestId}:${q.status}`).join('\n');
    if (key === this.queuedKey) return;
    this.queuedKey = key;
    this.els.queued.replaceChildren(
      ...queued.map((q) => {
        const cancel = h('button', { type: 'button', class: 'button', 'data-testid': 'queued-cancel' }, 'Cancel');
        cancel.addEventListener('click', () => void this.act(`unqueue:${q.requestId}`, () => this.client!.unqueue(q.requestId)));
        const steering = q.status === 'steering';
        let steer: HTMLButtonElement | null = null;
        if (!steering) {
          steer = h(
            'button',
            { type: 'button', class: 'button', 'data-testid': 'queued-steer', title: 'The assistant reads it at its next step, in this reply' },
            'Send now',
          );
          steer.addEventListener('click', () => void this.act(`steer:${q.requestId}`, () => this.steer(q)));
        }
        return h(
          'li',
          { class: 'msg msg-user', 'data-testid': 'message-queued', 'data-request-id': q.requestId, 'data-status': q.status },
          h('div', { class: 'bubble' }, q.content),
          h(
            'p',
            { class: 'msg-status' },
            steering ? 'Steering · the assistant reads it at its next step ' : 'Queued · starts when the current reply ends ',
            steer,
            steer ? ' ' : null,
            cancel,
          ),
        );
      }),
    );
  }

  /**
   * steer gives a queued message to the running reply now (whileRunning steer): taken out
   * of the queue, then sent again. Started meanwhile, it is left alone; should the reply
   * end in between (no_run), it is queued again.
   */
  private async steer(q: QueuedMessage): Promise<void> {
    const client = this.client!;
    try {
      await client.unqueue(q.requestId);
    } catch (err) {
      if (err instanceof ChatError && err.code === 'not_found') return; // its run started
      throw err;
    }
    try {
      await client.send(q.content, { whileRunning: 'steer' });
    } catch (err) {
      if (!(err instanceof ChatError && err.code === 'no_run')) throw err;
      await client.send(q.content, { whileRunning: 'queue' });
    }
  }

  /** act runs a command, with its buttons disabled until the server answers. */
  private async act(name: string, fn: () => Promise<unknown>): Promise<void> {
    if (this.pending.has(name)) return;
    const client = this.client;
    this.pending.add(name);
    this.schedule();
    try {
      await fn();
    } catch (err) {
      if (this.client === client) this.toast(message(err));
    } finally {
      if (this.client === client) {
        this.pending.delete(name);
        this.panelKey = '';
        this.schedule();
      }
    }
  }

  private async sendMessage(): Promise<void> {
    const { input } = this.els;
    const content = input.value;
    const client = this.client;
    if (!client || content.trim() === '') return;
    input.value = '';
    this.autosize();
    if (this.fresh) {
      // The conversation exists once something is sent to it: connect. chatd creates the
      // session and names it (named gives it its address); the client sends the message
      // once it is named.
      this.fresh = false;
      client.connect();
    }
    // Shown until the server has it: offline, the client keeps the message and sends
    // it when it reconnects.
    const requestId = uuid4();
    const pending = h(
      'li',
      { class: 'msg msg-user', 'data-testid': 'message-pending', 'data-request-id': requestId },
      h('div', { class: 'bubble' }, content),
      h('p', { class: 'msg-status' }, 'Sending…'),
    );
    this.els.pending.append(pending);
    this.schedule();
    try {
      await client.send(content, { requestId, whileRunning: 'queue' });
    } catch (err) {
      if (this.client !== client) return;
      if (input.value === '') {
        input.value = content;
        this.autosize();
      }
      this.toast(`Not sent: ${message(err)}`);
    } finally {
      pending.remove();
    }
  }

  private async loadOlder(): Promise<void> {
    const client = this.client;
    if (!client || this.loadingOlder || !this.state?.hasMore) return;
    this.loadingOlder = true;
    this.schedule();
    try {
      await client.loadOlder(50);
    } catch (err) {
      if (this.client === client) this.toast(`Could not load older messages: ${message(err)}`);
    } finally {
      if (this.client === client) {
        this.loadingOlder = false;
        this.schedule();
      }
    }
  }

  private setDrawer(open: boolean): void {
    const { els } = this;
    const was = els.app.dataset.drawer === 'open';
    els.app.dataset.drawer = open ? 'open' : 'closed';
    els.menu.setAttribute('aria-expanded', String(open));
    els.scrim.hidden = !open;
    if (open && !was) els.newConversation.focus();
    if (!open && was && document.activeElement && byId('sidebar').contains(document.activeElement)) els.menu.focus();
  }

  private autosize(): void {
    const { input } = this.els;
    input.style.height = 'auto';
    input.style.height = `${input.scrollHeight}px`;
  }

  private focusInput(): void {
    // On touch screens focusing would open the keyboard over the conversation.
    if (matchMedia('(pointer: fine)').matches) this.els.input.focus();
  }

  toast(text: string): void {
    const { toast } = this.els;
    toast.textContent = text;
    toast.hidden = false;
    clearTimeout(this.toastTimer);
    this.toastTimer = setTimeout(() => {
      toast.hidden = true;
    }, 5000);
  }
}

new App().start();

/** ruleWord is the first word of a shell call's command: what "allow" would allow. */
/** approvalLine says what waits: a tool of chatd's, or an MCP server's tool and its server. */
function approvalLine(name: string): HTMLElement {
  const { server, tool } = splitToolName(name);
  if (server === null) return h('p', {}, 'The assistant wants to run ', h('b', { 'data-testid': 'approval-tool' }, name), '.');
  return h(
    'p',
    {},
    'The assistant wants to run ',
    h('b', { 'data-testid': 'approval-tool' }, tool),
    ' on the MCP server ',
    h('b', { 'data-testid': 'approval-server' }, server),
    '.',
  );
}

function ruleWord(input: unknown): string {
  const cmd = (input as { command?: unknown } | null)?.command;
  return typeof cmd === 'string' ? (cmd.trim().split(/\s+/)[0] ?? '') : '';
}
