// The transcript: one DOM node per message, keyed by the message's id. The client
// library's state is immutable, so a message object that did not change is the same
// object as before and its node is left alone: a delta re-renders one bubble, not the
// transcript.
import type { Message } from '../../client/src/index.ts';
import { h, setAttr, setText } from './dom.ts';
import { renderMarkdown } from './markdown.ts';
import { icon } from './icons.ts';
import { describeDecision } from './format.ts';

interface View {
  el: HTMLLIElement;
  msg: Message;
  update(m: Message): void;
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
      parent.append(note);
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
  const status = h('span', { class: 'tool-status', 'data-testid': 'tool-status' });
  const input = h('pre', { 'data-testid': 'tool-input' });
  const output = h('pre', { 'data-testid': 'tool-output' });
  const outputLabel = h('div', { class: 'tool-label' }, 'Output');
  const error = h('p', { class: 'tool-error', 'data-testid': 'tool-error' });
  const decision = h('p', { class: 'tool-decision', 'data-testid': 'tool-decision' });
  const card = h(
    'div',
    { class: 'tool-card', 'data-testid': 'tool-card' },
    h('div', { class: 'tool-head' }, icon('tool'), name, status),
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
      setText(name, tool?.name ?? 'tool');
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

  constructor(private list: HTMLOListElement) {}

  /** render makes the list show messages (ascending, unique ids). */
  render(messages: readonly Message[]): void {
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
  }

  clear(): void {
    this.views.clear();
    this.list.replaceChildren();
  }
}
