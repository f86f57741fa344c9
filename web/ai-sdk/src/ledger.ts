// What a stream has passed to the SDK, so a resumed stream (chatd replays the run from its
// start) passes on only what is new: the text of a part past what was forwarded, steps,
// parts and tool states not seen yet.
import type { UIMessage, UIMessageChunk } from 'ai';

type Part =
  | { kind: 'step' }
  | { kind: 'text' | 'reasoning'; key: string; id: string }
  | { kind: 'tool'; toolCallId: string };

interface Text {
  text: string;
  ended: boolean;
}

export class Ledger {
  /** The run's id (the start chunk's messageId), once seen. */
  runId: string | undefined;
  started = false;
  /** A terminal chunk (finish, abort, error) went out: the stream is over. */
  ended = false;
  private steps = 0;
  private stepsEnded = 0;
  private texts = new Map<string, Text>();
  private once = new Set<string>();
  private preliminary = new Map<string, string>();
  private parts: Part[] = [];
  // Where the current connection's replay is: steps and text offsets it has passed.
  private pass = { steps: 0, stepsEnded: 0, pos: new Map<string, number>() };

  /** A new connection begins: its replay is counted from the run's start. */
  newPass(): void {
    this.pass = { steps: 0, stepsEnded: 0, pos: new Map() };
  }

  /** What of chunk to pass on (null: the SDK has it already). */
  accept(c: UIMessageChunk): UIMessageChunk | null {
    switch (c.type) {
      case 'start':
        if (this.started) return null;
        this.started = true;
        this.runId = c.messageId;
        return c;
      case 'start-step':
        this.pass.steps++;
        if (this.pass.steps <= this.steps) return null;
        this.steps++;
        this.parts.push({ kind: 'step' });
        return c;
      case 'finish-step':
        this.pass.stepsEnded++;
        if (this.pass.stepsEnded <= this.stepsEnded) return null;
        this.stepsEnded++;
        return c;
      case 'reset-step':
        // A continuation (the answer to addToolApprovalResponse) replays its step after
        // this: what the SDK held of the step is dropped, so is what we know of it.
        this.texts.clear();
        this.once.clear();
        this.preliminary.clear();
        this.pass.steps = this.steps;
        this.pass.stepsEnded = this.stepsEnded;
        return c;
      case 'text-start':
      case 'reasoning-start': {
        const kind = c.type === 'text-start' ? 'text' : 'reasoning';
        const key = kind + ':' + c.id;
        if (this.texts.has(key)) return null;
        this.texts.set(key, { text: '', ended: false });
        this.parts.push({ kind, key, id: c.id });
        return c;
      }
      case 'text-delta':
      case 'reasoning-delta': {
        const key = (c.type === 'text-delta' ? 'text:' : 'reasoning:') + c.id;
        const t = this.texts.get(key);
        if (!t) return c;
        const from = this.pass.pos.get(key) ?? 0;
        const to = from + c.delta.length;
        this.pass.pos.set(key, to);
        if (to <= t.text.length) return null;
        const fresh = from >= t.text.length ? c.delta : c.delta.slice(t.text.length - from);
        t.text += fresh;
        return fresh === c.delta ? c : { ...c, delta: fresh };
      }
      case 'text-end':
      case 'reasoning-end': {
        const t = this.texts.get((c.type === 'text-end' ? 'text:' : 'reasoning:') + c.id);
        if (!t) return c;
        if (t.ended) return null;
        t.ended = true;
        return c;
      }
      case 'tool-input-start':
        if (!this.first('tool-input-start:' + c.toolCallId)) return null;
        this.parts.push({ kind: 'tool', toolCallId: c.toolCallId });
        return c;
      case 'tool-input-delta':
        return this.once.has('tool-input-available:' + c.toolCallId) ? null : c;
      case 'tool-input-available':
      case 'tool-input-error':
        if (!this.once.has('tool-input-start:' + c.toolCallId)) {
          this.once.add('tool-input-start:' + c.toolCallId);
          this.parts.push({ kind: 'tool', toolCallId: c.toolCallId });
        }
        return this.first(c.type + ':' + c.toolCallId) ? c : null;
      case 'tool-approval-request':
        return this.first('approval:' + c.toolCallId) ? c : null;
      case 'tool-approval-response':
        return this.first('decided:' + c.approvalId) ? c : null;
      case 'tool-output-available':
        if (this.once.has('output:' + c.toolCallId)) return null;
        if (c.preliminary) {
          const j = JSON.stringify(c.output);
          if (this.preliminary.get(c.toolCallId) === j) return null;
          this.preliminary.set(c.toolCallId, j);
          return c;
        }
        this.once.add('output:' + c.toolCallId);
        return c;
      case 'tool-output-error':
      case 'tool-output-denied':
        return this.first('output:' + c.toolCallId) ? c : null;
      case 'finish':
      case 'abort':
      case 'error':
        if (this.ended) return null;
        this.ended = true;
        return c;
      default: {
        const d = c as { type: string; id?: string; transient?: boolean };
        if (d.type.startsWith('data-') && d.transient) return c; // progress: always the latest
        if (d.type === 'message-metadata') return c;
        return this.first('other:' + JSON.stringify(c)) ? c : null;
      }
    }
  }

  private first(key: string): boolean {
    if (this.once.has(key)) return false;
    this.once.add(key);
    return true;
  }

  /**
   * The chunks that bring what the SDK holds up to the stored message (the run ended
   * while no connection followed it): the rest of each text, parts not seen, tool
   * results, then the step's end and finish. Parts are matched in order.
   */
  completion(stored: UIMessage | undefined, end: UIMessageChunk): UIMessageChunk[] {
    const out: UIMessageChunk[] = [];
    const push = (c: UIMessageChunk) => {
      const x = this.accept(c);
      if (x) out.push(x);
    };
    this.newPass();
    const parts = (stored?.parts ?? []) as Array<Record<string, unknown> & { type: string }>;
    let stepOpen = this.steps > this.stepsEnded;
    let stepsSeen = 0;
    parts.forEach((sp, k) => {
      const mine = this.parts[k];
      if (sp.type === 'step-start') {
        stepsSeen++;
        if (stepsSeen <= this.steps) return;
        if (stepOpen) push({ type: 'finish-step' });
        push({ type: 'start-step' });
        stepOpen = true;
        return;
      }
      if (sp.type === 'text' || sp.type === 'reasoning') {
        const kind = sp.type;
        const text = String(sp.text ?? '');
        if (mine && mine.kind === kind) {
          const t = this.texts.get(mine.key);
          if (t && text.length > t.text.length && text.startsWith(t.text)) {
            this.pass.pos.set(mine.key, t.text.length); // the delta goes on from there
            push({ type: `${kind}-delta`, id: mine.id, delta: text.slice(t.text.length) } as UIMessageChunk);
          }
          push({ type: `${kind}-end`, id: mine.id } as UIMessageChunk);
          return;
        }
        if (mine) return; // not the same part: leave it
        const id = `${this.runId ?? 'chatd'}:${k}`;
        push({ type: `${kind}-start`, id } as UIMessageChunk);
        if (text) push({ type: `${kind}-delta`, id, delta: text } as UIMessageChunk);
        push({ type: `${kind}-end`, id } as UIMessageChunk);
        return;
      }
      if (sp.type.startsWith('tool-') && typeof sp.toolCallId === 'string') {
        const toolCallId = sp.toolCallId;
        if (!mine) {
          push({ type: 'tool-input-start', toolCallId, toolName: sp.type.slice(5) });
          push({ type: 'tool-input-available', toolCallId, toolName: sp.type.slice(5), input: sp.input });
        }
        if (sp.state === 'output-available') push({ type: 'tool-output-available', toolCallId, output: sp.output });
        else if (sp.state === 'output-error') push({ type: 'tool-output-error', toolCallId, errorText: String(sp.errorText ?? '') });
        else if (sp.state === 'output-denied') push({ type: 'tool-output-denied', toolCallId });
      }
    });
    if (this.steps > this.stepsEnded) push({ type: 'finish-step' });
    push(end);
    return out;
  }
}
