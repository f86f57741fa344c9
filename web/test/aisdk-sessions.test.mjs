// chatd's AI SDK backend and the rest of chatd: a retried POST is one run (the last user
// message's id is the idempotency key), a chat is one of the caller's sessions (listed by
// GET /v1/sessions), and a WebSocket tab on that session follows a run started over HTTP,
// with consecutive seqs. Real `ai` package, real bin/chatd. Needs transport/aisdk.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { APICallError } from 'ai';
import { startChatd } from './chatd.mjs';
import { nodeWebSocket } from './client-util.mjs';
import {
  API,
  chatId,
  checkWire,
  consume,
  getJSON,
  plain,
  postJSON,
  recorder,
  runRow,
  stored,
  textOf,
  transcript,
  transport,
  until,
  userMessage,
} from './aisdk-util.mjs';

const WebSocket = nodeWebSocket();

async function sessions(srv) {
  const r = await getJSON(`${srv.httpURL}/v1/sessions?limit=100`);
  assert.equal(r.status, 200);
  return r.body.sessions;
}

test('a retried POST with the same message id starts no second run: it streams the same run, while it runs and after it ended', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '120' } });
  try {
    const rec = recorder();
    const t = transport(srv, rec);
    const id = chatId();
    const messages = [userMessage('retry me', 'msg-retry-1')];
    const send = (signal) => t.sendMessages({ chatId: id, messages, trigger: 'submit-message', abortSignal: signal });

    // The first attempt loses its connection after a few words.
    const ac = new AbortController();
    const first = consume(await send(ac.signal));
    await until(() => first.chunks.filter((c) => c.type === 'text-delta').length >= 3, 20000, 'some text');
    ac.abort();
    await first.result.catch(() => {});
    const runId = first.chunks[0].messageId;

    // Retried twice at once, as a flaky network might: both stream the same run, to its end.
    const [r1, r2] = await Promise.all([consume(await send()).result, consume(await send()).result]);
    for (const r of [r1, r2]) {
      assert.deepEqual(r.errors, []);
      assert.equal(r.chunks[0].messageId, runId, 'the same run');
      assert.equal(r.chunks.at(-1).type, 'finish');
    }
    assert.deepEqual(plain(r2.message), plain(r1.message));

    // Retried after it ended: still that run, all of it, nothing new started.
    const r3 = await consume(await send()).result;
    assert.equal(r3.chunks[0].messageId, runId);
    assert.equal(r3.chunks.at(-1).type, 'finish');
    assert.deepEqual(plain(r3.message), plain(r1.message));

    const msgs = await transcript(srv, id);
    assert.deepEqual(msgs.map((m) => m.role), ['user', 'assistant'], 'one user message, one answer');
    assert.deepEqual(stored(msgs, runId), plain(r1.message));
    const list = await sessions(srv);
    assert.equal(list.length, 1, 'one chat, one session');
    assert.equal(list[0].title, 'retry me');
    assert.equal(list[0].activeRun, null);
    const row = await runRow(srv, runId);
    const runs = await srv.query(`SELECT id::text FROM runs WHERE session_id = '${row.session_id}'`);
    assert.deepEqual(runs.map((r) => r.id), [runId], 'one run');

    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

test('another message while a run is active under CHATD_DOUBLE_TEXT=reject: 409 run_active before any stream, and the SDK reports it as an APICallError', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '200', CHATD_DOUBLE_TEXT: 'reject' } });
  try {
    const rec = recorder();
    const t = transport(srv, rec);
    const id = chatId();
    const m1 = userMessage('the first one');
    const run = consume(await t.sendMessages({ chatId: id, messages: [m1], trigger: 'submit-message' }));
    await until(() => run.chunks.length > 0, 20000, 'the start');
    const m2 = userMessage('too soon');
    const raw = await postJSON(srv.httpURL + API, { id, messages: [m1, m2], trigger: 'submit-message' });
    assert.equal(raw.status, 409);
    assert.equal(raw.body.error.code, 'run_active');
    assert.equal(typeof raw.body.error.message, 'string');
    await assert.rejects(
      t.sendMessages({ chatId: id, messages: [m1, m2], trigger: 'submit-message' }),
      (e) => APICallError.isInstance(e) && e.statusCode === 409 && JSON.parse(e.responseBody).error.code === 'run_active',
    );
    // Bad requests are 400s with the same error shape.
    for (const body of [{ id, messages: [], trigger: 'submit-message' }, { id: '', messages: [m1], trigger: 'submit-message' }, { id: 'x'.repeat(201), messages: [m1], trigger: 'submit-message' }]) {
      const r = await postJSON(srv.httpURL + API, body);
      assert.equal(r.status, 400, JSON.stringify(body).slice(0, 80));
      assert.equal(typeof r.body.error.code, 'string');
    }
    const r = await run.result;
    assert.equal(r.chunks.at(-1).type, 'finish');
    assert.deepEqual((await transcript(srv, id)).map((m) => m.role), ['user', 'assistant']);
    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

test('one chat id is one session; two chat ids are two', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '1ms', CHATD_DEMO_WORDS: '10' } });
  try {
    const rec = recorder();
    const t = transport(srv, rec);
    const a = chatId();
    const b = chatId();
    let history = [];
    for (const text of ['one', 'two']) {
      history = [...history, userMessage(text)];
      const r = await consume(await t.sendMessages({ chatId: a, messages: history, trigger: 'submit-message' })).result;
      history = [...history, r.message];
    }
    await consume(await t.sendMessages({ chatId: b, messages: [userMessage('other chat')], trigger: 'submit-message' })).result;
    const list = await sessions(srv);
    assert.equal(list.length, 2);
    assert.deepEqual(list.map((s) => s.title).sort(), ['one', 'other chat']);
    assert.equal((await transcript(srv, a)).length, 4);
    assert.equal((await transcript(srv, b)).length, 2);
    // A chat id chatd never saw: an empty transcript (or 404), never someone else's.
    const none = await getJSON(`${srv.httpURL}${API}/${chatId()}`);
    assert.ok(none.status === 404 || (none.status === 200 && none.body.messages.length === 0), JSON.stringify(none));
    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

function wsTab(srv) {
  const ws = new WebSocket(srv.wsURL);
  const frames = [];
  const waiters = new Set();
  ws.addEventListener('message', (e) => {
    frames.push(JSON.parse(e.data));
    for (const w of waiters) w();
  });
  const opened = new Promise((resolve, reject) => {
    ws.addEventListener('open', resolve, { once: true });
    ws.addEventListener('error', reject, { once: true });
  });
  return {
    ws,
    frames,
    opened,
    send: (f) => ws.send(JSON.stringify(f)),
    waitFor: (pred, ms, what) => until(() => frames.find(pred), ms, what),
    close: () => ws.close(),
  };
}

test('cross-transport: a WebSocket tab on the chat\'s session follows a run started over HTTP with consecutive seqs, and its cancel ends the HTTP stream', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '150' } });
  let tab;
  try {
    const rec = recorder();
    const t = transport(srv, rec);
    const id = chatId();
    const u1 = userMessage('watched from a tab');
    const run = consume(await t.sendMessages({ chatId: id, messages: [u1], trigger: 'submit-message' }));
    await until(() => run.chunks.some((c) => c.type === 'text-delta'), 20000, 'some text over HTTP');
    const runId = run.chunks[0].messageId;

    // The chat's session, by its listing (its id is chatd's, not the chat id).
    const list = await sessions(srv);
    assert.equal(list.length, 1);
    const sessionId = list[0].id;
    assert.notEqual(sessionId, id);
    assert.equal(list[0].activeRun?.runId, runId, 'the HTTP run is the session\'s active run');

    tab = wsTab(srv);
    await tab.opened;
    tab.send({ type: 'hello', sessionId });
    const snap = await tab.waitFor((f) => f.type === 'snapshot' || f.type === 'error', 10000, 'the snapshot');
    assert.equal(snap.type, 'snapshot', JSON.stringify(snap));
    assert.equal(snap.sessionId, sessionId);
    assert.equal(snap.activeRun?.runId, runId);
    await tab.waitFor((f) => f.type === 'chat.done' && f.runId === runId, 20000, 'chat.done on the tab');
    const http = await run.result;
    assert.equal(http.chunks.at(-1).type, 'finish');

    // Consecutive seqs from the snapshot's lastSeq, no gap, no duplicate.
    const events = tab.frames.filter((f) => typeof f.seq === 'number');
    events.forEach((e, i) => assert.equal(e.seq, snap.lastSeq + 1 + i, `event ${i} (${e.type})`));
    assert.ok(events.every((e) => e.runId === runId));

    // The tab's text (snapshot so far + deltas) is the HTTP stream's text.
    const content = new Map();
    for (const m of snap.messages) if (m.role === 'assistant' && m.runId === runId && !m.kind) content.set(m.id, m.content);
    for (const e of events) {
      if (e.type === 'assistant.segment.started' && !e.message.kind) content.set(e.message.id, e.message.content);
      if (e.type === 'chat.delta' && content.has(e.messageId)) content.set(e.messageId, content.get(e.messageId) + e.text);
    }
    assert.equal([...content.values()].join(''), textOf(http.message));
    // The text parts are the segments: one text part per assistant text message, same ids.
    const textStarts = http.chunks.filter((c) => c.type === 'text-start').map((c) => c.id);
    assert.deepEqual(textStarts, [...content.keys()]);

    // A cancel from the tab ends the next HTTP run with abort.
    const next = consume(await t.sendMessages({ chatId: id, messages: [u1, http.message, userMessage('and now cancel')], trigger: 'submit-message' }));
    await until(() => next.chunks.some((c) => c.type === 'text-delta'), 20000, 'text of the second run');
    const nextRun = next.chunks[0].messageId;
    await tab.waitFor((f) => f.type === 'chat.started' && f.runId === nextRun, 10000, 'the second run on the tab');
    tab.send({ type: 'chat.cancel', requestId: 'cancel-1' });
    const ack = await tab.waitFor((f) => f.requestId === 'cancel-1' && (f.type === 'ack' || f.type === 'error'), 10000, 'the cancel\'s ack');
    assert.equal(ack.type, 'ack', JSON.stringify(ack));
    const n = await next.result;
    assert.equal(n.chunks.at(-1).type, 'abort');
    assert.equal((await runRow(srv, nextRun)).status, 'cancelled');
    await checkWire(rec);
  } finally {
    tab?.close();
    await srv.stop();
  }
});

test('regenerate-message answers the last user message again as a new run: a branch beside the old answer, which stays reachable', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '1ms', CHATD_DEMO_WORDS: '12' } });
  try {
    const rec = recorder();
    const t = transport(srv, rec);
    const id = chatId();
    const user = userMessage('say it twice', 'msg-regen-1');
    const first = await consume(await t.sendMessages({ chatId: id, messages: [user], trigger: 'submit-message' })).result;
    assert.equal(first.chunks.at(-1).type, 'finish');
    const firstRun = first.chunks[0].messageId;

    const again = () => t.sendMessages({ chatId: id, messages: [user, first.message], trigger: 'regenerate-message', messageId: firstRun });
    const second = await consume(await again()).result;
    assert.deepEqual(second.errors, []);
    assert.equal(second.chunks.at(-1).type, 'finish');
    const secondRun = second.chunks[0].messageId;
    assert.notEqual(secondRun, firstRun, 'a new run');
    assert.equal(textOf(second.message), textOf(first.message), 'the demo says the same again');

    // Retried (a lost answer): the same new run, no third.
    const retried = await consume(await again()).result;
    assert.equal(retried.chunks[0].messageId, secondRun);

    // The transcript is the active path: the new answer, the second of two at its branch
    // point (metadata.chatd.branch, also sent on the stream as message-metadata).
    const msgs = await transcript(srv, id);
    assert.deepEqual(msgs.map((m) => [m.role, m.id]), [['user', 'msg-regen-1'], ['assistant', secondRun]], 'the new answer is shown');
    assert.deepEqual(stored(msgs, secondRun), plain(second.message));
    const branch = msgs[1].metadata.chatd.branch;
    assert.deepEqual([branch.index, branch.count, branch.siblings.length], [1, 2, 2]);
    assert.equal(msgs[0].metadata, undefined, 'the question is no branch point');
    // The old answer is the other branch: readable, and selectable again.
    const old = await getJSON(`${srv.httpURL}${API}/${encodeURIComponent(id)}?through=${branch.siblings[0]}`);
    assert.equal(old.status, 200);
    assert.deepEqual(old.body.messages.map((m) => [m.role, m.id]), [['user', 'msg-regen-1'], ['assistant', firstRun]]);
    assert.equal(textOf(old.body.messages[1]), textOf(first.message));
    const selected = await postJSON(`${srv.httpURL}${API}/${encodeURIComponent(id)}/branch`, { messageId: branch.siblings[0] });
    assert.equal(selected.status, 200);
    assert.deepEqual(selected.body.messages, old.body.messages);
    assert.deepEqual(await transcript(srv, id), old.body.messages);
    assert.equal((await runRow(srv, firstRun)).status, 'done');
    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});
