// The transcript: one DOM node per message, keyed by the message's id. The client
// library's state is immutable, so a message object that did not change is the same
// object as before and its node is left alone: a delta re-renders one bubble, not the
// transcript.
//
// Under a message are its actions: "< 2/3 >" arrows on a message with alternatives (an
// edited question, a regenerated answer), an edit button on every question (it opens an
// editor in place), a regenerate button under the last message of each answer.
import { branchOf, splitToolName } from '../../client/src/index.ts';
import type { Message } from '../../client/src/index.ts';
import { h, setAttr, setText } from './dom.ts';
import { renderMarkdown } from './markdown.ts';
import { icon, type IconName } from './icons.ts';
import { describeDecision } from './format.ts';

interface View {
  el: HTMLLIElement;
  msg: Message;
  update(m: Message): void;
  /** The row of buttons under the message, once it has any. */
  actions?: HTMLElement;
  /** What the row shows (actionsKey), so an unchanged row keeps its DOM (and focus). */
  actionsKey?: string;
  /** The bubble an edit hides while its editor is open (user messages). */
  bubble?: HTMLElement;
  editor?: HTMLElement;
}

/** What the transcript asks the app to do; each returns once the server answered. */
export interface TranscriptActions {
  /** Sends content as a new version of the question m. */
  edit(m: Message, content: string): Promise<unknown>;
  /** Answers the question of run runId again. */
  regenerate(runId: string): Promise<unknown>;
  /** Shows the branch through messageId. */
  select(messageId: string): Promise<unknown>;
  /** Says what went wrong (a toast). */
  error(text: string): void;
}

/** What the actions depend on besides the messages. */
export interface TranscriptContext {
  /** A run is active: an answer cannot be regenerated. */
  running: boolean;
}

const toolStatusText: Record<string, string> = {
  running: 'running',
  awaiting_approval: 'awaiting approval',
  ok: 'done',
  error: 'failed',
  denied: 'denied',
  cancelled: 'cancelled',
  interrupted: 'interrupted',
};

/** statusNote says how a message that did not complete ended, or null. */
function statusNote(m: Message): { text: string; error: boolean } | null {
  switch (m.status) {
    case 'cancelled':
      return { text: 'Stopped', error: false };
    case 'interrupted':
      return { text: 'Interrupted' + (m.error ? `: ${m.error.message}` : ''), error: false };
    case 'error':
      return { text: m.error ? `Error: ${m.error.message}` : 'Error', error: true };
    default:
      return null;
  }
}

function prettyJSON(v: unknown): string {
  if (v === undefined) return '';
  try {
    return JSON.stringify(v, null, 2);
  } catch {
    return String(v);
  }
}

function base(m: Message, cls: string): HTMLLIElement {
  return h('li', {
    class: `msg ${cls}`,
    'data-message-id': m.id,
    'data-role': m.role,
    'data-testid': `message-${m.kind === 'reasoning' ? 'reasoning' : m.role}`,
  });
}

function common(el: HTMLElement, m: Message): void {
  setAttr(el, 'data-status', m.status);
  // The transcript is a live region: a message being written is busy, so a screen
  // reader reads it once it is complete rather than at every delta.
  setAttr(el, 'aria-busy', m.status === 'streaming' ? 'true' : null);
}

/** noteView keeps the "Stopped"/"Error: ..." line under a message up to date. */
function noteView(parent: HTMLElement): (m: Message) => void {
  let note: HTMLElement | null = null;
  return (m) => {
    const n = statusNote(m);
    if (!n) {
      note?.remove();
      note = null;
      return;
    }
    if (!note) {
      note = h('p', { class: 'msg-status', 'data-testid': 'message-status' });
      // Above the actions, should the message have them.
      parent.insertBefore(note, parent.querySelector(':scope > .msg-actions'));
    }
    setText(note, n.text);
    setAttr(note, 'data-kind', n.error ? 'error' : null);
  };
}

function userView(m: Message): View {
  const bubble = h('div', { class: 'bubble', 'data-testid': 'bubble' });
  const el = base(m, 'msg-user');
  el.append(bubble);
  const view: View = {
    el,
    msg: m,
    bubble,
    update(next) {
      setText(bubble, next.content);
      common(el, next);
      view.msg = next;
    },
  };
  view.update(m);
  return view;
}

function textView(m: Message): View {
  const md = h('div', { class: 'md' });
  const bubble = h('div', { class: 'bubble', 'data-testid': 'bubble' }, md);
  const el = base(m, 'msg-assistant');
  el.append(bubble);
  const note = noteView(el);
  let rendered: string | null = null;
  const view: View = {
    el,
    msg: m,
    update(next) {
      if (next.content !== rendered) {
        md.replaceChildren(renderMarkdown(next.content));
        rendered = next.content;
      }
      common(el, next);
      note(next);
      view.msg = next;
    },
  };
  view.update(m);
  return view;
}

function reasoningView(m: Message): View {
  const summary = h('summary', {}, 'Reasoning');
  const md = h('div', { class: 'md' });
  const details = h('details', { class: 'reasoning' }, summary, md);
  const el = base(m, 'msg-reasoning');
  el.append(details);
  const note = noteView(el);
  let rendered: string | null = null;
  const view: View = {
    el,
    msg: m,
    update(next) {
      // Only while open is the text worth rendering; a closed block renders on toggle.
      if (details.open && next.content !== rendered) {
        md.replaceChildren(renderMarkdown(next.content));
        rendered = next.content;
      }
      setText(
        summary,
        next.status === 'streaming' ? 'Thinking…' : next.content === '' ? 'Reasoning (redacted)' : 'Reasoning',
      );
      common(el, next);
      note(next);
      view.msg = next;
    },
  };
  details.addEventListener('toggle', () => view.update(view.msg));
  view.update(m);
  return view;
}

function toolView(m: Message): View {
  const name = h('span', { class: 'tool-name', 'data-testid': 'tool-name' });
  // An MCP server's tool: the server, then the tool.
  const server = h('span', { class: 'tool-server', 'data-testid': 'tool-server', title: 'MCP server' });
  const status = h('span', { class: 'tool-status', 'data-testid': 'tool-status' });
  const input = h('pre', { 'data-testid': 'tool-input' });
  const output = h('pre', { 'data-testid': 'tool-output' });
  const outputLabel = h('div', { class: 'tool-label' }, 'Output');
  const error = h('p', { class: 'tool-error', 'data-testid': 'tool-error' });
  const decision = h('p', { class: 'tool-decision', 'data-testid': 'tool-decision' });
  const card = h(
    'div',
    { class: 'tool-card', 'data-testid': 'tool-card' },
    h('div', { class: 'tool-head' }, icon('tool'), server, name, status),
    h('div', { class: 'tool-body' }, h('div', { class: 'tool-label' }, 'Input'), input, outputLabel, output, error),
    decision,
  );
  const el = base(m, 'msg-tool');
  el.append(card);
  let inputShown: unknown = Symbol('none');
  const view: View = {
    el,
    msg: m,
    update(next) {
      const tool = next.tool;
      const parts = splitToolName(tool?.name ?? 'tool');
      setText(name, parts.tool);
      setText(server, parts.server ?? '');
      server.hidden = parts.server === null;
      const st = tool?.status ?? 'running';
      setText(status, toolStatusText[st] ?? st);
      setAttr(card, 'data-tool-status', st);
      setAttr(card, 'data-tool-call-id', tool?.callId ?? null);
      if (tool?.input !== inputShown) {
        setText(input, prettyJSON(tool?.input) || '{}');
        inputShown = tool?.input;
      }
      const out = tool?.output ?? '';
      setText(output, out);
      output.hidden = outputLabel.hidden = out === '';
      const err = next.error && st !== 'denied' ? next.error.message : '';
      setText(error, err);
      error.hidden = err === '';
      // Who decided it, when, and how ("approved by you, 14:02").
      const d = tool?.decision;
      const rule = d?.via === 'rule' && tool?.name === 'shell' ? firstWord(tool.input) : tool?.name;
      const said = d ? describeDecision(d, '', rule ?? '') : '';
      setText(decision, said);
      setAttr(decision, 'data-via', d?.via ?? null);
      decision.hidden = said === '';
      common(el, next);
      view.msg = next;
    },
  };
  view.update(m);
  return view;
}

/** firstWord is the first word of a shell call's command: what its approval rule names. */
function firstWord(input: unknown): string {
  const cmd = (input as { command?: unknown } | null)?.command;
  return typeof cmd === 'string' ? (cmd.trim().split(/\s+/)[0] ?? '') : '';
}

function systemView(m: Message): View {
  const el = base(m, 'notice');
  el.setAttribute('role', 'note');
  const view: View = {
    el,
    msg: m,
    update(next) {
      setText(el, next.content);
      common(el, next);
      view.msg = next;
    },
  };
  view.update(m);
  return view;
}

function viewFor(m: Message): View {
  switch (m.role) {
    case 'user':
      return userView(m);
    case 'tool':
      return toolView(m);
    case 'system':
      return systemView(m);
    default:
      return m.kind === 'reasoning' ? reasoningView(m) : textView(m);
  }
}

/** Transcript renders a list of messages into an <ol>, touching only what changed. */
export class Transcript {
  private views = new Map<string, View>();
  /** The commands under way, by key (a button stays disabled until its command is answered). */
  private busy = new Set<string>();
  private last: { messages: readonly Message[]; ctx: TranscriptContext } = { messages: [], ctx: { running: false } };
  /** An arrow pressed: once the branch it selected shows, the focus goes to its arrow there. */
  private focusWanted: { id: string; testid: string } | null = null;

  constructor(
    private list: HTMLOListElement,
    private actions: TranscriptActions,
  ) {}

  /** render makes the list show messages (ascending, unique ids). */
  render(messages: readonly Message[], ctx: TranscriptContext = { running: false }): void {
    this.last = { messages, ctx };
    // Each run's answer ends at its last message held: its regenerate button goes there.
    const answerEnd = new Map<string, string>();
    for (const m of messages) if (m.role !== 'user' && m.runId) answerEnd.set(m.runId, m.id);
    const seen = new Set<string>();
    let prev: Element | null = null;
    for (const m of messages) {
      seen.add(m.id);
      let view = this.views.get(m.id);
      if (!view || view.msg.role !== m.role || view.msg.kind !== m.kind) {
        view?.el.remove();
        view = viewFor(m);
        this.views.set(m.id, view);
      } else if (view.msg !== m) {
        view.update(m);
      }
      const regenerate = m.runId !== undefined && answerEnd.get(m.runId) === m.id ? m.runId : null;
      this.renderActions(view, m, regenerate, ctx);
      const want: ChildNode | null = prev ? prev.nextSibling : this.list.firstChild;
      if (view.el !== want) this.list.insertBefore(view.el, want);
      prev = view.el;
    }
    for (const [id, view] of this.views) {
      if (!seen.has(id)) {
        view.el.remove();
        this.views.delete(id);
      }
    }
    const f = this.focusWanted;
    const there = f && this.views.get(f.id)?.actions;
    if (f && there) {
      this.focusWanted = null;
      // The same arrow, or at the end of the row the other one.
      const arrow =
        there.querySelector<HTMLElement>(`[data-testid=${f.testid}]:not(:disabled)`) ??
        there.querySelector<HTMLElement>('button[data-testid^=branch-]:not(:disabled)');
      arrow?.focus();
    }
  }

  clear(): void {
    this.focusWanted = null;
    this.views.clear();
    this.busy.clear();
    this.list.replaceChildren();
  }

  /** renderActions keeps the row under a message: arrows, edit, regenerate. */
  private renderActions(view: View, m: Message, regenerate: string | null, ctx: TranscriptContext): void {
    const pos = branchOf(m);
    const edit = m.role === 'user' && m.status !== 'streaming';
    const key = JSON.stringify([
      pos && [pos.index, pos.count, pos.prev, pos.next],
      edit,
      regenerate,
      regenerate !== null && (ctx.running || this.busy.has(`regenerate:${regenerate}`)),
      !!view.editor,
    ]);
    if (key === view.actionsKey) return;
    view.actionsKey = key;
    const buttons: HTMLElement[] = [];
    if (pos) {
      const what = m.role === 'user' ? 'version' : 'answer';
      // Not disabled while a selection is under way (a second press is ignored): the
      // button keeps the focus.
      const go = (id: string | undefined, dir: 'prev' | 'next', label: string) =>
        this.iconButton(dir, label, `branch-${dir}`, id === undefined, null, () => {
          if (this.busy.has('select')) return Promise.resolve();
          this.busy.add('select');
          if (document.activeElement?.closest('.msg-actions')) this.focusWanted = { id: id!, testid: `branch-${dir}` };
          return this.actions
            .select(id!)
            .catch((err) => {
              this.focusWanted = null;
              throw err;
            })
            .finally(() => this.busy.delete('select'));
        });
      buttons.push(
        h(
          'span',
          { class: 'branch', role: 'group', 'aria-label': `${what === 'version' ? 'Version' : 'Answer'} ${pos.index + 1} of ${pos.count}`, 'data-testid': 'branch' },
          go(pos.prev, 'prev', `Previous ${what}`),
          h('span', { class: 'branch-position', 'data-testid': 'branch-position', 'aria-hidden': 'true' }, `${pos.index + 1}/${pos.count}`),
          go(pos.next, 'next', `Next ${what}`),
        ),
      );
    }
    if (edit && !view.editor) {
      buttons.push(this.iconButton('pencil', 'Edit this message', 'edit-message', false, null, async () => this.openEditor(view)));
    }
    if (regenerate !== null) {
      buttons.push(
        this.iconButton('regenerate', 'Regenerate this answer', 'regenerate', ctx.running, `regenerate:${regenerate}`, () =>
          this.actions.regenerate(regenerate),
        ),
      );
    }
    const hadFocus = view.actions?.contains(document.activeElement) ? (document.activeElement as HTMLElement).dataset.testid : undefined;
    if (buttons.length === 0) {
      view.actions?.remove();
      delete view.actions;
      return;
    }
    if (!view.actions) {
      view.actions = h('div', { class: 'msg-actions', 'data-testid': 'message-actions' });
      view.el.append(view.actions);
    }
    view.actions.replaceChildren(...buttons);
    if (hadFocus) view.actions.querySelector<HTMLElement>(`[data-testid="${hadFocus}"]:not(:disabled)`)?.focus();
  }

  private iconButton(
    name: IconName,
    label: string,
    testid: string,
    disabled: boolean,
    busyKey: string | null,
    fn: () => Promise<unknown>,
  ): HTMLButtonElement {
    const b = h(
      'button',
      {
        type: 'button',
        class: 'msg-action',
        'aria-label': label,
        title: label,
        'data-testid': testid,
        disabled: disabled || (busyKey !== null && this.busy.has(busyKey)),
      },
      icon(name),
    );
    b.addEventListener('click', () => void this.run(busyKey, fn));
    return b;
  }

  /** run runs a command with its button disabled until the server answers. */
  private async run(busyKey: string | null, fn: () => Promise<unknown>): Promise<void> {
    if (busyKey !== null) {
      if (this.busy.has(busyKey)) return;
      this.busy.add(busyKey);
      this.rerender();
    }
    try {
      await fn();
    } catch (err) {
      this.actions.error(err instanceof Error ? err.message : String(err));
    } finally {
      if (busyKey !== null) {
        this.busy.delete(busyKey);
        this.rerender();
      }
    }
  }

  private rerender(): void {
    this.render(this.last.messages, this.last.ctx);
  }

  /** openEditor replaces a question's bubble with a textarea and Save / Cancel. */
  private openEditor(view: View): void {
    if (view.editor || !view.bubble) return;
    const m = view.msg;
    const input = h('textarea', { class: 'edit-input', rows: 1, 'aria-label': 'Edit your message', 'data-testid': 'edit-input' });
    input.value = m.content;
    const save = h('button', { type: 'submit', class: 'button primary', 'data-testid': 'edit-save' }, 'Save');
    const cancel = h('button', { type: 'button', class: 'button', 'data-testid': 'edit-cancel' }, 'Cancel');
    const form = h('form', { class: 'msg-edit', 'data-testid': 'edit-form' }, input, h('div', { class: 'msg-edit-actions' }, cancel, save));
    const close = () => {
      form.remove();
      delete view.editor;
      view.bubble!.hidden = false;
      this.rerender();
      view.actions?.querySelector<HTMLElement>('[data-testid=edit-message]')?.focus();
    };
    const submit = async () => {
      const content = input.value;
      if (content.trim() === '' || save.disabled) return;
      save.disabled = input.disabled = true;
      try {
        await this.actions.edit(view.msg, content);
        // The new version is on the screen (or coming): this message left the path.
        if (form.isConnected) close();
      } catch (err) {
        save.disabled = input.disabled = false;
        this.actions.error(`Not sent: ${err instanceof Error ? err.message : String(err)}`);
      }
    };
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      void submit();
    });
    cancel.addEventListener('click', close);
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') {
        e.preventDefault();
        close();
      } else if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
        e.preventDefault();
        void submit();
      }
    });
    const autosize = () => {
      input.style.height = 'auto';
      input.style.height = `${input.scrollHeight}px`;
    };
    input.addEventListener('input', autosize);
    view.bubble.hidden = true;
    view.editor = form;
    view.bubble.after(form);
    this.rerender();
    autosize();
    input.focus();
    input.setSelectionRange(input.value.length, input.value.length);
  }
}
