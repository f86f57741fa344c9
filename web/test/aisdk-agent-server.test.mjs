// Tests test/agents/aisdk-agent.mjs, the real AI SDK route that chatd's
// CHATD_AGENT_PROTOCOL=aisdk tests run against: every scripted scenario's
// UI message stream, chunk by chunk, as the ai package produces it.
//
// Run: cd web && node --experimental-websocket --test test/aisdk-agent-server.test.mjs
// Set AISDK_AGENT_DUMP=1 to print each scenario's chunk sequence.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { readUIMessageStream, parseJsonEventStream, uiMessageChunkSchema, DefaultChatTransport } from 'ai';
import { NodeChat } from './aisdk-util.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const script = path.join(here, 'agents', 'aisdk-agent.mjs');

let proc;
let base;

before(async () => {
  proc = spawn(process.execPath, [script, '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise((resolve, reject) => {
    let buf = '';
    proc.stdout.on('data', (d) => {
      buf += d;
      const i = buf.indexOf('\n');
      if (i >= 0) resolve(buf.slice(0, i));
    });
    proc.on('exit', (code) => reject(new Error(`agent exited ${code}`)));
  });
  const m = /^listening (\d+)$/.exec(line);
  assert.ok(m, `first line: ${line}`);
  base = `http://127.0.0.1:${m[1]}`;
});

after(() => {
  proc?.kill();
});

const LONG = Array.from({ length: 200 }, (_, i) => `w${i + 1}`).join(' ');

function userMessage(text, id = 'u-' + text) {
  return { id, role: 'user', parts: [{ type: 'text', text }] };
}

// body is what DefaultChatTransport sends for a submit.
function body(messages, id = 'chat-1') {
  return { id, messages, trigger: 'submit-message' };
}

async function post(b, init = {}) {
  return fetch(`${base}/api/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(b),
    ...init,
  });
}

// sse reads an SSE body into the JSON of its data lines ([DONE] kept as the
// string '[DONE]').
async function sse(res) {
  const text = await res.text();
  const out = [];
  for (const event of text.split('\n\n')) {
    for (const line of event.split('\n')) {
      if (!line.startsWith('data: ')) continue;
      const data = line.slice(6);
      out.push(data === '[DONE]' ? data : JSON.parse(data));
    }
  }
  return out;
}

async function chat(messages) {
  const res = await post(body(messages));
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'text/event-stream');
  assert.equal(res.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
  const chunks = await sse(res);
  assert.equal(chunks.at(-1), '[DONE]');
  return chunks.slice(0, -1);
}

function types(chunks) {
  return chunks.map((c) => c.type);
}

function text(chunks) {
  return chunks.filter((c) => c.type === 'text-delta').map((c) => c.delta).join('');
}

function dump(name, chunks) {
  if (!process.env.AISDK_AGENT_DUMP) return;
  const short = chunks.map((c) => {
    const { type, ...rest } = c;
    const keys = Object.keys(rest).length ? ' ' + JSON.stringify(rest) : '';
    return type + keys;
  });
  console.log(`--- ${name}\n  ${short.join('\n  ')}`);
}

async function json(p, init) {
  const res = await fetch(base + p, init);
  assert.equal(res.status, 200);
  return res.json();
}

// abortsWhen polls /aborts until ok(aborts) or about 2 s.
async function abortsWhen(ok) {
  let aborts;
  for (let i = 0; i < 100; i++) {
    aborts = await json('/aborts');
    if (ok(aborts)) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  return aborts;
}

test('hello: text deltas', async () => {
  const chunks = await chat([userMessage('hello')]);
  dump('hello', chunks);
  assert.deepEqual(types(chunks), [
    'start', 'start-step', 'text-start',
    'text-delta', 'text-delta', 'text-delta', 'text-delta',
    'text-end', 'finish-step', 'finish',
  ]);
  assert.equal(text(chunks), 'Hello from the AI SDK agent.');
  assert.equal(chunks.at(-1).finishReason, 'stop');
  const id = chunks[2].id;
  assert.ok(chunks.slice(2, 8).every((c) => c.id === id));
});

test('the stream parses with the ai package\'s own parser and schema', async () => {
  const res = await post(body([userMessage('hello')]));
  const parsed = parseJsonEventStream({ stream: res.body, schema: uiMessageChunkSchema });
  const chunks = [];
  for await (const r of parsed) {
    assert.ok(r.success, JSON.stringify(r));
    chunks.push(r.value);
  }
  assert.equal(text(chunks), 'Hello from the AI SDK agent.');
});

test('anything else: You said', async () => {
  const chunks = await chat([userMessage('hi there')]);
  assert.equal(text(chunks), 'You said: hi there.');
});

test('tool: lookup runs on the server, then a second step answers', async () => {
  const chunks = await chat([userMessage('tool')]);
  dump('tool', chunks);
  assert.deepEqual(types(chunks), [
    'start', 'start-step',
    'tool-input-start', 'tool-input-delta', 'tool-input-available', 'tool-output-available',
    'finish-step', 'start-step', 'text-start',
    ...Array(5).fill('text-delta'),
    'text-end', 'finish-step', 'finish',
  ]);
  const call = chunks.find((c) => c.type === 'tool-input-available');
  assert.equal(call.toolName, 'lookup');
  assert.deepEqual(call.input, { query: 'chatd' });
  const out = chunks.find((c) => c.type === 'tool-output-available');
  assert.equal(out.toolCallId, call.toolCallId);
  assert.equal(out.output, 'found: chatd');
  assert.equal(text(chunks), 'The lookup said: found: chatd.');
});

// approveRound asks for a transfer and returns the first response's chunks.
async function approveRound() {
  const chunks = await chat([userMessage('approve')]);
  assert.deepEqual(types(chunks), [
    'start', 'start-step',
    'tool-input-start', 'tool-input-delta', 'tool-input-available', 'tool-approval-request',
    'finish-step', 'finish',
  ]);
  const call = chunks.find((c) => c.type === 'tool-input-available');
  assert.equal(call.toolName, 'transfer');
  assert.deepEqual(call.input, { amount: 5 });
  const req = chunks.find((c) => c.type === 'tool-approval-request');
  assert.equal(req.toolCallId, call.toolCallId);
  assert.ok(req.approvalId);
  assert.equal(chunks.at(-1).finishReason, 'tool-calls');
  return { chunks, toolCallId: call.toolCallId, approvalId: req.approvalId };
}

// respond sends the approval response the way chatd would: the previous
// messages plus the assistant message whose tool-transfer part is in state
// approval-responded.
async function respond(toolCallId, approvalID, approved, extra = {}) {
  return chat([
    userMessage('approve'),
    {
      id: 'a-1',
      role: 'assistant',
      parts: [
        { type: 'step-start' },
        {
          type: 'tool-transfer',
          toolCallId,
          state: 'approval-responded',
          input: { amount: 5 },
          approval: { id: approvalID, approved, ...extra },
        },
      ],
    },
  ]);
}

const approvedSequence = [
  'start', 'tool-output-available', 'start-step', 'text-start',
  'text-delta', 'text-delta', 'text-delta',
  'text-end', 'finish-step', 'finish',
];

test('approve: tool-approval-request, then approved with the SDK\'s approvalId', async () => {
  const { chunks, toolCallId, approvalId } = await approveRound();
  dump('approve', chunks);
  const next = await respond(toolCallId, approvalId, true);
  dump('approve → approved (approvalId)', next);
  assert.deepEqual(types(next), approvedSequence);
  const out = next.find((c) => c.type === 'tool-output-available');
  assert.equal(out.toolCallId, toolCallId);
  assert.equal(out.output, 'transferred 5');
  assert.equal(text(next), 'Transferred: transferred 5.');
});

test('approve: any id works as long as it is the part\'s approval.id (e.g. the toolCallId)', async () => {
  const { toolCallId } = await approveRound();
  const byCall = await respond(toolCallId, toolCallId, true);
  assert.deepEqual(types(byCall), approvedSequence);
  assert.equal(text(byCall), 'Transferred: transferred 5.');
  const { toolCallId: id2 } = await approveRound();
  const made = await respond(id2, 'made-up-approval-id', true);
  assert.equal(text(made), 'Transferred: transferred 5.');
});

test('approve: the assistant message needs no step-start part', async () => {
  const { toolCallId, approvalId } = await approveRound();
  const next = await chat([
    userMessage('approve'),
    {
      id: 'a-2',
      role: 'assistant',
      parts: [{
        type: 'tool-transfer', toolCallId, state: 'approval-responded',
        input: { amount: 5 }, approval: { id: approvalId, approved: true },
      }],
    },
  ]);
  assert.deepEqual(types(next), approvedSequence);
  assert.equal(text(next), 'Transferred: transferred 5.');
});

test('approve: denied', async () => {
  const { toolCallId, approvalId } = await approveRound();
  const next = await respond(toolCallId, approvalId, false, { reason: 'no' });
  dump('approve → denied', next);
  assert.deepEqual(types(next), [
    'start', 'tool-output-denied', 'start-step', 'text-start',
    'text-delta', 'text-delta',
    'text-end', 'finish-step', 'finish',
  ]);
  assert.equal(next[1].toolCallId, toolCallId);
  assert.equal(text(next), 'Not transferred.');
});

test('approve: readUIMessageStream builds the part useChat would hold', async () => {
  const res = await post(body([userMessage('approve')]));
  const stream = parseJsonEventStream({ stream: res.body, schema: uiMessageChunkSchema })
    .pipeThrough(new TransformStream({ transform(r, c) { if (r.success) c.enqueue(r.value); } }));
  let last;
  for await (const m of readUIMessageStream({ stream })) last = m;
  const part = last.parts.find((p) => p.type === 'tool-transfer');
  assert.equal(part.state, 'approval-requested');
  assert.deepEqual(part.input, { amount: 5 });
  assert.ok(part.approval.id);
});

test('long: 200 words, one per delta, paced', async () => {
  const t0 = Date.now();
  const chunks = await chat([userMessage('long')]);
  const ms = Date.now() - t0;
  const deltas = chunks.filter((c) => c.type === 'text-delta');
  assert.equal(deltas.length, 200);
  assert.equal(deltas[0].delta, 'w1');
  assert.equal(deltas[1].delta, ' w2');
  assert.equal(text(chunks), LONG);
  assert.ok(ms >= 2000, `took ${ms} ms`);
});

test('long: a partial assistant answer is continued with the rest only', async () => {
  const partial = LONG.split(' ').slice(0, 50).join(' ');
  const chunks = await chat([
    userMessage('long'),
    { id: 'a-long', role: 'assistant', parts: [{ type: 'step-start' }, { type: 'text', text: partial, state: 'done' }] },
  ]);
  const rest = text(chunks);
  assert.ok(rest.startsWith(' w51'), rest.slice(0, 20));
  assert.equal(partial + rest, LONG);
  // a partial that ends inside a word
  const mid = LONG.slice(0, 100);
  const chunks2 = await chat([
    userMessage('long'),
    { id: 'a-long2', role: 'assistant', parts: [{ type: 'text', text: mid }] },
  ]);
  assert.equal(mid + text(chunks2), LONG);
});

test('slow: the client aborts and the server records it', async () => {
  await json('/reset', { method: 'POST' });
  const ac = new AbortController();
  const res = await post(body([userMessage('slow')]), { signal: ac.signal });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  let got = '';
  while (!got.includes('" w3"')) {
    const { value } = await reader.read();
    got += new TextDecoder().decode(value);
  }
  ac.abort();
  const aborts = await abortsWhen((a) => a.count > 0 && a.modelCancelled > 0);
  assert.deepEqual(aborts, { count: 1, texts: ['slow'], modelCancelled: 1 });
});

test('slow: continues a partial answer too', async () => {
  await json('/reset', { method: 'POST' });
  const ac = new AbortController();
  const res = await post(body([
    userMessage('slow'),
    { id: 'a-slow', role: 'assistant', parts: [{ type: 'text', text: 'w1 w2 w3' }] },
  ]), { signal: ac.signal });
  const reader = res.body.getReader();
  let got = '';
  while (!got.includes('" w5"')) {
    const { value } = await reader.read();
    got += new TextDecoder().decode(value);
  }
  ac.abort();
  const deltas = [...got.matchAll(/"delta":"([^"]*)"/g)].map((m) => m[1]);
  assert.deepEqual(deltas.slice(0, 2), [' w4', ' w5']);
  await abortsWhen((a) => a.modelCancelled > 0);
});

test('fail-once: 500 with a JSON body, then Recovered', async () => {
  await json('/reset', { method: 'POST' });
  const res = await post(body([userMessage('fail-once')]));
  assert.equal(res.status, 500);
  assert.match(res.headers.get('content-type'), /application\/json/);
  assert.ok((await res.json()).error);
  const chunks = await chat([userMessage('fail-once')]);
  assert.equal(text(chunks), 'Recovered.');
});

test('garbage: 200 text/plain', async () => {
  const res = await post(body([userMessage('garbage')]));
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'text/plain');
  assert.equal(await res.text(), 'this is not a stream');
});

test('stall: event-stream headers, then nothing until the client goes away', async () => {
  await json('/reset', { method: 'POST' });
  const ac = new AbortController();
  const res = await post(body([userMessage('stall')]), { signal: ac.signal });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'text/event-stream');
  const reader = res.body.getReader();
  const r = await Promise.race([
    reader.read().then(() => 'data', () => 'error'),
    new Promise((resolve) => setTimeout(() => resolve('nothing'), 500)),
  ]);
  assert.equal(r, 'nothing');
  ac.abort();
  const aborts = await abortsWhen((a) => a.count > 0);
  assert.deepEqual(aborts, { count: 1, texts: ['stall'], modelCancelled: 0 });
});

test('/requests records headers and bodies in order; /reset forgets', async () => {
  await json('/reset', { method: 'POST' });
  await chat([userMessage('one')]);
  const res = await post(body([userMessage('two')], 'chat-2'), { headers: { 'content-type': 'application/json', 'x-test': 'yes' } });
  await res.text();
  const reqs = await json('/requests');
  assert.equal(reqs.length, 2);
  assert.equal(reqs[0].body.messages[0].parts[0].text, 'one');
  assert.equal(reqs[1].body.id, 'chat-2');
  assert.equal(reqs[1].body.trigger, 'submit-message');
  assert.equal(reqs[1].headers['x-test'], 'yes');
  assert.deepEqual(await json('/aborts'), { count: 0, texts: [], modelCancelled: 0 });
  await json('/reset', { method: 'POST' });
  assert.deepEqual(await json('/requests'), []);
  assert.deepEqual(await json('/aborts'), { count: 0, texts: [], modelCancelled: 0 });
});

test('useChat\'s own flow (AbstractChat + DefaultChatTransport): approve, addToolApprovalResponse, resend', async () => {
  await json('/reset', { method: 'POST' });
  const chat = new NodeChat({ id: 'chat-usechat', transport: new DefaultChatTransport({ api: `${base}/api/chat` }) });
  await chat.sendMessage({ text: 'approve' });
  const waiting = chat.lastMessage.parts.find((p) => p.type === 'tool-transfer');
  assert.equal(waiting.state, 'approval-requested');
  await chat.addToolApprovalResponse({ id: waiting.approval.id, approved: true });
  await chat.sendMessage();
  assert.equal(chat.status, 'ready', String(chat.error));
  assert.equal(chat.messages.length, 2);
  const msg = chat.lastMessage;
  const done = msg.parts.find((p) => p.type === 'tool-transfer');
  assert.equal(done.state, 'output-available');
  assert.equal(done.output, 'transferred 5');
  assert.equal(msg.parts.filter((p) => p.type === 'text').map((p) => p.text).join(''), 'Transferred: transferred 5.');

  // What useChat sent the second time: the body chatd imitates.
  const reqs = await json('/requests');
  assert.equal(reqs.length, 2);
  const b = reqs[1].body;
  if (process.env.AISDK_AGENT_DUMP) console.log('--- useChat approval resend body\n' + JSON.stringify(b, null, 1));
  assert.equal(b.id, 'chat-usechat');
  assert.equal(b.trigger, 'submit-message');
  assert.equal(b.messageId, msg.id);
  const part = b.messages.at(-1).parts.find((p) => p.type === 'tool-transfer');
  assert.equal(part.state, 'approval-responded');
  assert.deepEqual(part.approval, { id: waiting.approval.id, approved: true });
});
