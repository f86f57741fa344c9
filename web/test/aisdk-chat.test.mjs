// chatd as the backend of a stock useChat (the Vercel AI SDK's DefaultChatTransport, with
// resume): the real `ai` package against bin/chatd. Sending, reading to the end, aborting
// the request and reconnecting; what the stream assembles always equals what
// GET /v1/aisdk/chat/{id} has stored. Needs chatd's transport/aisdk (see docs/ai-sdk.md).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readUIMessageStream } from 'ai';
import { startChatd } from './chatd.mjs';
import {
  API,
  NodeChat,
  chatId,
  checkWire,
  consume,
  getJSON,
  plain,
  recorder,
  stored,
  textOf,
  transcript,
  transport,
  userMessage,
  runRow,
} from './aisdk-util.mjs';

test('sendMessages: the request is the one DefaultChatTransport documents; the stream read to its end equals the stored transcript', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '2ms', CHATD_DEMO_WORDS: '40' } });
  try {
    const rec = recorder();
    const t = transport(srv, rec);
    const id = chatId();
    const user = userMessage('hello from the AI SDK');
    const stream = await t.sendMessages({ chatId: id, messages: [user], trigger: 'submit-message', messageId: undefined, abortSignal: undefined });
    const { message, chunks, errors } = await consume(stream).result;
    assert.deepEqual(errors, []);

    // What the SDK sent: POST, JSON, {id, messages, trigger} (messageId undefined: left out).
    const req = rec.requests[0];
    assert.equal(req.method, 'POST');
    assert.equal(req.url, srv.httpURL + API);
    assert.equal(req.headers['content-type'], 'application/json');
    assert.deepEqual(req.body, { id, messages: [user], trigger: 'submit-message' });

    // The stream: one assistant message named by the run, text, finished.
    assert.equal(chunks[0].type, 'start');
    const runId = chunks[0].messageId;
    assert.equal(message.id, runId);
    assert.equal(message.role, 'assistant');
    assert.equal(chunks.at(-1).type, 'finish');
    assert.match(textOf(message), /^Demo reply to "hello from the AI SDK"\./);
    assert.equal(message.parts[0].type, 'step-start');
    assert.ok(message.parts.filter((p) => p.type === 'text').every((p) => p.state === 'done'));

    // The stored transcript: the user's message, then the same assistant message.
    const msgs = await transcript(srv, id);
    assert.equal(msgs.length, 2);
    assert.deepEqual(msgs[0], user, 'the user message as sent, with the id useChat gave it');
    assert.deepEqual(stored(msgs, runId), plain(message));
    assert.equal((await runRow(srv, runId)).status, 'done');

    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

test('useChat without React (AbstractChat): two turns; the chat\'s messages equal the stored transcript, and a new chat loaded from it sends on', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '2ms', CHATD_DEMO_WORDS: '30' } });
  try {
    const rec = recorder();
    const id = chatId();
    const errors = [];
    const finishes = [];
    const chat = new NodeChat({
      id,
      transport: transport(srv, rec),
      onError: (e) => errors.push(e),
      onFinish: (f) => finishes.push(f),
    });
    await chat.sendMessage({ text: 'first question' });
    assert.equal(chat.status, 'ready', String(chat.error));
    await chat.sendMessage({ text: 'second question' });
    assert.equal(chat.status, 'ready', String(chat.error));
    assert.deepEqual(errors, []);
    assert.equal(finishes.length, 2);
    assert.ok(finishes.every((f) => !f.isAbort && !f.isError && !f.isDisconnect));

    // The second request carries the whole history, the first answer included, as useChat sends it.
    const second = rec.requests.filter((r) => r.method === 'POST')[1].body;
    assert.equal(second.id, id);
    assert.equal(second.trigger, 'submit-message');
    assert.deepEqual(second.messages.map((m) => m.role), ['user', 'assistant', 'user']);

    const msgs = await transcript(srv, id);
    assert.deepEqual(msgs.map((m) => m.role), ['user', 'assistant', 'user', 'assistant']);
    // The same messages: user messages with the ids useChat gave them, the runs' answers.
    assert.deepEqual(msgs, plain(chat.messages));

    // A page reload: useChat({ id, messages: <GET transcript> }) sends the next turn.
    const reloaded = new NodeChat({ id, messages: msgs, transport: transport(srv, rec) });
    await reloaded.sendMessage({ text: 'third question' });
    assert.equal(reloaded.status, 'ready', String(reloaded.error));
    const after = await transcript(srv, id);
    assert.equal(after.length, 6);
    assert.deepEqual(after.at(-1), plain(reloaded.messages.at(-1)));
    assert.match(textOf(after.at(-1)), /^Demo reply to "third question"\./);

    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

test('aborting the request does not stop the run; reconnectToStream replays the whole message from its start, equal to the transcript at the end', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '200' } });
  try {
    const rec = recorder();
    const t = transport(srv, rec);
    const id = chatId();

    // Nothing to resume yet: 204, and the SDK returns null (for a chat id chatd never saw, too).
    assert.equal(await t.reconnectToStream({ chatId: id }), null);
    const r204 = await getJSON(`${srv.httpURL}${API}/${id}/stream`);
    assert.equal(r204.status, 204);

    const ac = new AbortController();
    const stream = await t.sendMessages({ chatId: id, messages: [userMessage('a long story please')], trigger: 'submit-message', abortSignal: ac.signal });
    const reader = stream.getReader();
    const first = [];
    let text = '';
    while (text.length < 60) {
      const { value, done } = await reader.read();
      assert.ok(!done, 'the stream ended before the abort');
      first.push(value);
      if (value.type === 'text-delta') text += value.delta;
    }
    const runId = first[0].messageId;
    ac.abort();
    await reader.read().then(
      (r) => assert.ok(r.done, 'nothing after the abort'),
      (e) => assert.equal(e.name, 'AbortError'),
    );

    // The run goes on without anyone reading it.
    const row = await runRow(srv, runId);
    assert.equal(row.status, 'running');

    // Reconnect (what useChat's resume does: GET {api}/{id}/stream).
    const again = await t.reconnectToStream({ chatId: id });
    assert.ok(again, 'reconnectToStream returns a stream while the run is active');
    const get = rec.requests.at(-1);
    assert.equal(get.method, 'GET');
    assert.equal(get.url, `${srv.httpURL}${API}/${id}/stream`);
    const { message, chunks, errors } = await consume(again).result;
    assert.deepEqual(errors, []);
    assert.equal(chunks[0].type, 'start');
    assert.equal(chunks[0].messageId, runId, 'the same message');
    assert.equal(chunks.at(-1).type, 'finish');
    // From the start: the text the first request saw is the beginning of the replay.
    assert.ok(textOf(message).startsWith(text), 'the replay starts at the message\'s start');
    assert.ok(textOf(message).length > text.length);

    const msgs = await transcript(srv, id);
    assert.deepEqual(stored(msgs, runId), plain(message));
    assert.equal((await runRow(srv, runId)).status, 'done');

    // The run has ended: 204 again.
    assert.equal(await t.reconnectToStream({ chatId: id }), null);

    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

test('useChat resume: a chat that stopped reading (stop() aborts the request) resumes with resumeStream() and ends equal to the transcript', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '150' } });
  try {
    const rec = recorder();
    const id = chatId();
    const chat = new NodeChat({ id, transport: transport(srv, rec) });
    const sent = chat.sendMessage({ text: 'tell me more' });
    await chat.waitFor((c) => c.lastMessage?.role === 'assistant' && textOf(c.lastMessage).length > 40, 20000, 'some text');
    const runId = chat.lastMessage.id;
    // stop() in a resumable setup only closes this client's request (see docs/ai-sdk.md):
    // the run continues on chatd.
    await chat.stop();
    await sent;
    assert.equal(chat.status, 'ready');
    const partial = textOf(chat.lastMessage);
    assert.equal((await runRow(srv, runId)).status, 'running');

    // A reload: a new Chat on the stored transcript, then resumeStream() (useChat's resume: true).
    const msgs = await transcript(srv, id);
    const reloaded = new NodeChat({ id, messages: msgs, transport: transport(srv, rec) });
    // The same chat resumes too, at the same time.
    await Promise.all([reloaded.resumeStream(), chat.resumeStream()]);
    assert.equal(reloaded.status, 'ready', String(reloaded.error));
    assert.equal(chat.status, 'ready', String(chat.error));

    const end = await transcript(srv, id);
    assert.deepEqual(end.map((m) => m.role), ['user', 'assistant']);
    for (const c of [chat, reloaded]) {
      assert.equal(c.messages.length, 2, 'the replay replaced the partial message, not added one');
      assert.deepEqual(plain(c.messages[1]), end[1]);
    }
    assert.ok(textOf(end[1]).startsWith(partial));

    // Nothing active: resumeStream() is a no-op (204).
    await reloaded.resumeStream();
    assert.equal(reloaded.status, 'ready');
    assert.equal(reloaded.messages.length, 2);

    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

test('two readers of one run: the second joins mid-run and both assemble the same message', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '5ms', CHATD_DEMO_WORDS: '120' } });
  try {
    const rec = recorder();
    const t = transport(srv, rec);
    const id = chatId();
    const a = consume(await t.sendMessages({ chatId: id, messages: [userMessage('two readers')], trigger: 'submit-message' }));
    await new Promise((r) => setTimeout(r, 150));
    const again = await t.reconnectToStream({ chatId: id });
    assert.ok(again);
    const b = consume(again);
    const [ra, rb] = await Promise.all([a.result, b.result]);
    assert.deepEqual(plain(rb.message), plain(ra.message));
    assert.deepEqual(stored(await transcript(srv, id), ra.message.id), plain(ra.message));
    // The late reader's stream, read on its own by readUIMessageStream, is the same message too.
    let last;
    for await (const m of readUIMessageStream({ stream: new ReadableStream({ start(c) { for (const x of rb.chunks) c.enqueue(x); c.close(); } }) })) last = m;
    assert.deepEqual(plain(last), plain(ra.message));
    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});
