// Helpers for the tests of chatd's Vercel AI SDK backend (transport/aisdk): the real `ai`
// package (pinned in package.json) talking to a real bin/chatd, as a browser's useChat
// would. Nothing here reimplements the SDK: requests go out through DefaultChatTransport,
// streams are read with readUIMessageStream, parseJsonEventStream and uiMessageChunkSchema,
// and the chat tests drive AbstractChat, the class under useChat.
//
// recorder() wraps fetch so every request the SDK sends and every event stream chatd
// answers is kept, raw, for checkWire(): the encoder check every test ends with.
import assert from 'node:assert/strict';
import {
  AbstractChat,
  DefaultChatTransport,
  parseJsonEventStream,
  readUIMessageStream,
  uiMessageChunkSchema,
} from 'ai';

export const API = '/v1/aisdk/chat';

/** A fetch that records what goes out and what comes back (event streams in full). */
export function recorder() {
  const rec = { requests: [], streams: [] };
  rec.fetch = async (input, init = {}) => {
    const url = typeof input === 'string' ? input : input.url;
    const headers = Object.fromEntries(new Headers(init.headers ?? {}).entries());
    const entry = {
      method: init.method ?? 'GET',
      url,
      headers,
      body: typeof init.body === 'string' ? JSON.parse(init.body) : undefined,
    };
    rec.requests.push(entry);
    const res = await fetch(input, init);
    entry.status = res.status;
    if (res.status !== 200 || !res.body || !(res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
      return res;
    }
    const [mine, theirs] = res.body.tee();
    const capture = {
      method: entry.method,
      url,
      status: res.status,
      headers: Object.fromEntries(res.headers.entries()),
      text: '',
      aborted: false,
    };
    capture.done = (async () => {
      const decoder = new TextDecoder();
      const reader = mine.getReader();
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          capture.text += decoder.decode(value, { stream: true });
        }
      } catch {
        capture.aborted = true; // the client gave the request up (an AbortController)
      }
      return capture;
    })();
    rec.streams.push(capture);
    return new Response(theirs, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  return rec;
}

/** A DefaultChatTransport on srv's chatd, exactly as an app would configure it. */
export function transport(srv, rec, opts = {}) {
  return new DefaultChatTransport({ api: srv.httpURL + API, fetch: rec?.fetch, ...opts });
}

/** A user UIMessage as useChat builds it for sendMessage({ text }). */
export function userMessage(text, id = 'u-' + crypto.randomUUID()) {
  return { id, role: 'user', parts: [{ type: 'text', text }] };
}

/** A fresh chat id, as useChat generates them (any string of 1 to 200 characters). */
export function chatId() {
  return 'chat-' + crypto.randomUUID().slice(0, 13);
}

/** JSON's view of a value: what crosses the wire (undefined fields dropped). */
export function plain(v) {
  return JSON.parse(JSON.stringify(v));
}

/**
 * Splits a chunk stream in two: chunks (every UIMessageChunk as it comes, in an array
 * that fills as the stream is read) and message (readUIMessageStream's last snapshot).
 * The returned promise resolves when the stream ended, or rejects with its error.
 */
export function consume(stream, { onChunk } = {}) {
  const chunks = [];
  const errors = [];
  const [a, b] = stream.tee();
  const tapped = a.pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        chunks.push(chunk);
        onChunk?.(chunk, chunks);
        controller.enqueue(chunk);
      },
    }),
  );
  const drain = (async () => {
    const r = tapped.getReader();
    for (;;) if ((await r.read()).done) break;
  })();
  const assembled = (async () => {
    let message;
    for await (const m of readUIMessageStream({ stream: b, onError: (e) => errors.push(e) })) message = m;
    return message;
  })();
  const result = Promise.all([drain, assembled]).then(([, message]) => ({ chunks, message, errors }));
  return { chunks, errors, result };
}

/** Resolves once cond() holds, polling; rejects after ms with what. */
export async function until(cond, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export async function getJSON(url, init) {
  const res = await fetch(url, init);
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : null };
}

export async function postJSON(url, body) {
  return getJSON(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

/** GET /v1/aisdk/chat/{id}: the stored transcript's UIMessages. */
export async function transcript(srv, id) {
  const r = await getJSON(`${srv.httpURL}${API}/${encodeURIComponent(id)}`);
  assert.equal(r.status, 200, `GET transcript: ${JSON.stringify(r.body)}`);
  assert.ok(Array.isArray(r.body.messages), 'the transcript has messages');
  return r.body.messages;
}

export const stop = (srv, id) => postJSON(`${srv.httpURL}${API}/${encodeURIComponent(id)}/stop`);
export const approve = (srv, id, toolCallId, approved = true) =>
  postJSON(`${srv.httpURL}${API}/${encodeURIComponent(id)}/approve`, { toolCallId, approved });

/** The assistant message whose id is runId in a transcript. */
export function stored(messages, runId) {
  const m = messages.find((x) => x.id === runId);
  assert.ok(m, `the transcript has the run's assistant message ${runId}: ${JSON.stringify(messages.map((x) => x.id))}`);
  assert.equal(m.role, 'assistant');
  return m;
}

export function textOf(message) {
  return message.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
}

/** The run's row in chatd's database. */
export async function runRow(srv, runId) {
  const rows = await srv.query(`SELECT id::text, session_id::text, status, request_id FROM runs WHERE id::text = '${runId}'`);
  return rows[0];
}

/** A minimal ChatState: what @ai-sdk/react's Chat keeps in React state, in plain fields. */
class MemoryChatState {
  constructor(messages = []) {
    this.status = 'ready';
    this.error = undefined;
    this.messages = messages;
    this.listeners = new Set();
  }
  pushMessage = (m) => {
    this.messages = this.messages.concat(m);
    this.changed();
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
    this.changed();
  };
  replaceMessage = (i, m) => {
    this.messages = [...this.messages.slice(0, i), this.snapshot(m), ...this.messages.slice(i + 1)];
    this.changed();
  };
  snapshot = (thing) => structuredClone(thing);
  changed() {
    for (const f of this.listeners) f(this);
  }
}

/** useChat without React: AbstractChat on a MemoryChatState. */
export class NodeChat extends AbstractChat {
  constructor({ messages, ...init }) {
    const state = new MemoryChatState(messages);
    super({ ...init, state });
    this.memory = state;
  }
  /** Calls f(chat) on every change of messages until it returns truthy. */
  waitFor(f, ms, what) {
    return until(() => f(this), ms, what);
  }
}

/**
 * The encoder check: every event stream chatd answered (rec.streams) is well-formed
 * server-sent events of UIMessageChunks, as the SDK's own parser reads them:
 *   - 200, content-type text/event-stream, x-vercel-ai-ui-message-stream: v1
 *   - only `data: <json>` events, each ending in a blank line; a complete stream ends
 *     with `data: [DONE]` (an aborted request may stop anywhere)
 *   - parseJsonEventStream with uiMessageChunkSchema accepts every event
 *   - the chunk grammar: start (with messageId) first; text/reasoning parts opened before
 *     their deltas and closed once; tool results for announced calls; a complete stream's
 *     last chunk is finish, abort or error
 *   - readUIMessageStream assembles it without errors, with the text of the deltas
 * Returns the parsed chunks of each stream.
 */
export async function checkWire(rec) {
  const all = [];
  for (const s of rec.streams) {
    await s.done;
    const where = `${s.method} ${s.url}`;
    assert.equal(s.status, 200, where);
    assert.match(s.headers['content-type'], /^text\/event-stream/, `${where}: content-type`);
    assert.equal(s.headers['x-vercel-ai-ui-message-stream'], 'v1', `${where}: x-vercel-ai-ui-message-stream`);

    // The framing, by hand.
    const events = s.text.split('\n\n');
    const tail = events.pop(); // after the last blank line: '' when the stream ended cleanly
    if (!s.aborted) {
      assert.equal(tail, '', `${where}: the stream ends with a blank line`);
      assert.equal(events.at(-1), 'data: [DONE]', `${where}: the stream ends with [DONE]`);
    }
    for (const [i, e] of events.entries()) {
      const lines = e.split('\n').filter((l) => !l.startsWith(':')); // SSE comments (keep-alives) are fine
      if (lines.length === 0) continue;
      assert.equal(lines.length, 1, `${where}: event ${i} is one data line: ${JSON.stringify(e)}`);
      assert.ok(lines[0].startsWith('data: '), `${where}: event ${i} is a data line: ${JSON.stringify(e)}`);
      if (lines[0] === 'data: [DONE]') assert.equal(i, events.length - 1, `${where}: [DONE] is last`);
    }

    // The SDK's parser.
    const bytes = new TextEncoder().encode(s.text);
    const parsed = [];
    const reader = parseJsonEventStream({
      stream: new ReadableStream({
        start(c) {
          c.enqueue(bytes);
          c.close();
        },
      }),
      schema: uiMessageChunkSchema,
    }).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      assert.ok(value.success, `${where}: chunk ${parsed.length} parses: ${value.error}`);
      parsed.push(value.value);
    }
    if (s.aborted && parsed.length === 0) continue;
    checkGrammar(parsed, where, { complete: !s.aborted });

    // readUIMessageStream, and the text equals the deltas.
    const errors = [];
    let message;
    for await (const m of readUIMessageStream({
      stream: new ReadableStream({
        start(c) {
          for (const ch of parsed) c.enqueue(ch);
          c.close();
        },
      }),
      onError: (e) => errors.push(e),
    })) {
      message = m;
    }
    const errorChunks = parsed.filter((c) => c.type === 'error');
    assert.equal(errors.length, errorChunks.length, `${where}: readUIMessageStream reports only the error chunks: ${errors}`);
    const deltas = parsed.filter((c) => c.type === 'text-delta').map((c) => c.delta).join('');
    assert.equal(message ? textOf(message) : '', deltas, `${where}: the assembled text is the deltas`);
    all.push({ url: s.url, chunks: parsed, message });
  }
  return all;
}

export function checkGrammar(chunks, where = 'stream', { complete = true } = {}) {
  assert.equal(chunks[0]?.type, 'start', `${where}: starts with start`);
  assert.equal(typeof chunks[0].messageId, 'string', `${where}: start names the message`);
  assert.ok(chunks[0].messageId.length > 0);
  const open = { text: new Set(), reasoning: new Set() };
  const seen = { text: new Set(), reasoning: new Set() };
  const tools = new Map(); // toolCallId -> 'input' | 'available' | 'waiting' | 'done'
  let inStep = false;
  let ended = null;
  for (const [i, c] of chunks.entries()) {
    const at = `${where}: chunk ${i} ${JSON.stringify(c)}`;
    assert.equal(ended, null, `${at} comes after ${ended}`);
    switch (c.type) {
      case 'start':
        assert.equal(i, 0, `${at}: one start`);
        break;
      case 'start-step':
        assert.ok(!inStep, `${at}: a step inside a step`);
        inStep = true;
        break;
      case 'finish-step':
        assert.ok(inStep, `${at}: finish-step without start-step`);
        assert.equal(open.text.size + open.reasoning.size, 0, `${at}: parts still open at the step's end`);
        inStep = false;
        break;
      case 'text-start':
      case 'reasoning-start': {
        const k = c.type.split('-')[0];
        assert.ok(inStep, `${at}: outside a step`);
        assert.ok(!seen[k].has(c.id), `${at}: id reused`);
        open[k].add(c.id);
        seen[k].add(c.id);
        break;
      }
      case 'text-delta':
      case 'reasoning-delta':
        assert.ok(open[c.type.split('-')[0]].has(c.id), `${at}: delta of a part that is not open`);
        break;
      case 'text-end':
      case 'reasoning-end':
        assert.ok(open[c.type.split('-')[0]].delete(c.id), `${at}: end of a part that is not open`);
        break;
      case 'tool-input-start':
        assert.ok(inStep, `${at}: outside a step`);
        assert.ok(!tools.has(c.toolCallId), `${at}: call announced twice`);
        tools.set(c.toolCallId, 'input');
        break;
      case 'tool-input-available':
        assert.ok(inStep, `${at}: outside a step`);
        assert.ok([undefined, 'input'].includes(tools.get(c.toolCallId)), `${at}: input twice`);
        tools.set(c.toolCallId, 'available');
        break;
      case 'tool-approval-request':
        assert.equal(tools.get(c.toolCallId), 'available', `${at}: approval of a call without input`);
        tools.set(c.toolCallId, 'waiting');
        break;
      case 'tool-approval-response':
        assert.equal(tools.get(c.approvalId), 'waiting', `${at}: response without request`);
        tools.set(c.approvalId, 'decided');
        break;
      case 'reset-step':
        // Drops the current step's parts: a continuation that replays its step (the
        // answer to an approval sent with addToolApprovalResponse) may start with it.
        assert.ok(i === 1, `${at}: reset-step only right after start`);
        inStep = true;
        open.text.clear();
        open.reasoning.clear();
        seen.text.clear();
        seen.reasoning.clear();
        tools.clear();
        break;
      case 'tool-output-available':
        if (c.preliminary) {
          // Output so far of a call still running: more may follow, then the final one.
          assert.ok(['available', 'decided'].includes(tools.get(c.toolCallId)), `${at}: preliminary output of a call not running`);
          break;
        }
      // falls through
      case 'tool-output-error':
      case 'tool-output-denied':
        assert.ok(['available', 'waiting', 'decided'].includes(tools.get(c.toolCallId)), `${at}: output of a call not announced (or twice)`);
        tools.set(c.toolCallId, 'done');
        break;
      case 'finish':
        assert.ok(!inStep, `${at}: finish inside a step (no finish-step)`);
        ended = c.type;
        break;
      case 'abort':
      case 'error':
        ended = c.type;
        break;
      default:
        // other chunk types (message-metadata, data-*) are allowed by the protocol
        break;
    }
  }
  if (complete) {
    assert.ok(['finish', 'abort', 'error'].includes(chunks.at(-1)?.type), `${where}: a complete stream ends with finish, abort or error, not ${JSON.stringify(chunks.at(-1))}`);
  }
}
