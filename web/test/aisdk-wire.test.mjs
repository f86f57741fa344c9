// The encoder check of chatd's AI SDK backend: every kind of stream chatd writes (a plain
// answer, tool calls, an approval, a stop, a resume, a retry) is read back with the `ai`
// package's own parser (parseJsonEventStream + uiMessageChunkSchema, as
// DefaultChatTransport reads it) and readUIMessageStream, without errors, and the text
// assembled equals the text-deltas sent (checkWire in aisdk-util.mjs). Also the headers,
// 204s, and CORS for a page of another origin. Needs transport/aisdk.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startChatd } from './chatd.mjs';
import {
  API,
  approve,
  chatId,
  checkWire,
  consume,
  recorder,
  stop,
  transport,
  until,
  userMessage,
} from './aisdk-util.mjs';

test('every stream chatd writes parses with the SDK\'s own parser; the assembled text is the deltas', { timeout: 120000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '2ms', CHATD_DEMO_WORDS: '40' } });
  try {
    const rec = recorder();
    const t = transport(srv, rec);
    const send = (id, text, signal) => t.sendMessages({ chatId: id, messages: [userMessage(text)], trigger: 'submit-message', abortSignal: signal });

    // Plain text, with quotes, escapes and non-ASCII in what is echoed back.
    await consume(await send(chatId(), 'hello "wire" \\ tab\there ünïcödé 🚀 <b>&amp;</b>')).result;
    // One tool call; two tool calls.
    await consume(await send(chatId(), 'use the tool')).result;
    await consume(await send(chatId(), 'use your tools')).result;
    // An approval, decided while the stream is open; a denial.
    for (const approved of [true, false]) {
      const id = chatId();
      const run = consume(await send(id, 'approve the sandbox'));
      const { toolCallId } = await until(() => run.chunks.find((c) => c.type === 'tool-approval-request'), 20000, 'the approval request');
      assert.equal((await approve(srv, id, toolCallId, approved)).status, 200);
      await run.result;
    }
    // A stop mid-stream.
    {
      const id = chatId();
      const slow = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '200' } });
      try {
        const ts = transport(slow, rec);
        const run = consume(await ts.sendMessages({ chatId: id, messages: [userMessage('stop me')], trigger: 'submit-message' }));
        await until(() => run.chunks.some((c) => c.type === 'text-delta'), 20000, 'text');
        // An aborted request and a resume, while it runs.
        const ac = new AbortController();
        const aborted = consume(await ts.reconnectToStream({ chatId: id, abortSignal: ac.signal }));
        await until(() => aborted.chunks.some((c) => c.type === 'text-delta'), 20000, 'text on the reconnect');
        ac.abort();
        await aborted.result.catch(() => {});
        const resumed = consume(await ts.reconnectToStream({ chatId: id }));
        await until(() => resumed.chunks.some((c) => c.type === 'text-delta'), 20000, 'text on the resume');
        assert.deepEqual((await stop(slow, id)).body, { stopped: true });
        await Promise.all([run.result, resumed.result]);
        await checkWire(rec); // while slow's streams are still reachable
      } finally {
        await slow.stop();
      }
    }
    // A retry of a finished run.
    {
      const id = chatId();
      const m = userMessage('once only');
      await consume(await t.sendMessages({ chatId: id, messages: [m], trigger: 'submit-message' })).result;
      await consume(await t.sendMessages({ chatId: id, messages: [m], trigger: 'submit-message' })).result;
    }

    const all = await checkWire(rec);
    const kinds = new Set(all.flatMap((s) => s.chunks.map((c) => c.type)));
    for (const k of ['start', 'start-step', 'text-start', 'text-delta', 'text-end', 'tool-input-start', 'tool-input-available', 'tool-output-available', 'tool-approval-request', 'finish-step', 'finish', 'abort']) {
      assert.ok(kinds.has(k), `some stream had a ${k} chunk`);
    }
    assert.ok(all.length >= 9, `${all.length} streams checked`);
  } finally {
    await srv.stop();
  }
});

test('the headers of a stream, a 204 and an error, by plain fetch', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '1ms', CHATD_DEMO_WORDS: '10' } });
  try {
    const id = chatId();
    const res = await fetch(srv.httpURL + API, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id, messages: [userMessage('headers')], trigger: 'submit-message' }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    assert.equal(res.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
    assert.match(res.headers.get('cache-control') ?? '', /no-cache|no-store/);
    const text = await res.text();
    assert.ok(text.startsWith('data: {'), text.slice(0, 40));
    assert.ok(text.endsWith('data: [DONE]\n\n'), text.slice(-40));

    const none = await fetch(`${srv.httpURL}${API}/${id}/stream`);
    assert.equal(none.status, 204);
    assert.equal(await none.text(), '');

    const bad = await fetch(srv.httpURL + API, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{not json' });
    assert.equal(bad.status, 400);
    assert.match(bad.headers.get('content-type'), /^application\/json/);
    const err = await bad.json();
    assert.equal(typeof err.error.code, 'string');
    assert.equal(typeof err.error.message, 'string');
  } finally {
    await srv.stop();
  }
});

test('CORS: a page on an allowed origin may POST (after a preflight) and read the stream; other origins get no CORS headers', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '1ms', CHATD_DEMO_WORDS: '10', CHATD_ALLOWED_ORIGINS: 'localhost:5173' } });
  try {
    const origin = 'http://localhost:5173';
    const id = chatId();
    for (const [method, path] of [['POST', API], ['GET', `${API}/${id}/stream`], ['POST', `${API}/${id}/stop`], ['POST', `${API}/${id}/approve`], ['GET', `${API}/${id}`]]) {
      const pre = await fetch(srv.httpURL + path, {
        method: 'OPTIONS',
        headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': 'authorization, content-type' },
      });
      assert.ok(pre.status === 200 || pre.status === 204, `preflight ${method} ${path}: ${pre.status}`);
      assert.equal(pre.headers.get('access-control-allow-origin'), origin, `${method} ${path}`);
      assert.match((pre.headers.get('access-control-allow-methods') ?? '').toUpperCase(), new RegExp(method), `${method} ${path}`);
      assert.match((pre.headers.get('access-control-allow-headers') ?? '').toLowerCase(), /content-type/);
      assert.match((pre.headers.get('access-control-allow-headers') ?? '').toLowerCase(), /authorization/);
    }
    const rec = recorder();
    const t = transport(srv, rec, { headers: { origin } }); // Node's fetch sends what a browser would
    const r = await consume(await t.sendMessages({ chatId: id, messages: [userMessage('from a dev server')], trigger: 'submit-message' })).result;
    assert.equal(r.chunks.at(-1).type, 'finish');
    assert.equal(rec.streams[0].headers['access-control-allow-origin'], origin);

    const other = await fetch(srv.httpURL + API, {
      method: 'OPTIONS',
      headers: { origin: 'http://evil.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
    });
    assert.equal(other.headers.get('access-control-allow-origin'), null);
    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});
