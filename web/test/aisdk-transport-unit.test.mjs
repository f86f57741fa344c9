// @chatd/ai-sdk's ChatdChatTransport against a scripted fetch (no chatd): the cases a real
// server produces only by chance. A replay chunked otherwise than the live stream, a
// stream that ends cleanly without finish, a token that expires mid-stream, a run that
// fails, an abort (stop) and a resume the SDK replaces, errors with chatd's codes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ChatdChatTransport, ChatdError, chatdErrorCode } from '../ai-sdk/dist/index.js';
import { consume, userMessage } from './aisdk-util.mjs';

const API = 'http://chatd.test/v1/aisdk/chat';

function sse(chunks, { end = true } = {}) {
  const text = chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + (end ? 'data: [DONE]\n\n' : '');
  return new Response(text, { status: 200, headers: { 'content-type': 'text/event-stream', 'x-vercel-ai-ui-message-stream': 'v1' } });
}

/** A fetch that answers each request with the next of answers (a function of the request). */
function scripted(answers) {
  const log = [];
  const fetch = async (url, init = {}) => {
    const req = { url: String(url), method: init.method ?? 'GET', headers: Object.fromEntries(new Headers(init.headers ?? {}).entries()), body: init.body };
    log.push(req);
    const next = answers.shift();
    if (!next) throw new TypeError('fetch failed: no more answers');
    return next(req);
  };
  return { fetch, log };
}

const RUN = 'run-1';
const head = [{ type: 'start', messageId: RUN }, { type: 'start-step' }, { type: 'text-start', id: 't1' }];
const tail = [{ type: 'text-end', id: 't1' }, { type: 'finish-step' }, { type: 'finish' }];

function send(t, chatId = 'c1', abortSignal) {
  return t.sendMessages({ chatId, messages: [userMessage('hi', 'u-1')], trigger: 'submit-message', messageId: undefined, abortSignal });
}

test('a stream that ends cleanly without finish is asked again with the same POST; the replay, chunked otherwise, adds only the new text', async () => {
  const { fetch, log } = scripted([
    () => sse([...head, { type: 'text-delta', id: 't1', delta: 'Hello ' }, { type: 'text-delta', id: 't1', delta: 'wor' }], { end: false }),
    () => sse([...head, { type: 'text-delta', id: 't1', delta: 'Hello world' }, { type: 'text-delta', id: 't1', delta: '!' }, ...tail]),
  ]);
  const t = new ChatdChatTransport({ api: API, fetch, reconnect: { initialMs: 1, maxMs: 5 } });
  const { chunks, message } = await consume(await send(t)).result;
  assert.equal(message.parts.find((p) => p.type === 'text').text, 'Hello world!');
  assert.deepEqual(
    chunks.map((c) => c.type),
    ['start', 'start-step', 'text-start', 'text-delta', 'text-delta', 'text-delta', 'text-delta', 'text-end', 'finish-step', 'finish'],
  );
  assert.deepEqual(chunks.filter((c) => c.type === 'text-delta').map((c) => c.delta), ['Hello ', 'wor', 'ld', '!']);
  assert.equal(log.length, 2);
  assert.equal(log[1].method, 'POST');
  assert.equal(log[1].body, log[0].body, 'the same body: the same message id, the same run');
});

test('a resume that breaks asks GET .../stream again; a 204 then finishes the message from the transcript', async () => {
  const { fetch, log } = scripted([
    () => sse([...head, { type: 'text-delta', id: 't1', delta: 'Part' }], { end: false }),
    () => new Response(null, { status: 204 }),
    () =>
      new Response(
        JSON.stringify({
          messages: [
            { id: 'u-1', role: 'user', parts: [{ type: 'text', text: 'hi' }] },
            { id: RUN, role: 'assistant', parts: [{ type: 'step-start' }, { type: 'text', text: 'Partly stored', state: 'done' }] },
          ],
        }),
        { status: 200, headers: { 'content-type': 'application/json' } },
      ),
  ]);
  const t = new ChatdChatTransport({ api: API, fetch, reconnect: { initialMs: 1, maxMs: 5 } });
  const stream = await t.reconnectToStream({ chatId: 'c 1' });
  const { message, chunks } = await consume(stream).result;
  assert.equal(message.parts.find((p) => p.type === 'text').text, 'Partly stored');
  assert.equal(chunks.at(-1).type, 'finish');
  assert.deepEqual(log.map((r) => `${r.method} ${r.url}`), [
    `GET ${API}/c%201/stream`,
    `GET ${API}/c%201/stream`,
    `GET ${API}/c%201`,
  ]);
});

test('a token that expires mid-stream: the stream is resumed with the headers asked for again', async () => {
  let token = 0;
  const { fetch, log } = scripted([
    () => sse([...head, { type: 'text-delta', id: 't1', delta: 'a' }, { type: 'error', errorText: 'unauthorized: the token expired; resume the stream with a new one' }]),
    () => sse([...head, { type: 'text-delta', id: 't1', delta: 'ab' }, ...tail]),
  ]);
  const t = new ChatdChatTransport({ api: API, fetch, headers: () => ({ authorization: `Bearer t${++token}` }), reconnect: { initialMs: 1, maxMs: 5 } });
  const { message, errors } = await consume(await send(t)).result;
  assert.deepEqual(errors, []);
  assert.equal(message.parts.find((p) => p.type === 'text').text, 'ab');
  assert.equal(log[0].headers.authorization, 'Bearer t1');
  assert.equal(log[1].headers.authorization, 'Bearer t2');
});

test('a run that fails (an error chunk) ends the stream: no reconnect', async () => {
  const { fetch, log } = scripted([() => sse([...head, { type: 'text-delta', id: 't1', delta: 'x' }, { type: 'error', errorText: 'internal: the model failed' }])]);
  const t = new ChatdChatTransport({ api: API, fetch });
  const { errors } = await consume(await send(t)).result;
  assert.equal(errors.length, 1);
  assert.equal(chatdErrorCode(errors[0]), 'internal');
  assert.equal(log.length, 1);
});

test('an abort stops the run (POST .../stop), and the next send goes out after the stop', async () => {
  let release;
  const { fetch, log } = scripted([
    (req) =>
      new Response(
        new ReadableStream({
          start(c) {
            c.enqueue(new TextEncoder().encode(`data: ${JSON.stringify(head[0])}\n\n`));
            release = () => c.error(new DOMException('aborted', 'AbortError'));
          },
        }),
        { status: 200, headers: { 'content-type': 'text/event-stream' } },
      ),
    () => new Response(JSON.stringify({ stopped: true }), { status: 200 }),
    () => sse([...head, ...tail]),
  ]);
  const t = new ChatdChatTransport({ api: API, fetch });
  const ac = new AbortController();
  const s = await send(t, 'c1', ac.signal);
  const reader = s.getReader();
  await reader.read();
  ac.abort();
  release();
  await consume(await send(t)).result;
  assert.deepEqual(log.map((r) => `${r.method} ${r.url}`), [`POST ${API}`, `POST ${API}/c1/stop`, `POST ${API}`]);
});

test('a resume replaced by another at once (what AbstractChat does) is not a stop', async () => {
  const { fetch, log } = scripted([
    () => sse([...head], { end: false }),
    () => sse([...head, ...tail]),
  ]);
  const t = new ChatdChatTransport({ api: API, fetch, reconnect: { initialMs: 1000, maxMs: 1000 } });
  const ac = new AbortController();
  await t.reconnectToStream({ chatId: 'c1', abortSignal: ac.signal });
  ac.abort();
  const s2 = await t.reconnectToStream({ chatId: 'c1' });
  await consume(s2).result;
  await new Promise((r) => setTimeout(r, 20));
  assert.ok(!log.some((r) => r.url.endsWith('/stop')), JSON.stringify(log.map((r) => r.url)));
});

test("chatd's refusals are ChatdErrors: the message starts with the code", async () => {
  const { fetch } = scripted([() => new Response(JSON.stringify({ error: { code: 'queue_full', message: 'ten messages wait already' } }), { status: 409 })]);
  const t = new ChatdChatTransport({ api: API, fetch });
  const err = await send(t).then(() => null, (e) => e);
  assert.ok(err instanceof ChatdError);
  assert.equal(err.code, 'queue_full');
  assert.equal(err.status, 409);
  assert.equal(err.message, 'queue_full: ten messages wait already');
  assert.equal(chatdErrorCode(err), 'queue_full');
  assert.equal(chatdErrorCode(new Error('no code here')), undefined);
});
