// ChatClient against a scripted WebSocket: what it sends, when it reconnects, when it
// stops, what it stores. (The same behaviours against the real chatd are in
// client-chatd.test.mjs.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ChatClient, ChatError, MemoryStorage, sessionKey, splitToolName } from '../client/dist/index.js';
import { waitFor, within } from './client-util.mjs';

const S = '0193a000-0000-7000-8000-000000000001';
const R1 = '0193a000-0000-7000-8000-0000000000a1';
const T = '2026-11-20T22:47:24.319304Z';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A scripted server: every socket the client makes, and every frame it sends. */
class Fake {
  constructor() {
    this.sockets = [];
    this.waiters = [];
    const fake = this;
    this.WebSocket = class FakeSocket {
      constructor(url, protocols) {
        this.url = url;
        this.protocols = protocols;
        this.readyState = 0;
        this.sent = [];
        this.frameWaiters = [];
        this.closedByClient = null;
        fake.sockets.push(this);
        fake.wake();
      }
      send(data) {
        if (this.readyState !== 1) throw new Error('not open');
        this.sent.push(JSON.parse(data));
        for (const w of this.frameWaiters.splice(0)) w();
      }
      close(code, reason) {
        this.closedByClient = { code, reason };
        this.readyState = 3;
        for (const w of this.frameWaiters.splice(0)) w();
      }
      // The server's side:
      accept() {
        this.readyState = 1;
        this.onopen?.({});
      }
      push(frame) {
        this.onmessage?.({ data: JSON.stringify(frame) });
      }
      drop(code = 1006, reason = '') {
        this.readyState = 3;
        this.onclose?.({ code, reason });
      }
      /** Resolves with the n-th frame the client sent (0-based) once it is there. */
      async frame(n) {
        while (this.sent.length <= n) {
          await within(new Promise((r) => this.frameWaiters.push(r)), 5000, `frame ${n} on a socket (have ${JSON.stringify(this.sent)})`);
        }
        return this.sent[n];
      }
    };
  }
  wake() {
    for (const w of this.waiters.splice(0)) w();
  }
  /** Resolves with the n-th socket (0-based) once the client made it. */
  async socket(n) {
    while (this.sockets.length <= n) {
      await within(new Promise((r) => this.waiters.push(r)), 5000, `socket ${n} (have ${this.sockets.length})`);
    }
    return this.sockets[n];
  }
}

function snapshot(fields = {}) {
  return { type: 'snapshot', sessionId: S, epoch: 'e1', lastSeq: 0, messages: [], hasMore: false, activeRun: null, ...fields };
}
function msg(position, fields = {}) {
  return { id: `0193b000-0000-7000-8000-${String(position).padStart(12, '0')}`, position, role: 'assistant', content: '', status: 'complete', runId: R1, requestId: 'r1', createdAt: T, ...fields };
}
function run(fields = {}) {
  return { runId: R1, requestId: 'r1', status: 'running', startedAt: T, lastActivityAt: T, ...fields };
}
function ev(seq, type, fields) {
  return { type, seq, runId: R1, requestId: 'r1', ...fields };
}

function newClient(fake, opts = {}) {
  return new ChatClient({
    url: 'ws://chatd.test/v1/ws',
    sessionId: S,
    storage: null,
    WebSocket: fake.WebSocket,
    backoff: { initialMs: 1, maxMs: 4 },
    environment: {},
    ...opts,
  });
}

/** Opens socket n, checks its hello and answers it. */
async function handshake(fake, n, answer = snapshot(), check = () => {}) {
  const ws = await fake.socket(n);
  ws.accept();
  const hello = await ws.frame(0);
  assert.equal(hello.type, 'hello');
  check(hello);
  ws.push({ ...answer, requestId: hello.requestId });
  return ws;
}

test('hello first, then the commands queued before connect; the ack resolves send', async () => {
  const fake = new Fake();
  const c = newClient(fake);
  const sent = c.send('hi');
  c.connect();
  const ws = await fake.socket(0);
  assert.equal(ws.url, `ws://chatd.test/v1/ws?session=${S}`, 'the session in the URL, for load balancers');
  assert.equal(ws.protocols, 'chatd.v1');
  assert.equal(c.state.connection, 'connecting');
  ws.accept();
  const hello = await ws.frame(0);
  assert.deepEqual(Object.keys(hello).sort(), ['requestId', 'sessionId', 'type']);
  assert.equal(hello.sessionId, S);
  const send = await ws.frame(1);
  assert.equal(send.type, 'chat.send');
  assert.match(send.requestId, UUID);
  assert.equal(send.content, 'hi');
  assert.equal(c.state.connection, 'catching-up');
  ws.push({ ...snapshot(), requestId: hello.requestId });
  await waitFor(c, (s) => s.connection === 'live');
  ws.push({ type: 'ack', requestId: send.requestId, runId: R1, duplicate: false, status: 'running' });
  const ack = await within(sent, 2000, 'send to resolve');
  assert.equal(ack.runId, R1);
  c.close();
});

/** The chat.send frames sent on every socket so far. */
function sends(fake) {
  return fake.sockets.flatMap((ws) => ws.sent.filter((f) => f.type === 'chat.send'));
}

test('a new session: hello without a sessionId; a send waits for the snapshot that names it, then goes once', async () => {
  const fake = new Fake();
  const storage = new MemoryStorage();
  const c = newClient(fake, { sessionId: null, storage });
  assert.equal(c.state.sessionId, null);
  const ids = [];
  c.subscribe((s) => ids.push(s.sessionId));
  const p = c.send('hi');
  c.connect();
  const ws = await fake.socket(0);
  ws.accept();
  const hello = await ws.frame(0);
  assert.deepEqual(Object.keys(hello).sort(), ['requestId', 'type'], 'no sessionId: the server names the session');
  await new Promise((r) => setTimeout(r, 30));
  assert.deepEqual(ws.sent.map((f) => f.type), ['hello'], 'nothing behind the hello of a session not yet named');
  ws.push({ ...snapshot(), requestId: hello.requestId });
  const send = await ws.frame(1);
  assert.equal(send.type, 'chat.send');
  assert.equal(send.content, 'hi');
  assert.equal(c.state.sessionId, S);
  await Promise.resolve();
  assert.equal(ids.at(-1), S, 'subscribers see the id');
  assert.equal(ChatClient.lastSessionId(storage), S);
  ws.push({ type: 'ack', requestId: send.requestId, runId: R1, duplicate: false, status: 'running' });
  assert.equal((await within(p, 2000, 'send')).runId, R1);
  assert.equal(sends(fake).length, 1);
  c.close();
  assert.notEqual(storage.getItem(sessionKey(S)), null, 'stored under the named id');
});

test('a connection lost before the snapshot: the next hello has no sessionId either, and the held send goes once', async () => {
  const fake = new Fake();
  const c = newClient(fake, { sessionId: null });
  const p = c.send('once');
  c.connect();
  const ws0 = await fake.socket(0);
  ws0.accept();
  const h0 = await ws0.frame(0);
  assert.equal(h0.sessionId, undefined);
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(ws0.sent.length, 1, 'only the hello');
  ws0.drop(1006); // its answer (a session the client never learns) is lost
  const ws1 = await fake.socket(1);
  ws1.accept();
  const h1 = await ws1.frame(0);
  assert.equal(h1.sessionId, undefined, 'a fresh session again, not one named by the client');
  assert.equal(h1.epoch, undefined);
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(ws1.sent.length, 1, 'still only the hello');
  assert.equal(c.state.sessionId, null);
  ws1.push({ ...snapshot(), requestId: h1.requestId });
  const send = await ws1.frame(1);
  assert.equal(send.content, 'once');
  ws1.push({ type: 'ack', requestId: send.requestId, runId: R1, duplicate: false, status: 'running' });
  assert.equal((await within(p, 2000, 'send')).runId, R1);
  assert.equal(sends(fake).length, 1, 'sent exactly once, on the named session');
  c.close();
});

test('once named, a new session is followed like a given one: a reconnect says hello with its id and re-sends', async () => {
  const fake = new Fake();
  const c = newClient(fake, { sessionId: null });
  c.connect();
  const ws0 = await handshake(fake, 0, snapshot({ lastSeq: 2 }), (h) => assert.equal(h.sessionId, undefined));
  await waitFor(c, (s) => s.connection === 'live' && s.sessionId === S);
  const p = c.send('again');
  const first = await ws0.frame(1);
  ws0.drop(1006);
  const ws1 = await fake.socket(1);
  ws1.accept();
  const h1 = await ws1.frame(0);
  assert.equal(h1.sessionId, S);
  assert.equal(h1.epoch, 'e1');
  assert.equal(h1.lastSeq, 2);
  assert.deepEqual(await ws1.frame(1), first, 'the same requestId, to the same session');
  ws1.push({ type: 'resumed', requestId: h1.requestId, sessionId: S, epoch: 'e1', lastSeq: 2 });
  ws1.push({ type: 'ack', requestId: first.requestId, runId: R1, duplicate: true, status: 'running' });
  assert.equal((await within(p, 2000, 'send')).duplicate, true);
  c.close();
});

test('subscribers hear once per microtask, with the latest state', async () => {
  const fake = new Fake();
  const c = newClient(fake);
  c.connect();
  const ws = await handshake(fake, 0, snapshot({ messages: [msg(1, { status: 'streaming' })], activeRun: run() }));
  await waitFor(c, (s) => s.connection === 'live');
  const seen = [];
  c.subscribe((s) => seen.push(s.messages[0].content));
  ws.push(ev(1, 'chat.delta', { messageId: msg(1).id, text: 'a' }));
  ws.push(ev(2, 'chat.delta', { messageId: msg(1).id, text: 'b' }));
  await Promise.resolve();
  await Promise.resolve();
  assert.deepEqual(seen, ['ab']);
  c.close();
});

test('a duplicate event is ignored; a gap reconnects with hello{epoch, lastSeq} and nothing is skipped', async () => {
  const fake = new Fake();
  const trace = [];
  const c = newClient(fake, { onTrace: (e) => trace.push(e) });
  c.connect();
  const m = msg(1, { status: 'streaming' });
  const ws0 = await handshake(fake, 0, snapshot({ epoch: 'e1', lastSeq: 10, messages: [m], activeRun: run() }));
  ws0.push(ev(11, 'chat.delta', { messageId: m.id, text: 'A' }));
  ws0.push(ev(11, 'chat.delta', { messageId: m.id, text: 'A' }));
  ws0.push(ev(13, 'chat.delta', { messageId: m.id, text: 'C' })); // 12 is missing
  const ws1 = await fake.socket(1);
  assert.equal(ws0.closedByClient.code, 1000);
  ws0.push(ev(12, 'chat.delta', { messageId: m.id, text: 'late' })); // the old socket is not listened to
  assert.equal(c.state.messages[0].content, 'A');
  assert.equal(c.state.lastSeq, 11);
  ws1.accept();
  const hello = await ws1.frame(0);
  assert.equal(hello.epoch, 'e1');
  assert.equal(hello.lastSeq, 11);
  ws1.push({ type: 'resumed', requestId: hello.requestId, sessionId: S, epoch: 'e1', lastSeq: 11 });
  ws1.push(ev(12, 'chat.delta', { messageId: m.id, text: 'B' }));
  ws1.push(ev(13, 'chat.delta', { messageId: m.id, text: 'C' }));
  const s = await waitFor(c, (s) => s.lastSeq === 13);
  assert.equal(s.messages[0].content, 'ABC');
  assert.equal(s.connection, 'live');
  const outcomes = trace.filter((e) => e.type === 'frame' && e.frame.type === 'chat.delta').map((e) => `${e.frame.seq}:${e.outcome}`);
  assert.deepEqual(outcomes, ['11:applied', '11:old', '13:gap', '12:applied', '13:applied']);
  c.close();
});

test('a dropped connection reconnects; an unanswered send goes again with the same requestId; a duplicate ack is success', async () => {
  const fake = new Fake();
  const c = newClient(fake);
  c.connect();
  const ws0 = await handshake(fake, 0, snapshot({ lastSeq: 4 }));
  await waitFor(c, (s) => s.connection === 'live');
  const p = c.send('once');
  const first = await ws0.frame(1);
  ws0.drop(1006);
  await waitFor(c, (s) => s.connection === 'connecting');
  const ws1 = await fake.socket(1);
  ws1.accept();
  const hello = await ws1.frame(0);
  assert.equal(hello.lastSeq, 4);
  const again = await ws1.frame(1);
  assert.deepEqual(again, first);
  ws1.push({ type: 'resumed', requestId: hello.requestId, sessionId: S, epoch: 'e1', lastSeq: 4 });
  ws1.push({ type: 'ack', requestId: first.requestId, runId: R1, duplicate: true, status: 'running' });
  const ack = await within(p, 2000, 'send');
  assert.equal(ack.duplicate, true);
  c.close();
});

test('replies to another connection\'s commands are not taken', async () => {
  const fake = new Fake();
  const c = newClient(fake);
  c.connect();
  const ws0 = await handshake(fake, 0);
  const p = c.send('x');
  const f = await ws0.frame(1);
  ws0.drop(1001, 'going away');
  const ws1 = await handshake(fake, 1);
  await ws1.frame(1);
  let settled = false;
  p.then(() => (settled = true), () => (settled = true));
  ws0.push({ type: 'error', requestId: f.requestId, code: 'internal', message: 'x' });
  await Promise.resolve();
  assert.equal(settled, false);
  ws1.push({ type: 'error', requestId: f.requestId, code: 'too_large', message: 'too big' });
  await assert.rejects(p, (e) => e instanceof ChatError && e.code === 'too_large' && e.requestId === f.requestId);
  c.close();
});

for (const [code, why] of [[4004, 'session not found'], [1008, 'origin'], [1009, 'too big'], [4001, 'unauthorized']]) {
  test(`close ${code} is fatal: state.closed, pending commands rejected, no reconnect`, async () => {
    const fake = new Fake();
    const storage = new MemoryStorage();
    const c = newClient(fake, { storage, token: 't' });
    c.connect();
    const ws = await handshake(fake, 0, snapshot(), (h) => assert.equal(h.token, 't'));
    await waitFor(c, (s) => s.connection === 'live');
    const p = c.send('x');
    await ws.frame(1);
    ws.drop(code, why);
    await assert.rejects(p, (e) => e.code === 'closed');
    assert.deepEqual(c.state.closed, { code, reason: why });
    await assert.rejects(c.send('y'), (e) => e.code === 'closed');
    await new Promise((r) => setTimeout(r, 30)); // no socket may come: give a reconnect a chance to show
    assert.equal(fake.sockets.length, 1);
    if (code === 4004) assert.equal(storage.getItem(sessionKey(S)), null);
  });
}

test('4001 with a token function reconnects and asks for a new token', async () => {
  const fake = new Fake();
  let n = 0;
  const c = newClient(fake, { token: async () => `tok${++n}` });
  c.connect();
  const ws0 = await handshake(fake, 0, snapshot(), (h) => assert.equal(h.token, 'tok1'));
  ws0.drop(4001, 'unauthorized');
  await handshake(fake, 1, snapshot(), (h) => assert.equal(h.token, 'tok2'));
  await waitFor(c, (s) => s.connection === 'live');
  assert.equal(c.state.closed, null);
  c.close();
});

test('auth.expiring with a token function: the client sends auth.refresh with a new token on the same connection', async () => {
  const fake = new Fake();
  let n = 0;
  const c = newClient(fake, { token: async () => `tok${++n}` });
  c.connect();
  const ws = await handshake(fake, 0, snapshot(), (h) => assert.equal(h.token, 'tok1'));
  await waitFor(c, (s) => s.connection === 'live');
  ws.push({ type: 'auth.expiring', expiresAt: T });
  const refresh = await ws.frame(1);
  assert.equal(refresh.type, 'auth.refresh');
  assert.equal(refresh.token, 'tok2');
  assert.ok(refresh.requestId);
  ws.push({ type: 'auth.refreshed', requestId: refresh.requestId, expiresAt: T });
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(fake.sockets.length, 1, 'no reconnect');
  assert.equal(c.state.connection, 'live');
  c.close();
});

test('auth.expiring with a fixed token sends nothing', async () => {
  const fake = new Fake();
  const c = newClient(fake, { token: 't' });
  c.connect();
  const ws = await handshake(fake, 0, snapshot());
  await waitFor(c, (s) => s.connection === 'live');
  ws.push({ type: 'auth.expiring', expiresAt: T });
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(ws.sent.length, 1, 'only the hello');
  c.close();
});

test('4000 after the hello is answered is fatal; before (the hello deadline) it retries', async () => {
  const fake = new Fake();
  const c = newClient(fake);
  c.connect();
  const ws0 = await fake.socket(0);
  ws0.accept();
  await ws0.frame(0);
  ws0.drop(4000, 'no hello within the deadline');
  const ws1 = await handshake(fake, 1);
  await waitFor(c, (s) => s.connection === 'live');
  ws1.drop(4000, 'hello was already sent on this connection');
  await waitFor(c, (s) => s.closed !== null);
  assert.equal(c.state.closed.code, 4000);
});

test('1001, 4008 and 1006 reconnect with hello{epoch, lastSeq}', async () => {
  const fake = new Fake();
  const c = newClient(fake);
  c.connect();
  let ws = await handshake(fake, 0, snapshot({ epoch: 'e9', lastSeq: 3 }));
  let i = 1;
  for (const code of [1001, 4008, 1006]) {
    ws.drop(code, 'x');
    ws = await handshake(fake, i++, { type: 'resumed', sessionId: S, epoch: 'e9', lastSeq: 3 }, (h) => {
      assert.equal(h.epoch, 'e9');
      assert.equal(h.lastSeq, 3);
    });
  }
  await waitFor(c, (s) => s.connection === 'live');
  assert.equal(c.state.closed, null);
  c.close();
  assert.equal(ws.closedByClient.code, 1000);
  assert.deepEqual(c.state.closed, { code: 1000, reason: 'closed by the client' });
});

test('4010 (the session moved to another node) reconnects at once, without backoff, and resumes', async () => {
  const fake = new Fake();
  const trace = [];
  // A backoff this long would fail the test: only an immediate reconnect gets a socket.
  const c = newClient(fake, { backoff: { initialMs: 60000, maxMs: 60000 }, onTrace: (e) => trace.push(e) });
  c.connect();
  const ws = await handshake(fake, 0, snapshot({ epoch: 'e9', lastSeq: 3 }));
  ws.drop(4010, 'session moved to another node');
  await handshake(fake, 1, { type: 'resumed', sessionId: S, epoch: 'e9', lastSeq: 3 }, (h) => {
    assert.equal(h.epoch, 'e9');
    assert.equal(h.lastSeq, 3);
  });
  await waitFor(c, (s) => s.connection === 'live');
  assert.equal(c.state.closed, null, 'not fatal');
  assert.deepEqual(trace.filter((e) => e.type === 'reconnect').map((e) => e.delayMs), [0]);
  c.close();
});

test('a hello answered moved is not fatal: the client reconnects at once, to ?session= with its query kept', async () => {
  const fake = new Fake();
  const c = newClient(fake, { url: 'ws://chatd.test/v1/ws?tenant=a', backoff: { initialMs: 60000, maxMs: 60000 } });
  c.connect();
  const ws = await fake.socket(0);
  assert.equal(ws.url, `ws://chatd.test/v1/ws?tenant=a&session=${S}`);
  ws.accept();
  const hello = await ws.frame(0);
  ws.push({ type: 'error', requestId: hello.requestId, code: 'moved', message: 'the session is held by another node; reconnect' });
  const again = await handshake(fake, 1);
  assert.equal(again.url, `ws://chatd.test/v1/ws?tenant=a&session=${S}`);
  assert.equal(ws.closedByClient?.code, 1000, 'the refused socket is closed');
  await waitFor(c, (s) => s.connection === 'live');
  assert.equal(c.state.closed, null);
  c.close();
});

test('a new session: the first URL has no session; once named, reconnects dial ?session=<id>', async () => {
  const fake = new Fake();
  const c = newClient(fake, { sessionId: null });
  c.connect();
  const ws = await handshake(fake, 0);
  assert.equal(ws.url, 'ws://chatd.test/v1/ws');
  ws.drop(1001, 'x');
  const again = await handshake(fake, 1, { type: 'resumed', sessionId: S, epoch: 'e1', lastSeq: 0 });
  assert.equal(again.url, `ws://chatd.test/v1/ws?session=${S}`);
  c.close();
});

test('a hello answered with error storage: commands behind it are not failed, they go again after the next hello', async () => {
  const fake = new Fake();
  const c = newClient(fake);
  const p = c.send('x');
  c.connect();
  const ws0 = await fake.socket(0);
  ws0.accept();
  const h0 = await ws0.frame(0);
  const s0 = await ws0.frame(1);
  ws0.push({ type: 'error', requestId: h0.requestId, code: 'storage', message: 'database unavailable' });
  ws0.push({ type: 'error', requestId: s0.requestId, code: 'storage', message: 'not handled: the hello before this command failed' });
  const ws1 = await handshake(fake, 1);
  assert.equal(ws0.closedByClient.code, 1000);
  const s1 = await ws1.frame(1);
  assert.equal(s1.requestId, s0.requestId);
  ws1.push({ type: 'ack', requestId: s1.requestId, runId: R1, duplicate: false, status: 'running' });
  assert.equal((await p).runId, R1);
  c.close();
});

test('a hello answered not_found stops (4004): stored state forgotten, commands rejected, no reconnect', async () => {
  // A stale stored id (the database was reset) or another user's: chatd does not create
  // a session a client names.
  const fake = new Fake();
  const storage = new MemoryStorage();
  storage.setItem(sessionKey(S), JSON.stringify({ v: 1, sessionId: S, epoch: 'e1', lastSeq: 3, messages: [], hasMore: false, activeRun: null, lastRun: null }));
  const c = newClient(fake, { storage });
  assert.equal(c.state.lastSeq, 3);
  const p = c.send('lost');
  c.connect();
  const ws = await fake.socket(0);
  ws.accept();
  const h = await ws.frame(0);
  assert.equal(h.sessionId, S);
  ws.push({ type: 'error', requestId: h.requestId, code: 'not_found', message: 'session not found' });
  ws.drop(4004, 'session not found');
  await waitFor(c, (s) => s.closed !== null);
  assert.deepEqual(c.state.closed, { code: 4004, reason: 'session not found' });
  await assert.rejects(p, (e) => e instanceof ChatError && e.code === 'closed' && /4004 session not found/.test(e.message));
  assert.equal(storage.getItem(sessionKey(S)), null, 'the stale stored state is forgotten');
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(fake.sockets.length, 1, 'no reconnect');
});

test('resumed at another position than ours is not trusted: the client asks for a snapshot', async () => {
  const fake = new Fake();
  const c = newClient(fake);
  c.connect();
  let ws = await handshake(fake, 0, snapshot({ epoch: 'e1', lastSeq: 5 }));
  ws.drop(1006);
  ws = await handshake(fake, 1, { type: 'resumed', sessionId: S, epoch: 'e1', lastSeq: 4 });
  const ws2 = await fake.socket(2);
  ws2.accept();
  const h = await ws2.frame(0);
  assert.equal(h.epoch, undefined);
  assert.equal(h.lastSeq, undefined);
  c.close();
});

test('no more than maxInFlight commands wait on one connection; busy ones go again', async () => {
  const fake = new Fake();
  const c = newClient(fake, { maxInFlight: 4 });
  const ps = [];
  for (let i = 0; i < 10; i++) ps.push(c.send(`m${i}`));
  c.connect();
  const ws = await fake.socket(0);
  ws.accept();
  const h = await ws.frame(3);
  await new Promise((r) => setImmediate(r));
  assert.equal(ws.sent.length, 4, 'the hello and 3 commands while the hello is unanswered');
  ws.push({ ...snapshot(), requestId: ws.sent[0].requestId });
  await waitFor(c, (s) => s.connection === 'live');
  await ws.frame(4);
  await new Promise((r) => setImmediate(r));
  assert.equal(ws.sent.length, 5, 'then 4 commands');
  // Answer the first busy (it goes again a little later), then ack every frame as it
  // comes: never more than 4 wait at once.
  let next = 1;
  let answered = 0;
  let acks = 0;
  while (acks < 10) {
    const f = await ws.frame(next++);
    assert.ok(next - 1 - answered <= 4, `at most 4 in flight (frame ${next - 1}, ${answered} answered)`);
    answered++;
    if (next === 2) {
      ws.push({ type: 'error', requestId: f.requestId, code: 'busy', message: 'busy' });
      continue;
    }
    ws.push({ type: 'ack', requestId: f.requestId, runId: R1, duplicate: false, status: 'running' });
    acks++;
  }
  const sends = () => ws.sent.filter((f) => f.type === 'chat.send');
  await within(Promise.all(ps), 2000, 'all sends');
  assert.equal(sends().length, 11, 'ten sends, one of them twice');
  c.close();
});

test('cancel re-sent after a reconnect: no_run for a run that ended cancelled is success', async () => {
  const fake = new Fake();
  const c = newClient(fake);
  c.connect();
  const ws0 = await handshake(fake, 0, snapshot({ lastSeq: 1, activeRun: run() }));
  await waitFor(c, (s) => s.connection === 'live');
  const p = c.cancel();
  const f0 = await ws0.frame(1);
  assert.equal(f0.runId, R1);
  ws0.drop(1006);
  const ws1 = await handshake(fake, 1, snapshot({ lastSeq: 3, lastRun: run({ status: 'cancelled', endedAt: T, cancelReason: 'user' }) }));
  const f1 = await ws1.frame(1);
  assert.deepEqual(f1, f0);
  ws1.push({ type: 'error', requestId: f1.requestId, code: 'no_run', message: 'no run is active' });
  const ack = await p;
  assert.equal(ack.status, 'cancelled');
  assert.equal(ack.duplicate, true);
  // A first cancel's no_run is an error.
  const q = c.cancel(R1);
  const f2 = await ws1.frame(2);
  ws1.push({ type: 'error', requestId: f2.requestId, code: 'no_run', message: 'no run is active' });
  await assert.rejects(q, (e) => e.code === 'no_run');
  c.close();
});

test('decide re-sent after a reconnect: conflict when the call went the way we asked is success', async () => {
  const fake = new Fake();
  const c = newClient(fake);
  c.connect();
  const tool = (status) => msg(2, { role: 'tool', status: 'streaming', tool: { callId: 'demo-approval', name: 'demo_sandbox', input: {}, status } });
  const ws0 = await handshake(fake, 0, snapshot({ lastSeq: 1, messages: [tool('awaiting_approval')], activeRun: run({ status: 'awaiting_approval', pendingApproval: { toolCallId: 'demo-approval', name: 'demo_sandbox', input: {} } }) }));
  await waitFor(c, (s) => s.connection === 'live');
  const p = c.decide('demo-approval', 'approve');
  const f0 = await ws0.frame(1);
  assert.equal(f0.runId, R1);
  ws0.drop(1006);
  const ws1 = await handshake(fake, 1, snapshot({ lastSeq: 3, messages: [tool('running')], activeRun: run() }));
  const f1 = await ws1.frame(1);
  assert.deepEqual(f1, f0);
  ws1.push({ type: 'error', requestId: f1.requestId, code: 'conflict', message: 'already decided' });
  const ack = await p;
  assert.equal(ack.status, 'running');
  // Someone else denied it: a conflict is a conflict.
  const c2 = newClient(fake);
  c2.connect();
  const ws2 = await handshake(fake, 2, snapshot({ lastSeq: 1, messages: [tool('awaiting_approval')], activeRun: run() }));
  const p2 = c2.decide('demo-approval', 'approve');
  await ws2.frame(1);
  ws2.drop(1006);
  const denied = msg(2, { role: 'tool', status: 'complete', tool: { callId: 'demo-approval', name: 'demo_sandbox', input: {}, status: 'denied', output: 'no' } });
  const ws3 = await handshake(fake, 3, snapshot({ lastSeq: 3, messages: [denied], activeRun: run() }));
  const f3 = await ws3.frame(1);
  ws3.push({ type: 'error', requestId: f3.requestId, code: 'conflict', message: 'already decided' });
  await assert.rejects(p2, (e) => e.code === 'conflict');
  c.close();
  c2.close();
});

test('loadOlder sends history.fetch before the oldest position, after the hello is answered, and prepends', async () => {
  const fake = new Fake();
  const c = newClient(fake);
  c.connect();
  const ws = await fake.socket(0);
  const older = c.loadOlder(2);
  ws.accept();
  const h = await ws.frame(0);
  await new Promise((r) => setImmediate(r));
  assert.equal(ws.sent.length, 1, 'history waits for the hello\'s answer');
  ws.push({ ...snapshot({ messages: [msg(5), msg(6)], hasMore: true }), requestId: h.requestId });
  const f = await ws.frame(1);
  assert.equal(f.type, 'history.fetch');
  assert.equal(f.before, 5);
  assert.equal(f.limit, 2);
  assert.equal(c.loadOlder(), older, 'a second call while one is under way is the same');
  ws.push({ type: 'history', requestId: f.requestId, messages: [msg(3), msg(4)], hasMore: false });
  assert.deepEqual(await older, { added: 2, hasMore: false });
  assert.deepEqual(c.state.messages.map((m) => m.position), [3, 4, 5, 6]);
  assert.deepEqual(await c.loadOlder(), { added: 0, hasMore: false });
  assert.equal(ws.sent.length, 2);
  c.close();
});

test('stored state: one item per session with its epoch/lastSeq; a new client renders it and says hello with them', async () => {
  const fake = new Fake();
  const storage = new MemoryStorage();
  const writes = [];
  const spy = { getItem: (k) => storage.getItem(k), removeItem: (k) => storage.removeItem(k), setItem: (k, v) => { writes.push(k); storage.setItem(k, v); } };
  let pagehide;
  const environment = { window: { addEventListener: (t, fn) => { if (t === 'pagehide') pagehide = fn; }, removeEventListener() {} } };
  const c = newClient(fake, { storage: spy, persistThrottleMs: 60000, environment });
  c.connect();
  const m = msg(1, { status: 'streaming' });
  const ws = await handshake(fake, 0, snapshot({ epoch: 'e1', lastSeq: 2, messages: [m], activeRun: run() }));
  for (let i = 3; i < 50; i++) ws.push(ev(i, 'chat.delta', { messageId: m.id, text: 'x' }));
  await waitFor(c, (s) => s.lastSeq === 49);
  assert.equal(writes.filter((k) => k === sessionKey(S)).length, 0, 'throttled: not written per delta');
  pagehide();
  assert.equal(writes.filter((k) => k === sessionKey(S)).length, 1, 'written on pagehide');
  const item = JSON.parse(storage.getItem(sessionKey(S)));
  assert.equal(item.epoch, 'e1');
  assert.equal(item.lastSeq, 49);
  assert.equal(item.messages[0].content, 'x'.repeat(47));
  c.close();

  const fake2 = new Fake();
  const c2 = newClient(fake2, { storage });
  assert.equal(c2.state.lastSeq, 49, 'rendered from storage before connecting');
  assert.equal(c2.state.messages[0].content, 'x'.repeat(47));
  c2.connect();
  await handshake(fake2, 0, { type: 'resumed', sessionId: S, epoch: 'e1', lastSeq: 49 }, (h) => {
    assert.equal(h.epoch, 'e1');
    assert.equal(h.lastSeq, 49);
  });
  await waitFor(c2, (s) => s.connection === 'live');
  assert.equal(c2.state.messages[0].content, 'x'.repeat(47));
  assert.equal(ChatClient.lastSessionId(storage), S);
  c2.close();
});

test('a failed storage write (quota) removes the item: the next load gets a snapshot', async () => {
  const fake = new Fake();
  const storage = new MemoryStorage();
  storage.setItem(sessionKey(S), JSON.stringify({ v: 1, sessionId: S, epoch: 'old', lastSeq: 1, messages: [], hasMore: false, activeRun: null, lastRun: null }));
  const full = { getItem: (k) => storage.getItem(k), removeItem: (k) => storage.removeItem(k), setItem: () => { throw new DOMException('full', 'QuotaExceededError'); } };
  const c = newClient(fake, { storage: full, persistThrottleMs: 1 });
  assert.equal(c.state.epoch, 'old');
  c.connect();
  await handshake(fake, 0, snapshot({ epoch: 'e2', lastSeq: 7 }));
  await waitFor(c, (s) => s.epoch === 'e2');
  c.close(); // flushes
  assert.equal(storage.getItem(sessionKey(S)), null);
  const c2 = newClient(new Fake(), { storage });
  assert.equal(c2.state.epoch, null);
});

test('a corrupt or foreign stored item is not used', () => {
  const storage = new MemoryStorage();
  for (const bad of ['{', JSON.stringify({ v: 1, sessionId: 'other', epoch: 'e', lastSeq: 1, messages: [], hasMore: false }), JSON.stringify({ v: 1, sessionId: S, epoch: 'e', lastSeq: -1, messages: [], hasMore: false })]) {
    storage.setItem(sessionKey(S), bad);
    const c = newClient(new Fake(), { storage });
    assert.equal(c.state.epoch, null);
    assert.equal(c.state.lastSeq, 0);
  }
});

test('offline closes the socket and shows offline; online reconnects at once', async () => {
  const fake = new Fake();
  const win = new EventTarget();
  const c = newClient(fake, { environment: { window: win, navigator: { onLine: true } }, backoff: { initialMs: 60000, maxMs: 60000 } });
  c.connect();
  const ws0 = await handshake(fake, 0);
  await waitFor(c, (s) => s.connection === 'live');
  win.dispatchEvent(new Event('offline'));
  assert.equal(ws0.closedByClient.code, 1000);
  await waitFor(c, (s) => s.connection === 'offline');
  win.dispatchEvent(new Event('online'));
  await handshake(fake, 1); // at once, though the backoff is a minute
  await waitFor(c, (s) => s.connection === 'live');
  c.close();
});

test('starting offline tries at once all the same: the browser may be wrong (a loopback-only machine)', async () => {
  const fake = new Fake();
  const win = new EventTarget();
  const c = newClient(fake, { environment: { window: win, navigator: { onLine: false } }, backoff: { initialMs: 60000, maxMs: 60000 } });
  c.connect();
  assert.equal(fake.sockets.length, 1, 'a socket at once, though the backoff is a minute');
  assert.equal(c.state.connection, 'offline');
  await handshake(fake, 0);
  await waitFor(c, (s) => s.connection === 'live');
  c.close();
});

test('starting offline with no network: offline until the online event, which reconnects at once', async () => {
  const fake = new Fake();
  const win = new EventTarget();
  const c = newClient(fake, { environment: { window: win, navigator: { onLine: false } }, backoff: { initialMs: 60000, maxMs: 60000 } });
  c.connect();
  (await fake.socket(0)).drop(1006);
  await waitFor(c, (s) => s.connection === 'offline');
  assert.equal(fake.sockets.length, 1, 'the next try waits for the backoff');
  win.dispatchEvent(new Event('online'));
  await handshake(fake, 1);
  await waitFor(c, (s) => s.connection === 'live');
  c.close();
});

test('shown again after being hidden long enough: a new connection; briefly hidden: the same one', async () => {
  const fake = new Fake();
  const doc = new EventTarget();
  doc.visibilityState = 'visible';
  const win = new EventTarget();
  const c = newClient(fake, { environment: { window: win, document: doc }, staleAfterHiddenMs: 20 });
  c.connect();
  const ws0 = await handshake(fake, 0, snapshot({ lastSeq: 3 }));
  await waitFor(c, (s) => s.connection === 'live');
  doc.visibilityState = 'hidden';
  doc.dispatchEvent(new Event('visibilitychange'));
  doc.visibilityState = 'visible';
  doc.dispatchEvent(new Event('visibilitychange'));
  assert.equal(ws0.closedByClient, null, 'briefly hidden: kept');
  doc.visibilityState = 'hidden';
  doc.dispatchEvent(new Event('visibilitychange'));
  await new Promise((r) => setTimeout(r, 40)); // the page "sleeps" past staleAfterHiddenMs
  doc.visibilityState = 'visible';
  doc.dispatchEvent(new Event('visibilitychange'));
  assert.equal(ws0.closedByClient.code, 1000);
  const ws1 = await handshake(fake, 1, { type: 'resumed', sessionId: S, epoch: 'e1', lastSeq: 3 }, (h) => assert.equal(h.lastSeq, 3));
  await waitFor(c, (s) => s.connection === 'live');
  const ps = new Event('pageshow');
  ps.persisted = true;
  win.dispatchEvent(ps);
  assert.equal(ws1.closedByClient.code, 1000, 'back from the bfcache: reconnect');
  await handshake(fake, 2, { type: 'resumed', sessionId: S, epoch: 'e1', lastSeq: 3 });
  c.close();
});

test('a socket that never answers the hello is given up after replyTimeoutMs', async () => {
  const fake = new Fake();
  const c = newClient(fake, { replyTimeoutMs: 30 });
  c.connect();
  const ws0 = await fake.socket(0);
  ws0.accept();
  await ws0.frame(0);
  await fake.socket(1);
  assert.equal(ws0.closedByClient.code, 1000);
  c.close();
});

test('close() rejects what waits and stops reconnecting', async () => {
  const fake = new Fake();
  const c = newClient(fake);
  const p = c.send('x');
  const h = c.loadOlder();
  c.connect();
  c.close();
  await assert.rejects(p, (e) => e instanceof ChatError && e.code === 'closed');
  await assert.rejects(h, (e) => e.code === 'closed');
  c.connect();
  assert.equal(fake.sockets.length, 1);
});

test('a session id in upper case is followed, stored and said in lower case, as the server spells it', async () => {
  const fake = new Fake();
  const storage = new MemoryStorage();
  const c = newClient(fake, { sessionId: S.toUpperCase(), storage });
  assert.equal(c.state.sessionId, S);
  c.connect();
  await handshake(fake, 0, snapshot({ lastSeq: 2 }), (h) => assert.equal(h.sessionId, S));
  await waitFor(c, (s) => s.connection === 'live');
  c.close();
  assert.notEqual(storage.getItem(sessionKey(S)), null, 'stored under the lower-case key');
});

test("send takes the caller's requestId, so a UI can match its placeholder to the run's user message", async () => {
  const fake = new Fake();
  const c = newClient(fake);
  assert.throws(() => c.send('hi', { requestId: '' }), /requestId/);
  const sent = c.send('hi', { requestId: 'mine-1' });
  c.connect();
  const ws = await handshake(fake, 0);
  const send = await ws.frame(1);
  assert.equal(send.requestId, 'mine-1');
  ws.push({ type: 'ack', requestId: 'mine-1', runId: R1, duplicate: false, status: 'running' });
  assert.equal((await within(sent, 2000, 'send to resolve')).runId, R1);
  c.close();
});

test('edit, regenerate and selectBranch send their frames; re-sent after a reconnect with the same requestId', async () => {
  const fake = new Fake();
  const c = newClient(fake);
  const Q = msg(1, { role: 'user' }).id;
  assert.throws(() => c.edit('not-a-uuid', 'x'), /UUID/);
  const edited = c.edit(Q.toUpperCase(), 'better question', { requestId: 'edit-1', whileRunning: 'interrupt' });
  const regenerated = c.regenerate(R1, { requestId: 'regen-1' });
  const selected = c.selectBranch(Q);
  c.connect();
  let ws = await handshake(fake, 0);
  const [edit, regen, select] = [await ws.frame(1), await ws.frame(2), await ws.frame(3)];
  assert.deepEqual(edit, { type: 'chat.send', requestId: 'edit-1', content: 'better question', whileRunning: 'interrupt', editOf: Q });
  assert.deepEqual(regen, { type: 'chat.regenerate', requestId: 'regen-1', runId: R1 });
  assert.equal(select.type, 'branch.select');
  assert.equal(select.messageId, Q);
  assert.match(select.requestId, UUID);
  // The connection drops before any answer: all three go again, unchanged.
  ws.drop(1006);
  ws = await handshake(fake, 1, snapshot(), (h) => assert.equal(h.lastSeq, 0));
  assert.deepEqual([await ws.frame(1), await ws.frame(2), await ws.frame(3)], [edit, regen, select]);
  ws.push({ type: 'ack', requestId: 'edit-1', runId: R1, duplicate: true, status: 'running' });
  ws.push({ type: 'error', requestId: 'regen-1', code: 'run_active', message: 'a run is active' });
  ws.push({ type: 'ack', requestId: select.requestId, duplicate: false });
  assert.equal((await within(edited, 2000, 'edit to resolve')).runId, R1);
  await assert.rejects(within(regenerated, 2000, 'regenerate to settle'), (err) => err instanceof ChatError && err.code === 'run_active');
  assert.equal(await within(selected, 2000, 'selectBranch to resolve'), undefined);
  c.close();
});

test('splitToolName: an MCP server tool is <server>__<tool>; chatd\'s own tools have no server', () => {
  assert.deepEqual(splitToolName('docs__search'), { server: 'docs', tool: 'search' });
  assert.deepEqual(splitToolName('everything__trigger-long-running-operation'), { server: 'everything', tool: 'trigger-long-running-operation' });
  assert.deepEqual(splitToolName('files__read__file'), { server: 'files', tool: 'read__file' }, 'the first "__" ends the server (servers have none)');
  assert.deepEqual(splitToolName('current_time'), { server: null, tool: 'current_time' });
  assert.deepEqual(splitToolName('__x'), { server: null, tool: '__x' });
  assert.deepEqual(splitToolName('x__'), { server: null, tool: 'x__' });
});
