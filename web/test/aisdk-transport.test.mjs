// @chatd/ai-sdk's ChatdChatTransport (web/ai-sdk, the committed build) under the real `ai`
// package's AbstractChat (what useChat wraps) against a real chatd, through a proxy that
// can cut the connection: what the chat shows ends equal to the stored transcript, word
// for word, after cuts; stop() stops the run for everyone; a message sent mid-run is
// answered after the run; errors carry chatd's codes; the initial load never throws.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ChatdChatTransport, ChatdError, loadChatdChat, followChatdChat } from '../ai-sdk/dist/index.js';
import { startChatd } from './chatd.mjs';
import { cutProxy } from './cutproxy.mjs';
import { API, NodeChat, chatId, plain, runRow, stored, textOf, transcript, until, userMessage } from './aisdk-util.mjs';

/** A transport on base (chatd, or the proxy in front of it), recording its reconnects. */
function chatdTransport(base, opts = {}) {
  const reconnects = [];
  const t = new ChatdChatTransport({
    api: base + API,
    reconnect: { initialMs: 50, maxMs: 500 },
    onReconnect: (r) => reconnects.push({ ...r, at: Date.now() }),
    ...opts,
  });
  t.reconnects = reconnects;
  return t;
}

/** The assistant message's text as the chat shows it, and a check that it has no repeats. */
function shown(chat) {
  return textOf(chat.lastMessage);
}

test('a send streamed to its end equals the stored transcript', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '2ms', CHATD_DEMO_WORDS: '40' } });
  try {
    const t = chatdTransport(srv.httpURL);
    const id = chatId();
    const chat = new NodeChat({ id, transport: t });
    await chat.sendMessage({ text: 'hello through @chatd/ai-sdk' });
    assert.equal(chat.status, 'ready', String(chat.error));
    const msgs = await transcript(srv, id);
    assert.equal(msgs.length, 2);
    assert.deepEqual(plain(chat.messages), msgs);
    assert.match(textOf(msgs[1]), /^Demo reply to "hello through @chatd\/ai-sdk"\./);
    assert.equal((await runRow(srv, msgs[1].id)).status, 'done');
    assert.deepEqual(t.reconnects, []);
    assert.equal(t.isStreaming(id), false);
  } finally {
    await srv.stop();
  }
});

test('a stream cut mid-reply is resumed by the transport: the chat ends equal to the transcript, nothing twice', { timeout: 90000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '200' } });
  const proxy = await cutProxy(srv.addr);
  try {
    const t = chatdTransport(proxy.url);
    const id = chatId();
    const errors = [];
    const finishes = [];
    const chat = new NodeChat({ id, transport: t, onError: (e) => errors.push(e), onFinish: (f) => finishes.push(f) });
    const statuses = new Set();
    chat.memory.listeners.add((s) => statuses.add(s.status));
    const sent = chat.sendMessage({ text: 'a long answer please' });

    // Three cuts, each once more text has arrived; the time from each cut to the next
    // text on screen is the recovery.
    const recoveries = [];
    for (let i = 0; i < 3; i++) {
      const min = 60 + i * 300;
      await chat.waitFor((c) => c.lastMessage?.role === 'assistant' && shown(c).length > min, 20000, `text past ${min}`);
      const before = shown(chat).length;
      const at = performance.now();
      proxy.cut();
      await chat.waitFor((c) => shown(c).length > before, 20000, 'text after the cut');
      recoveries.push(Math.round(performance.now() - at));
    }
    // And a network that is down for 800 ms: the transport retries with backoff.
    await chat.waitFor((c) => shown(c).length > 1000, 20000, 'text past 1000');
    const before = shown(chat).length;
    const downAt = performance.now();
    proxy.down();
    setTimeout(() => proxy.up(), 800);
    await chat.waitFor((c) => shown(c).length > before, 20000, 'text after the network came back');
    const downRecovery = Math.round(performance.now() - downAt);

    await sent;
    assert.equal(chat.status, 'ready', String(chat.error));
    assert.deepEqual(errors, []);
    assert.ok(!statuses.has('error'), 'never in error');
    assert.equal(finishes.length, 1);
    assert.ok(!finishes[0].isDisconnect && !finishes[0].isError && !finishes[0].isAbort);

    const msgs = await transcript(srv, id);
    assert.equal(msgs.length, 2);
    assert.equal(shown(chat), textOf(msgs[1]), 'word for word, no duplicated text');
    assert.deepEqual(plain(chat.messages), msgs);
    assert.ok(t.reconnects.length >= 4, `reconnected after each cut: ${t.reconnects.length}`);
    console.log(`# recoveries after a cut (ms): ${recoveries.join(', ')}; after 800 ms down: ${downRecovery} ms; reconnect attempts ${t.reconnects.length}`);
  } finally {
    await proxy.close();
    await srv.stop();
  }
});

test('a send cut while its run ends unwatched: the retried POST (same message id) streams the ended run, nothing twice', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '60' } });
  const proxy = await cutProxy(srv.addr);
  try {
    const t = chatdTransport(proxy.url, { reconnect: { initialMs: 1500, maxMs: 1500 } });
    const id = chatId();
    const chat = new NodeChat({ id, transport: t });
    const sent = chat.sendMessage({ text: 'short one' });
    await chat.waitFor((c) => c.lastMessage?.role === 'assistant' && shown(c).length > 30, 20000, 'some text');
    const runId = chat.lastMessage.id;
    proxy.down();
    await until(async () => (await runRow(srv, runId)).status === 'done', 20000, 'the run to end');
    proxy.up();
    await sent;
    assert.equal(chat.status, 'ready', String(chat.error));
    const msgs = await transcript(srv, id);
    assert.equal(shown(chat), textOf(stored(msgs, runId)));
  } finally {
    await proxy.close();
    await srv.stop();
  }
});

test('stop() stops the run on the server (stored cancelled) and the next send works at once', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '300' } });
  try {
    const t = chatdTransport(srv.httpURL);
    const id = chatId();
    const errors = [];
    const chat = new NodeChat({ id, transport: t, onError: (e) => errors.push(e) });
    const sent = chat.sendMessage({ text: 'go on and on' });
    await chat.waitFor((c) => c.lastMessage?.role === 'assistant' && shown(c).length > 40, 20000, 'some text');
    const runId = chat.lastMessage.id;
    const at = performance.now();
    await chat.stop();
    await sent;
    assert.equal(chat.status, 'ready');
    await until(async () => (await runRow(srv, runId)).status === 'cancelled', 10000, 'the run stored cancelled');
    const stopMs = Math.round(performance.now() - at);

    await chat.sendMessage({ text: 'and now this' });
    assert.equal(chat.status, 'ready', String(chat.error));
    assert.deepEqual(errors, []);
    const msgs = await transcript(srv, id);
    assert.deepEqual(msgs.map((m) => m.role), ['user', 'assistant', 'user', 'assistant']);
    assert.match(textOf(msgs[3]), /^Demo reply to "and now this"\./);
    assert.deepEqual(plain(chat.messages.at(-1)), msgs[3]);
    console.log(`# stop(): run stored cancelled within ${stopMs} ms`);
  } finally {
    await srv.stop();
  }
});

test('a resume replaced by another (the SDK aborts the first) does not stop the run', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '120' } });
  try {
    const t = chatdTransport(srv.httpURL);
    const id = chatId();
    const chat = new NodeChat({ id, transport: t });
    const sent = chat.sendMessage({ text: 'for two readers' });
    await chat.waitFor((c) => c.lastMessage?.role === 'assistant' && shown(c).length > 20, 20000, 'some text');
    const runId = chat.lastMessage.id;
    const other = new NodeChat({ id, transport: t, messages: await transcript(srv, id) });
    // Two resumes at once (React StrictMode mounts twice): the SDK aborts the first.
    await Promise.all([other.resumeStream(), other.resumeStream(), sent]);
    assert.equal((await runRow(srv, runId)).status, 'done');
    const msgs = await transcript(srv, id);
    assert.deepEqual(plain(other.messages), msgs);
    assert.deepEqual(plain(chat.messages), msgs);
  } finally {
    await srv.stop();
  }
});

test('a message sent while a reply streams is queued by chatd and answered after it', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '120' } });
  try {
    const t = chatdTransport(srv.httpURL);
    const id = chatId();
    const errors = [];
    const chat = new NodeChat({ id, transport: t, onError: (e) => errors.push(e) });
    const first = chat.sendMessage({ text: 'first' });
    await chat.waitFor((c) => c.lastMessage?.role === 'assistant' && shown(c).length > 20, 20000, 'some text');
    const second = chat.sendMessage({ text: 'second, sent mid-run' });
    await Promise.all([first, second]);
    assert.deepEqual(errors, []);
    assert.equal(chat.status, 'ready', String(chat.error));
    const msgs = await transcript(srv, id);
    assert.deepEqual(msgs.map((m) => m.role), ['user', 'assistant', 'user', 'assistant']);
    assert.match(textOf(msgs[1]), /^Demo reply to "first"\./);
    assert.match(textOf(msgs[3]), /^Demo reply to "second, sent mid-run"\./);
    // The chat shows both answers as stored (the second after its question).
    for (const m of msgs.filter((x) => x.role === 'assistant')) {
      assert.deepEqual(plain(chat.messages.find((x) => x.id === m.id)), m);
    }
    assert.deepEqual(t.reconnects, [], 'the queued stream was not taken for a broken one');
  } finally {
    await srv.stop();
  }
});

test("chatd's errors are ChatdErrors with the code readable", { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '100' } });
  try {
    const t = chatdTransport(srv.httpURL);
    const id = chatId();
    const chat = new NodeChat({ id, transport: t });
    const first = chat.sendMessage({ text: 'first' });
    await chat.waitFor((c) => c.lastMessage?.role === 'assistant', 20000, 'the run');
    const err = await t
      .sendMessages({ chatId: id, messages: [userMessage('refused')], trigger: 'submit-message', messageId: undefined, abortSignal: undefined, body: { whileRunning: 'reject' } })
      .then(() => null, (e) => e);
    assert.ok(err instanceof ChatdError, String(err));
    assert.equal(err.code, 'run_active');
    assert.equal(err.status, 409);
    assert.match(err.message, /^run_active: /);
    await first;
  } finally {
    await srv.stop();
  }
});

test('loadChatdChat: the transcript, an empty chat, and ok:false (never a throw) when chatd is unreachable', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '1ms', CHATD_DEMO_WORDS: '5' } });
  try {
    const id = chatId();
    const empty = await loadChatdChat(srv.httpURL + API, id);
    assert.deepEqual(empty, { ok: true, messages: [], activeRunId: null });
    const chat = new NodeChat({ id, transport: chatdTransport(srv.httpURL) });
    await chat.sendMessage({ text: 'stored' });
    const loaded = await loadChatdChat(srv.httpURL + API, id, { headers: async () => ({}) });
    assert.equal(loaded.ok, true);
    assert.equal(loaded.activeRunId, null, 'no run is active once it ended');
    assert.deepEqual(loaded.messages, await transcript(srv, id));
  } finally {
    await srv.stop();
  }
  // A port nothing listens on.
  const dead = await loadChatdChat('http://127.0.0.1:1' + API, 'x');
  assert.equal(dead.ok, false);
  assert.equal(dead.error.code, 'network');
  assert.equal(typeof dead.retry, 'function');
  assert.equal((await dead.retry()).ok, false);
});

test('followChatdChat: an idle chat follows a run another client started', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '150' } });
  try {
    const id = chatId();
    const a = new NodeChat({ id, transport: chatdTransport(srv.httpURL) });
    await a.sendMessage({ text: 'make the chat' });
    const bt = chatdTransport(srv.httpURL);
    const b = new NodeChat({ id, transport: bt, messages: await transcript(srv, id) });
    const unfollow = followChatdChat(bt, id, { resumeStream: () => b.resumeStream(), setMessages: (m) => (b.messages = m) });
    try {
      await new Promise((r) => setTimeout(r, 300));
      // b shows the run while it streams: text grows while b's status is streaming.
      let live = 0;
      b.memory.listeners.add((st) => {
        if (st.status === 'streaming' && st.messages.length === 4) live = Math.max(live, textOf(st.messages[3]).length);
      });
      const startedAt = performance.now();
      const sent = a.sendMessage({ text: 'from the other tab' });
      await b.waitFor(() => live > 0, 10000, 'b to show the run live');
      const followMs = Math.round(performance.now() - startedAt);
      await sent;
      assert.ok(live > 0);
      console.log(`# another client's run: first text streaming in the idle chat ${followMs} ms after the send`);
      const end = await transcript(srv, id);
      await b.waitFor((c) => c.status === 'ready' && JSON.stringify(plain(c.messages)) === JSON.stringify(end), 5000, 'b equal to the transcript').catch(() => {});
      assert.deepEqual(plain(b.messages), end);
      assert.deepEqual(plain(a.messages), end);
    } finally {
      unfollow();
    }
  } finally {
    await srv.stop();
  }
});

for (const [how, crash] of [
  ['SIGTERM', false],
  ['kill -9', true],
]) {
  test(`chatd stopped with ${how} mid-reply and started again: the transport resumes, the chat ends equal to the transcript`, { timeout: 90000 }, async () => {
    const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '250' } });
    try {
      const t = chatdTransport(srv.httpURL);
      const id = chatId();
      const errors = [];
      const statuses = [];
      const chat = new NodeChat({ id, transport: t, onError: (e) => errors.push(e) });
      chat.memory.listeners.add((s) => statuses.push(s.status));
      const sent = chat.sendMessage({ text: 'survive a restart' });
      await chat.waitFor((c) => c.lastMessage?.role === 'assistant' && shown(c).length > 200, 20000, 'some text');
      const before = shown(chat).length;
      const at = performance.now();
      if (crash) await srv.kill();
      else await srv.terminate();
      await srv.start(srv.addr);
      const upMs = Math.round(performance.now() - at);
      await chat.waitFor((c) => shown(c).length > before, 30000, 'text after the restart');
      const recoveryMs = Math.round(performance.now() - at);
      await sent;
      assert.equal(chat.status, 'ready', String(chat.error));
      assert.deepEqual(errors, []);
      assert.ok(!statuses.includes('error'), 'never in error');
      const msgs = await transcript(srv, id);
      assert.equal(shown(chat), textOf(msgs.at(-1)), 'word for word, nothing twice');
      assert.deepEqual(plain(chat.messages), msgs);
      console.log(`# ${how}: chatd back after ${upMs} ms, text flowing again after ${recoveryMs} ms (${t.reconnects.length} reconnect attempts)`);
    } finally {
      await srv.stop();
    }
  });
}

test('a cut while a queued message waits for its run: both answers end as stored, the message queued once', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '150' } });
  const proxy = await cutProxy(srv.addr);
  try {
    const t = chatdTransport(proxy.url);
    const id = chatId();
    const errors = [];
    const chat = new NodeChat({ id, transport: t, onError: (e) => errors.push(e) });
    const first = chat.sendMessage({ text: 'first' });
    await chat.waitFor((c) => c.lastMessage?.role === 'assistant' && shown(c).length > 20, 20000, 'some text');
    const second = chat.sendMessage({ text: 'second, queued' });
    await new Promise((r) => setTimeout(r, 200)); // the second POST is answered and waits
    proxy.cut(); // both streams break: the running one and the queued one's wait
    await new Promise((r) => setTimeout(r, 300));
    proxy.cut(); // and again, later
    await Promise.all([first, second]);
    assert.deepEqual(errors, []);
    assert.equal(chat.status, 'ready', String(chat.error));
    const msgs = await transcript(srv, id);
    assert.deepEqual(msgs.map((m) => m.role), ['user', 'assistant', 'user', 'assistant']);
    assert.match(textOf(msgs[3]), /^Demo reply to "second, queued"\./);
    for (const m of msgs.filter((x) => x.role === 'assistant')) {
      assert.deepEqual(plain(chat.messages.find((x) => x.id === m.id)), m, 'each answer word for word');
    }
    const runs = await srv.query(`SELECT status FROM runs`);
    assert.equal(runs.length, 2, 'two runs: the retried POSTs started nothing new');
  } finally {
    await proxy.close();
    await srv.stop();
  }
});

test('a resumed stream cut while its run ends: the rest comes from the transcript (GET .../stream is 204 by then)', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '100' } });
  const proxy = await cutProxy(srv.addr);
  try {
    const id = chatId();
    const a = new NodeChat({ id, transport: chatdTransport(srv.httpURL) });
    const sent = a.sendMessage({ text: 'followed through a proxy' });
    await a.waitFor((c) => c.lastMessage?.role === 'assistant' && shown(c).length > 10, 20000, 'the run');
    const runId = a.lastMessage.id;
    const bt = chatdTransport(proxy.url, { reconnect: { initialMs: 1500, maxMs: 1500 } });
    const b = new NodeChat({ id, transport: bt, messages: await transcript(srv, id) });
    const resumed = b.resumeStream();
    await b.waitFor((c) => c.lastMessage?.id === runId && shown(c).length > 100, 20000, 'b to follow');
    proxy.down();
    await sent;
    await until(async () => (await runRow(srv, runId)).status === 'done', 20000, 'the run to end');
    proxy.up();
    await resumed;
    assert.equal(b.status, 'ready', String(b.error));
    const msgs = await transcript(srv, id);
    assert.equal(shown(b), textOf(stored(msgs, runId)), 'word for word');
    assert.deepEqual(plain(b.messages), msgs);
  } finally {
    await proxy.close();
    await srv.stop();
  }
});

test('followChatdChat in the tab that sends: its own runs are not resumed or reloaded twice', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '5ms', CHATD_DEMO_WORDS: '80' } });
  try {
    const id = chatId();
    const t = chatdTransport(srv.httpURL);
    const errors = [];
    const statuses = [];
    const a = new NodeChat({ id, transport: t, onError: (e) => errors.push(e) });
    a.memory.listeners.add((s) => statuses.push(s.status));
    await a.sendMessage({ text: 'make the chat' });
    let resumes = 0;
    const unfollow = followChatdChat(t, id, {
      resumeStream: () => {
        resumes++;
        return a.resumeStream();
      },
      setMessages: (m) => (a.messages = m),
      onError: (e) => errors.push(e),
    });
    try {
      await new Promise((r) => setTimeout(r, 200));
      for (const text of ['second', 'third']) {
        await a.sendMessage({ text });
        assert.equal(a.status, 'ready', String(a.error));
      }
      await new Promise((r) => setTimeout(r, 300));
      assert.deepEqual(errors, []);
      assert.ok(!statuses.includes('error'));
      assert.equal(resumes, 0, 'its own runs were streamed by their sends');
      assert.deepEqual(plain(a.messages), await transcript(srv, id));
    } finally {
      unfollow();
    }
  } finally {
    await srv.stop();
  }
});

test('an approval: the stream cut while the call waits is resumed with the request once; POST approve; the chat ends as stored', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '2ms', CHATD_DEMO_WORDS: '30' } });
  const proxy = await cutProxy(srv.addr);
  try {
    const t = chatdTransport(proxy.url);
    const id = chatId();
    const errors = [];
    const chat = new NodeChat({ id, transport: t, onError: (e) => errors.push(e) });
    const sent = chat.sendMessage({ text: 'please approve the sandbox call' });
    const waiting = () => chat.lastMessage?.parts.find((p) => p.state === 'approval-requested');
    await chat.waitFor(waiting, 20000, 'the approval request');
    const { toolCallId } = waiting();
    proxy.cut();
    await until(() => t.reconnects.length > 0, 5000, 'a reconnect');
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(chat.lastMessage.parts.filter((p) => p.toolCallId === toolCallId).length, 1, 'the call once');
    const r = await fetch(`${srv.httpURL}${API}/${encodeURIComponent(id)}/approve`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ toolCallId, approved: true }),
    });
    assert.equal(r.status, 200);
    await sent;
    assert.deepEqual(errors, []);
    assert.equal(chat.status, 'ready', String(chat.error));
    const msgs = await transcript(srv, id);
    assert.deepEqual(plain(chat.messages), msgs);
    const tool = msgs[1].parts.find((p) => p.toolCallId === toolCallId);
    assert.equal(tool.state, 'output-available');
  } finally {
    await proxy.close();
    await srv.stop();
  }
});

test('a connection that goes silent mid-reply (no reset, no FIN) is taken for dead after idleTimeoutMs and replaced; the chat ends as stored', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '150' } });
  const proxy = await cutProxy(srv.addr);
  try {
    // Well above the demo's 10 ms between words, so only the frozen connection trips it.
    const t = chatdTransport(proxy.url, { idleTimeoutMs: 800 });
    const id = chatId();
    const errors = [];
    const chat = new NodeChat({ id, transport: t, onError: (e) => errors.push(e) });
    const sent = chat.sendMessage({ text: 'a long answer please' });
    await chat.waitFor((c) => c.lastMessage?.role === 'assistant' && shown(c).length > 100, 20000, 'text past 100');
    const before = shown(chat).length;
    const at = performance.now();
    proxy.freeze();
    // Text already past the proxy when it froze may still arrive: wait for the reconnect
    // (which cannot come before idleTimeoutMs of silence) and text beyond the freeze.
    await chat.waitFor((c) => t.reconnects.length > 0 && shown(c).length > before, 20000, 'text after the reconnect');
    const recovery = Math.round(performance.now() - at);
    await sent;
    assert.equal(chat.status, 'ready', String(chat.error));
    assert.deepEqual(errors, []);
    const msgs = await transcript(srv, id);
    assert.equal(shown(chat), textOf(msgs[1]), 'word for word, no duplicated text');
    assert.deepEqual(plain(chat.messages), msgs);
    assert.equal(t.reconnects.length, 1, 'one reconnect, for the frozen connection');
    assert.match(String(t.reconnects[0].error?.message), /no byte for 800 ms/);
    assert.ok(recovery >= 800, `not before the timeout: ${recovery} ms`);
    console.log(`# a silent connection replaced: ${recovery} ms from the freeze to the reconnect and new text (idleTimeoutMs 800)`);
  } finally {
    await proxy.close();
    await srv.stop();
  }
});
