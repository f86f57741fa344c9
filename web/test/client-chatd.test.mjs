// The client library against a real chatd (bin/chatd on a fresh database): reconnects at
// random moments, a send retried across a reconnect, two clients, stored state, fatal
// closes. Every test ends comparing the library's state with the database.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { ChatClient, MemoryStorage, SessionsClient, branchOf, pendingApprovals, uuid4 } from '../client/dist/index.js';
import { startChatd } from './chatd.mjs';
import { waitFor, within, prng, nodeWebSocket, startProxy, dbMessages, clientMessages, watchContent, checkTrace, summary } from './client-util.mjs';

const WebSocket = nodeWebSocket();

function client(url, opts = {}) {
  const trace = [];
  const c = new ChatClient({
    url,
    WebSocket,
    storage: new MemoryStorage(),
    backoff: { initialMs: 10, maxMs: 200 },
    onTrace: (e) => trace.push({ ...e, at: Date.now() }),
    ...opts,
  });
  c.traceLog = trace;
  return c;
}

const done = (runId) => (s) => s.lastRun?.runId === runId && s.activeRun === null;

async function assertEqualsDB(srv, c) {
  const db = await dbMessages(srv, c.state.sessionId);
  assert.ok(db.length > 0, 'the session has messages');
  assert.deepEqual(clientMessages(c.state), db);
  return db;
}

test('reconnect property: runs with tools while a proxy cuts the connection at random moments; the state ends equal to the database', { timeout: 180000 }, async () => {
  const seed = Number(process.env.CLIENT_SEED ?? (Date.now() % 2 ** 31));
  console.log(`# reconnect property test seed: ${seed} (CLIENT_SEED=${seed} to repeat the choices)`);
  const rand = prng(seed);
  const srv = await startChatd({
    env: { CHATD_DEMO_DELAY: '3ms', CHATD_DEMO_WORDS: '150', CHATD_RING_EVENTS: '20', CHATD_COALESCE_DELTAS: '0s' },
  });
  const port = Number(new URL(srv.httpURL).port);
  // Some connections are cut after a random number of bytes from the server: in the
  // middle of a snapshot, a replay or a frame.
  const proxy = await startProxy(port, { budget: () => (rand() < 0.35 ? Math.floor(rand() * 6000) : Infinity) });
  // Node 20's WebSocket (undici) neither opens nor closes when the connection dies during
  // the opening handshake; the client's watchdog gives such a socket up after
  // replyTimeoutMs (browsers report a close).
  const c = client(`ws://127.0.0.1:${proxy.port}/v1/ws`, { replyTimeoutMs: 3000 });
  const watch = watchContent(c);
  let chaos = true;
  let timer = null;
  const cutLater = () => {
    if (!chaos) return;
    timer = setTimeout(() => {
      // Now and then the next connection is slow to get through, long enough for the
      // session to move past the server's replay ring: the client gets a snapshot.
      if (rand() < 0.2) proxy.hold(100 + Math.floor(rand() * 300));
      proxy.cutAll(rand() < 0.5);
      cutLater();
    }, 20 + Math.floor(rand() * 500));
  };
  // And some right as a connection catches up: the moment a hello goes out.
  c.subscribe((s) => {
    if (chaos && s.connection === 'catching-up' && rand() < 0.25) setTimeout(() => proxy.cutAll(), Math.floor(rand() * 5));
  });
  try {
    c.connect();
    cutLater();
    const runs = 6;
    for (let i = 0; i < runs; i++) {
      const ack = await within(c.send(`run ${i}: use your tools twice`), 60000, `send ${i}`);
      await waitFor(c, done(ack.runId), 60000, `run ${i} to end`);
      assert.equal(c.state.lastRun.status, 'done');
    }
    chaos = false;
    clearTimeout(timer);
    proxy.budget = () => Infinity;
    await waitFor(c, (s) => s.connection === 'live', 20000, 'live at the end');
    const db = await assertEqualsDB(srv, c);
    assert.equal(db.length, runs * 6, 'user, three segments and two tool calls per run');
    assert.ok(db.every((m) => m.status === 'complete'));
    assert.deepEqual(watch.check(db), [], 'nothing shown shrank, repeated or skipped');
    const counts = checkTrace(c.traceLog);
    const runsInDB = await srv.query(`SELECT count(*)::int AS n FROM runs`);
    assert.equal(runsInDB[0].n, runs, 'each send ran once');
    console.log(`# seed ${seed}: ${proxy.cuts} cuts over ${proxy.connections} connections; ${counts.snapshots} snapshots, ${counts.resumed} resumed, ${counts.events} events applied (${counts.deltas} deltas), ${counts.old} old ignored, ${counts.gaps} gaps; ${watch.states} states watched`);
    const slow = longestPause(c.traceLog);
    console.log(`# longest pause in the trace: ${slow.ms} ms, before ${JSON.stringify(slow.entry).slice(0, 200)}`);
    if (slow.ms > 5000) for (const e of c.traceLog.slice(Math.max(0, slow.i - 8), slow.i + 1)) console.log('#   ' + JSON.stringify(e).slice(0, 300));
    assert.ok(proxy.cuts >= 5, `the proxy cut at least 5 times (${proxy.cuts})`);
  } catch (err) {
    console.log(`# failed with seed ${seed}; state ${JSON.stringify(summary(c.state))}`);
    throw err;
  } finally {
    chaos = false;
    clearTimeout(timer);
    watch.stop();
    c.close();
    await proxy.close();
    await srv.stop();
  }
});

test('a send retried across a reconnect runs once: the server got it, the reply was lost, the re-send gets the duplicate ack', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '5ms', CHATD_DEMO_WORDS: '30' } });
  const proxy = await startProxy(Number(new URL(srv.httpURL).port));
  let stalled = false;
  const c = client(`ws://127.0.0.1:${proxy.port}/v1/ws`, {
    onTrace: (e) => {
      c.traceLog.push(e);
      // From the moment chat.send leaves, nothing reaches the client any more.
      if (e.type === 'send' && e.frame.type === 'chat.send' && !stalled) {
        stalled = true;
        proxy.stall();
      }
    },
  });
  c.traceLog = [];
  let observer = null;
  try {
    c.connect();
    await waitFor(c, (s) => s.connection === 'live');
    // The session exists, named by the server: another client can follow it.
    observer = client(srv.wsURL, { sessionId: c.state.sessionId });
    observer.connect();
    const sent = c.send('hello once');
    // The server ran it (another client sees the run start) but the client saw nothing.
    await waitFor(observer, (s) => s.activeRun !== null || s.lastRun !== null, 10000, 'the run to start');
    assert.equal(c.state.activeRun, null);
    assert.equal(c.state.messages.length, 0);
    assert.equal(proxy.cutAll(), 1);
    const ack = await within(sent, 20000, 'the send to be acked after the reconnect');
    assert.equal(ack.duplicate, true, 'the re-send found the run');
    const sends = c.traceLog.filter((e) => e.type === 'send' && e.frame.type === 'chat.send');
    assert.equal(sends.length, 2);
    assert.equal(sends[0].frame.requestId, sends[1].frame.requestId);
    await waitFor(c, done(ack.runId), 20000, 'the run to end');
    await waitFor(observer, done(ack.runId), 20000, 'the run to end (observer)');
    const runs = await srv.query(`SELECT id::text, request_id FROM runs`);
    assert.deepEqual(runs, [{ id: ack.runId, request_id: sends[0].frame.requestId }]);
    const db = await assertEqualsDB(srv, c);
    assert.deepEqual(clientMessages(observer.state), db);
    assert.equal(db.filter((m) => m.role === 'user').length, 1);
  } finally {
    c.close();
    observer?.close();
    await proxy.close();
    await srv.stop();
  }
});

test('two clients on one session: both follow a run, an approval from one, a cancel from the other; both end equal to the database', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '200' } });
  const a = client(srv.wsURL);
  a.connect();
  await waitFor(a, (s) => s.connection === 'live');
  // b follows the session the server created for a.
  const b = client(srv.wsURL, { sessionId: a.state.sessionId });
  const watchA = watchContent(a);
  const watchB = watchContent(b);
  try {
    b.connect();
    await waitFor(b, (s) => s.connection === 'live');
    // An approval asked in A's run, given from B.
    const ack1 = await a.send('please approve the sandbox call');
    const waiting = await waitFor(b, (s) => pendingApprovals(s).length === 1 && s.activeRun?.status === 'awaiting_approval', 20000, 'the approval prompt on B');
    const call = pendingApprovals(waiting)[0];
    assert.equal(waiting.activeRun.pendingApproval.toolCallId, call.tool.callId);
    await waitFor(a, (s) => s.activeRun?.status === 'awaiting_approval', 5000, 'A to see the prompt');
    const decided = await b.decide(call.tool.callId, 'approve');
    assert.equal(decided.runId, ack1.runId);
    await waitFor(a, done(ack1.runId), 20000, 'the approved run to end on A');
    await waitFor(b, done(ack1.runId), 20000, 'the approved run to end on B');
    const tool = a.state.messages.find((m) => m.id === call.id);
    assert.equal(tool.tool.status, 'ok');
    // A long run started by A, cancelled by B mid-stream.
    const ack2 = await a.send('a long answer please');
    await waitFor(b, (s) => s.activeRun?.runId === ack2.runId && s.messages.some((m) => m.runId === ack2.runId && m.role === 'assistant' && m.content.length > 20), 20000, 'B to see text');
    const cancelled = await b.cancel();
    assert.equal(cancelled.runId, ack2.runId);
    assert.equal(cancelled.status, 'cancelled');
    const sa = await waitFor(a, done(ack2.runId), 10000, 'A to see the cancel');
    assert.equal(sa.lastRun.status, 'cancelled');
    assert.equal(sa.lastRun.cancelReason, 'user');
    await waitFor(b, done(ack2.runId), 10000, 'B to see the cancel');
    const db = await assertEqualsDB(srv, a);
    assert.deepEqual(clientMessages(b.state), db);
    assert.deepEqual(watchA.check(db), []);
    assert.deepEqual(watchB.check(db), []);
    assert.equal(db.at(-1).status, 'cancelled');
  } finally {
    watchA.stop();
    watchB.stop();
    a.close();
    b.close();
    await srv.stop();
  }
});

test('a message sent mid-run: reject is refused with run_active, interrupt cancels the run (its partial kept) and starts one; both clients end equal to the database', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '200' } });
  const a = client(srv.wsURL);
  a.connect();
  await waitFor(a, (s) => s.connection === 'live');
  const b = client(srv.wsURL, { sessionId: a.state.sessionId });
  try {
    b.connect();
    await waitFor(b, (s) => s.connection === 'live');
    const ack1 = await a.send('a long answer please');
    await waitFor(b, (s) => s.messages.some((m) => m.runId === ack1.runId && m.role === 'assistant' && m.content.length > 20), 20000, 'B to see text');
    await assert.rejects(b.send('not now', { whileRunning: 'reject' }), (err) => err.code === 'run_active');
    assert.throws(() => b.send('x', { whileRunning: 'later' }), /whileRunning/);
    const ack2 = await b.send('something else instead', { whileRunning: 'interrupt' });
    assert.notEqual(ack2.runId, ack1.runId);
    assert.equal(ack2.duplicate, false);
    for (const c of [a, b]) {
      const s = await waitFor(c, (s) => s.activeRun?.runId === ack2.runId, 10000, 'the new run');
      const old = s.messages.find((m) => m.runId === ack1.runId && m.role === 'assistant');
      assert.equal(old.status, 'cancelled', 'the partial is kept, cancelled');
      assert.ok(old.content.length > 20);
    }
    await a.cancel();
    await waitFor(a, done(ack2.runId), 10000, 'the cancel');
    await waitFor(b, done(ack2.runId), 10000, 'B to see the cancel');
    const db = await assertEqualsDB(srv, a);
    assert.deepEqual(clientMessages(b.state), db);
    assert.equal(db.filter((m) => m.role === 'user').length, 2, 'the refused message was not stored');
  } finally {
    a.close();
    b.close();
    await srv.stop();
  }
});

test('a message queued mid-run: both clients show it in state.queued, one is taken back, the rest start in order when the run ends; the state ends equal to the database', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '60' } });
  const a = client(srv.wsURL);
  a.connect();
  await waitFor(a, (s) => s.connection === 'live');
  const b = client(srv.wsURL, { sessionId: a.state.sessionId });
  try {
    b.connect();
    await waitFor(b, (s) => s.connection === 'live');
    const ack1 = await a.send('please approve the sandbox call');
    await waitFor(b, (s) => s.activeRun?.status === 'awaiting_approval', 20000, 'the run to wait');
    const q2 = await b.send('second', { requestId: 'q2-' + uuid4() });
    assert.equal(q2.status, 'queued');
    assert.equal(q2.runId, undefined);
    const q3 = await a.send('third', { whileRunning: 'queue', requestId: 'q3-' + uuid4() });
    const q4 = await a.send('fourth', { requestId: 'q4-' + uuid4() });
    for (const c of [a, b]) {
      await waitFor(c, (s) => s.queued.map((q) => q.content).join() === 'second,third,fourth', 10000, 'the queue');
    }
    await b.unqueue(q3.requestId);
    await waitFor(a, (s) => s.queued.map((q) => q.content).join() === 'second,fourth', 10000, 'the queue without third');
    await assert.rejects(b.unqueue(q3.requestId), (err) => err.code === 'not_found');
    await a.cancel(ack1.runId);
    for (const c of [a, b]) {
      await waitFor(c, (s) => s.queued.length === 0 && s.lastRun?.requestId === q4.requestId && s.activeRun === null, 30000, 'the queued runs to end');
    }
    const db = await assertEqualsDB(srv, a);
    assert.deepEqual(clientMessages(b.state), db);
    assert.deepEqual(db.filter((m) => m.role === 'user').map((m) => m.content), ['please approve the sandbox call', 'second', 'fourth']);
  } finally {
    a.close();
    b.close();
    await srv.stop();
  }
});

test('stored state: a client started again from the same storage says hello{epoch, lastSeq}, gets resumed, and ends equal to the database', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '80' } });
  const storage = new MemoryStorage();
  const first = client(srv.wsURL, { storage, persistThrottleMs: 50 });
  try {
    first.connect();
    const ack = await first.send('remember this, and use a tool');
    await waitFor(first, (s) => s.messages.some((m) => m.role === 'assistant' && m.content.length > 40), 20000, 'some text');
    first.close(); // a reload: the state is written on the way out (pagehide in a browser)
    const stored = JSON.parse(storage.getItem(`chatd.v1.session.${first.state.sessionId}`));
    assert.equal(stored.epoch, first.state.epoch);
    assert.equal(stored.lastSeq, first.state.lastSeq);

    const second = client(srv.wsURL, { storage, sessionId: ChatClient.lastSessionId(storage) });
    assert.equal(second.state.sessionId, first.state.sessionId);
    assert.equal(second.state.lastSeq, stored.lastSeq, 'rendered from storage before connecting');
    assert.deepEqual(second.state.messages, first.state.messages);
    const watch = watchContent(second);
    try {
      second.connect();
      await waitFor(second, done(ack.runId), 20000, 'the run to end');
      const hello = second.traceLog.find((e) => e.type === 'send' && e.frame.type === 'hello');
      assert.equal(hello.frame.epoch, stored.epoch);
      assert.equal(hello.frame.lastSeq, stored.lastSeq);
      const answer = second.traceLog.find((e) => e.type === 'frame' && (e.frame.type === 'resumed' || e.frame.type === 'snapshot'));
      assert.equal(answer.frame.type, 'resumed');
      const counts = checkTrace(second.traceLog);
      assert.ok(counts.events > 0, 'only the missed events came');
      const db = await assertEqualsDB(srv, second);
      assert.deepEqual(watch.check(db), []);
    } finally {
      watch.stop();
      second.close();
    }
  } finally {
    first.close();
    await srv.stop();
  }
});

test('a server restart (1001) mid-run: the client reconnects with hello{epoch, lastSeq}, gets a snapshot of the new epoch, and ends equal to the database', { timeout: 90000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '150' } });
  const c = client(srv.wsURL);
  const watch = watchContent(c);
  try {
    c.connect();
    const ack = await c.send('keep going across a restart');
    await waitFor(c, (s) => s.messages.some((m) => m.role === 'assistant' && m.content.length > 30), 20000, 'some text');
    const epoch = c.state.epoch;
    await srv.restart();
    await waitFor(c, (s) => s.epoch !== epoch && s.connection === 'live', 30000, 'the new epoch');
    const closes = c.traceLog.filter((e) => e.type === 'close' && e.by === 'server').map((e) => e.code);
    assert.ok(closes.includes(1001), `closed with 1001 (${closes})`);
    const hellos = c.traceLog.filter((e) => e.type === 'send' && e.frame.type === 'hello');
    assert.equal(hellos.at(-1).frame.epoch, epoch);
    await waitFor(c, done(ack.runId), 30000, 'the run to end');
    assert.equal(c.state.lastRun.status, 'done');
    assert.equal(c.state.closed, null);
    const db = await assertEqualsDB(srv, c);
    assert.deepEqual(watch.check(db), []);
  } finally {
    watch.stop();
    c.close();
    await srv.stop();
  }
});

const UUID4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

test('a new client: hello without a sessionId, the send waits for the snapshot, and runs in the session chatd named (a v4 UUID)', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '2ms', CHATD_DEMO_WORDS: '20' } });
  const proxy = await startProxy(Number(new URL(srv.httpURL).port));
  // The first hello's answer never arrives: the client must not send behind it, and must
  // say hello without an id again.
  let stalled = false;
  const c = client(`ws://127.0.0.1:${proxy.port}/v1/ws`, {
    onTrace: (e) => {
      c.traceLog.push(e);
      if (e.type === 'send' && e.frame.type === 'hello' && !stalled) {
        stalled = true;
        proxy.stall();
        setTimeout(() => proxy.cutAll(), 200);
      }
    },
  });
  c.traceLog = [];
  try {
    assert.equal(c.state.sessionId, null);
    const sent = c.send('who names me?');
    c.connect();
    const ack = await within(sent, 20000, 'the send');
    await waitFor(c, done(ack.runId), 20000, 'the run to end');
    const id = c.state.sessionId;
    assert.match(id, UUID4, 'the server generated the id');
    const sends = c.traceLog.filter((e) => e.type === 'send');
    const hellos = sends.filter((e) => e.frame.type === 'hello');
    assert.equal(hellos.length, 2);
    assert.ok(hellos.every((e) => !('sessionId' in e.frame)), 'no hello named a session');
    const chat = sends.filter((e) => e.frame.type === 'chat.send');
    assert.equal(chat.length, 1, 'sent once, after the snapshot');
    assert.equal(chat[0].conn, hellos[1].conn);
    const snap = c.traceLog.findIndex((e) => e.type === 'frame' && e.frame.type === 'snapshot');
    assert.ok(snap >= 0 && snap < c.traceLog.indexOf(chat[0]), 'the snapshot came before the send');
    const runs = await srv.query(`SELECT session_id::text FROM runs`);
    assert.deepEqual(runs, [{ session_id: id }], 'one run, in the named session');
    // The first hello may have created a session too; without a run it is not listed.
    const listed = await new SessionsClient({ baseURL: srv.httpURL }).list();
    assert.deepEqual(listed.sessions.map((x) => x.id), [id]);
    await assertEqualsDB(srv, c);

    // From now on it is a client of that session: a reconnect says hello with the id.
    assert.equal(proxy.cutAll(), 1);
    await waitFor(c, (s) => s.connection !== 'live', 5000, 'the cut to be seen');
    await waitFor(c, (s) => s.connection === 'live', 10000, 'live again');
    const last = c.traceLog.filter((e) => e.type === 'send' && e.frame.type === 'hello').at(-1);
    assert.equal(last.frame.sessionId, id);
    assert.equal(c.state.sessionId, id);
  } finally {
    c.close();
    await proxy.close();
    await srv.stop();
  }
});

test('a made-up session id is not found: the hello is refused (not_found, 4004), nothing is created, no reconnect', { timeout: 30000 }, async () => {
  const srv = await startChatd();
  const made = uuid4();
  const storage = new MemoryStorage();
  // As if stored before the database was reset.
  storage.setItem(`chatd.v1.session.${made}`, JSON.stringify({ v: 1, sessionId: made, epoch: 'gone', lastSeq: 7, messages: [], hasMore: false, activeRun: null, lastRun: null }));
  const c = client(srv.wsURL, { sessionId: made, storage });
  try {
    const sent = c.send('squat');
    c.connect();
    await assert.rejects(sent, (e) => e.code === 'closed');
    assert.deepEqual(c.state.closed, { code: 4004, reason: 'session not found' });
    assert.equal(c.state.connection, 'offline', 'not connected, and not trying');
    const refused = c.traceLog.find((e) => e.type === 'frame' && e.frame.type === 'error');
    assert.equal(refused?.frame.code, 'not_found');
    assert.equal(storage.getItem(`chatd.v1.session.${made}`), null, 'the stale state is forgotten');
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(c.traceLog.filter((e) => e.type === 'open').length, 1);
    assert.equal(c.traceLog.filter((e) => e.type === 'reconnect').length, 0);
    const rows = await srv.query(`SELECT (SELECT count(*) FROM sessions)::int AS sessions, (SELECT count(*) FROM runs)::int AS runs`);
    assert.deepEqual(rows, [{ sessions: 0, runs: 0 }], 'no session was created, nothing ran');
  } finally {
    c.close();
    await srv.stop();
  }
});

// An HS256 JWT for sub, signed with secret, valid for an hour.
function jwt(secret, sub) {
  const b64 = (v) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const body = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub, exp: Math.floor(Date.now() / 1000) + 3600 })}`;
  return `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`;
}

test('a new session over the user\'s limit: the hello is refused (too_many_sessions), the client stops with 4029, nothing is created, no reconnect', { timeout: 30000 }, async () => {
  const secret = '0123456789abcdef0123456789abcdef';
  const srv = await startChatd({ env: { CHATD_AUTH: 'jwt', CHATD_JWT_SECRET: secret, CHATD_MAX_SESSIONS_PER_USER: '1' } });
  const token = jwt(secret, 'gail');
  const first = client(srv.wsURL, { token });
  const second = client(srv.wsURL, { token });
  try {
    first.connect();
    await waitFor(first, (s) => s.connection === 'live' && s.sessionId);
    const sent = second.send('one too many');
    second.connect();
    await assert.rejects(sent, (e) => e.code === 'closed');
    assert.equal(second.state.closed.code, 4029);
    assert.match(second.state.closed.reason, /too many sessions/);
    assert.equal(second.state.connection, 'offline', 'not connected, and not trying');
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(second.traceLog.filter((e) => e.type === 'reconnect').length, 0);
    const rows = await srv.query(`SELECT count(*)::int AS sessions FROM sessions`);
    assert.deepEqual(rows, [{ sessions: 1 }], 'only the first client\'s session');
  } finally {
    first.close();
    second.close();
    await srv.stop();
  }
});

test('a fatal close (1009: a frame over the read limit) stops the client: state.closed, the send rejected, no reconnect', { timeout: 30000 }, async () => {
  const srv = await startChatd({ env: { CHATD_READ_LIMIT: '1KiB' } });
  const c = client(srv.wsURL);
  try {
    c.connect();
    await waitFor(c, (s) => s.connection === 'live');
    const sent = c.send('x'.repeat(4000));
    await assert.rejects(sent, (e) => e.code === 'closed');
    assert.equal(c.state.closed.code, 1009);
    assert.equal(c.state.connection, 'offline', 'not connected, and not trying');
    const opens = c.traceLog.filter((e) => e.type === 'open').length;
    assert.equal(opens, 1);
    await assert.rejects(c.send('small'), (e) => e.code === 'closed');
    assert.equal(c.traceLog.filter((e) => e.type === 'reconnect').length, 0);
  } finally {
    c.close();
    await srv.stop();
  }
});

test('history paging: a snapshot holds the newest 200 messages; loadOlder pages back to the first, also across a reconnect', { timeout: 120000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '0s', CHATD_DEMO_WORDS: '3' } });
  const writer = client(srv.wsURL);
  try {
    writer.connect();
    // 36 runs of user, 3 segments and 2 tool calls: 216 messages.
    for (let i = 0; i < 36; i++) {
      const ack = await writer.send(`message ${i} with tools`);
      await waitFor(writer, done(ack.runId), 20000, `run ${i}`);
    }
    const db = await dbMessages(srv, writer.state.sessionId);
    assert.equal(db.length, 216);
    assert.deepEqual(clientMessages(writer.state), db, 'a client that saw it all holds it all');
    assert.equal(writer.state.hasMore, false);

    const proxy = await startProxy(Number(new URL(srv.httpURL).port));
    let stallNext = false;
    const reader = client(`ws://127.0.0.1:${proxy.port}/v1/ws`, {
      sessionId: writer.state.sessionId,
      onTrace: (e) => {
        reader.traceLog.push(e);
        if (stallNext && e.type === 'send' && e.frame.type === 'history.fetch') {
          stallNext = false;
          proxy.stall();
          queueMicrotask(() => proxy.cutAll());
        }
      },
    });
    reader.traceLog = [];
    try {
      reader.connect();
      const s0 = await waitFor(reader, (s) => s.connection === 'live');
      assert.equal(s0.messages.length, 200);
      assert.equal(s0.hasMore, true);
      assert.deepEqual(clientMessages(s0), db.slice(16));
      // One page lost with its connection: loadOlder sends it again after the reconnect.
      stallNext = true;
      const first = await within(reader.loadOlder(7), 20000, 'a page across a reconnect');
      assert.deepEqual(first, { added: 7, hasMore: true });
      const fetches = reader.traceLog.filter((e) => e.type === 'send' && e.frame.type === 'history.fetch');
      assert.equal(fetches.length, 2);
      assert.equal(fetches[1].frame.before, db[16].position);
      let pages = 1;
      for (;;) {
        const r = await within(reader.loadOlder(7), 10000, 'a page');
        pages++;
        if (!r.hasMore) break;
        assert.equal(r.added, 7);
      }
      assert.equal(pages, 3);
      assert.equal(reader.state.hasMore, false);
      assert.deepEqual(clientMessages(reader.state), db);
      assert.deepEqual(await reader.loadOlder(), { added: 0, hasMore: false });
    } finally {
      reader.close();
      await proxy.close();
    }
  } finally {
    writer.close();
    await srv.stop();
  }
});

function longestPause(trace) {
  let best = { ms: 0, entry: null };
  for (let i = 1; i < trace.length; i++) {
    const ms = trace[i].at - trace[i - 1].at;
    if (ms > best.ms) best = { ms, entry: trace[i], i };
  }
  return best;
}

test('approvals as a security boundary: decide sends the shown inputHash, a wrong one is refused and the call waits; allow for this conversation; revoke from the other client', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '3ms', CHATD_DEMO_WORDS: '20' } });
  const a = client(srv.wsURL);
  a.connect();
  await waitFor(a, (s) => s.connection === 'live');
  const b = client(srv.wsURL, { sessionId: a.state.sessionId });
  try {
    b.connect();
    await waitFor(b, (s) => s.connection === 'live');
    const ack1 = await a.send('please approve the sandbox call');
    const waiting = await waitFor(a, (s) => s.activeRun?.status === 'awaiting_approval', 20000, 'the approval prompt');
    const call = pendingApprovals(waiting)[0];
    assert.match(call.tool.inputHash, /^[0-9a-f]{64}$/);
    assert.equal(waiting.activeRun.pendingApproval.inputHash, call.tool.inputHash);

    await assert.rejects(a.decide(call.tool.callId, 'approve', undefined, { inputHash: '0'.repeat(64) }), (e) => e.code === 'conflict');
    assert.equal(a.state.activeRun.status, 'awaiting_approval', 'the call still waits');

    const decided = await a.decide(call.tool.callId, 'approve', undefined, { scope: 'session' });
    assert.equal(decided.runId, ack1.runId);
    const sent = a.traceLog.filter((e) => e.type === 'send' && e.frame.type === 'tool.decide').map((e) => e.frame);
    assert.ok(sent.every((f) => f.inputHash !== undefined), 'every decision names the input it was shown');
    assert.equal(sent.at(-1).inputHash, call.tool.inputHash);
    const withRule = await waitFor(b, (s) => s.approvalRules.length === 1, 10000, 'B to see the rule');
    const rule = withRule.approvalRules[0];
    assert.equal(rule.tool, call.tool.name);
    await waitFor(a, done(ack1.runId), 20000, 'the approved run to end');
    const approved = a.state.messages.find((m) => m.id === call.id);
    assert.equal(approved.tool.decision.via, 'ws');
    assert.equal(approved.tool.decision.approved, true);

    // The next call of the tool runs without asking, approved by the rule.
    const ack2 = await a.send('please approve the sandbox call again');
    const s2 = await waitFor(a, done(ack2.runId), 20000, 'the second run to end without a prompt');
    const auto = s2.messages.find((m) => m.runId === ack2.runId && m.role === 'tool');
    assert.equal(auto.tool.decision.via, 'rule');
    assert.equal(auto.tool.decision.ruleId, rule.ruleId);

    // Revoked from B: A's list empties, and the next call asks again.
    await b.revokeRule(rule.ruleId);
    await waitFor(a, (s) => s.approvalRules.length === 0, 10000, 'A to see the revoke');
    await assert.rejects(b.revokeRule(rule.ruleId), (e) => e.code === 'not_found');
    const ack3 = await a.send('please approve the sandbox call once more');
    await waitFor(a, (s) => s.activeRun?.runId === ack3.runId && s.activeRun.status === 'awaiting_approval', 20000, 'the prompt again');
    await a.cancel();
    await waitFor(a, done(ack3.runId), 10000, 'the cancel');
    await waitFor(b, done(ack3.runId), 10000, 'B to see the cancel');
    const db = await assertEqualsDB(srv, a);
    assert.deepEqual(clientMessages(b.state), db);
  } finally {
    a.close();
    b.close();
    await srv.stop();
  }
});

test('branches: an edit, a regenerate and branch.select in one client; the other follows, a run streaming on another branch included; both end equal to a fresh snapshot', { timeout: 90000 }, async () => {
  // Runs of about 1.6 s: long enough to switch branches twice while one streams. Deltas
  // are coalesced (the default): branch.selected must carry the text held back for them.
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '8ms', CHATD_DEMO_WORDS: '200' } });
  const a = client(srv.wsURL);
  a.connect();
  await waitFor(a, (s) => s.connection === 'live');
  const b = client(srv.wsURL, { sessionId: a.state.sessionId });
  const texts = (s) => s.messages.map((m) => `${m.role}:${m.content.slice(0, 40)}`);
  const fresh = async () => {
    const c = client(srv.wsURL, { sessionId: a.state.sessionId });
    c.connect();
    try {
      return await waitFor(c, (s) => s.connection === 'live', 10000, 'a fresh client');
    } finally {
      c.close();
    }
  };
  const sameAsFresh = async () => {
    const f = await fresh();
    for (const c of [a, b]) {
      assert.deepEqual(clientMessages(c.state), clientMessages(f));
      assert.deepEqual(c.state.messages.map((m) => m.branch ?? null), f.messages.map((m) => m.branch ?? null));
      assert.deepEqual(c.state.messages.map((m) => m.parentId ?? null), f.messages.map((m) => m.parentId ?? null));
    }
    return f;
  };
  try {
    b.connect();
    await waitFor(b, (s) => s.connection === 'live');
    const r1 = await a.send('first');
    await waitFor(b, done(r1.runId), 20000, 'the first run');
    const r2 = await a.send('second');
    await waitFor(b, done(r2.runId), 20000, 'the second run');
    await waitFor(a, done(r2.runId), 20000, 'the second run on A');
    const linear = a.state.messages;
    assert.deepEqual(linear.map((m) => m.parentId ?? null), [null, linear[0].id, linear[1].id, linear[2].id], 'one branch, each message the child of the one before');
    const [q1, a1] = linear;

    // Edit the first question: both show the new version and its answer, "2/2".
    await assert.rejects(a.edit(uuid4(), 'nothing'), (err) => err.code === 'not_found');
    const r3 = await a.edit(q1.id, 'first, edited');
    assert.notEqual(r3.runId, r1.runId);
    for (const c of [a, b]) {
      const s = await waitFor(c, done(r3.runId), 20000, 'the edit answered');
      assert.deepEqual(texts(s).map((t) => t.split(':')[0]), ['user', 'assistant']);
      assert.equal(s.messages[0].content, 'first, edited');
      assert.deepEqual(s.messages[0].branch, { siblings: [q1.id, s.messages[0].id], index: 1 });
      assert.deepEqual(branchOf(s.messages[0]), { index: 1, count: 2, prev: q1.id });
    }
    await sameAsFresh();

    // Regenerate the first answer, on the branch not shown: it becomes the path.
    await assert.rejects(b.regenerate(uuid4()), (err) => err.code === 'not_found');
    const r4 = await b.regenerate(r1.runId);
    let regenerated;
    for (const c of [a, b]) {
      const s = await waitFor(c, done(r4.runId), 20000, 'the regenerated answer');
      assert.equal(c.state.lastRun.retryOf, r1.runId);
      assert.deepEqual(s.messages.map((m) => m.id).slice(0, 1), [q1.id]);
      assert.equal(s.messages.length, 2);
      assert.notEqual(s.messages[1].id, a1.id);
      assert.deepEqual(s.messages[1].branch, { siblings: [a1.id, s.messages[1].id], index: 1 });
      regenerated = s.messages[1].id;
    }
    await sameAsFresh();

    // Back to the first answer: the path through it, with the second question below.
    await a.selectBranch(a1.id);
    for (const c of [a, b]) await waitFor(c, (s) => s.messages.length === 4 && s.messages[1].id === a1.id, 10000, 'the first branch');
    assert.deepEqual(a.state.messages.map((m) => m.id), linear.map((m) => m.id));
    await sameAsFresh();

    // A run streams on this branch; b shows another one meanwhile: the run stays active
    // for both, its text shows only where its branch does, and once selected again it
    // shows with the text so far, then the deltas.
    const r5 = await a.send('a longer one please');
    const streaming = await waitFor(b, (s) => s.messages.some((m) => m.runId === r5.runId && m.role === 'assistant' && m.content.length > 10), 20000, 'text of the new run');
    const answer = streaming.messages.at(-1).id;
    await b.selectBranch(regenerated);
    for (const c of [a, b]) {
      const s = await waitFor(c, (s) => s.messages.length === 2 && s.messages[1].id === regenerated, 10000, 'the other branch while the run streams');
      assert.ok(!s.messages.some((m) => m.runId === r5.runId), 'the run streams on a branch not shown');
    }
    for (const c of [a, b]) assert.equal(c.state.activeRun?.runId, r5.runId, 'the run is the session\'s, shown or not');
    await a.selectBranch(answer);
    for (const c of [a, b]) {
      const back = await waitFor(c, (s) => s.messages.some((m) => m.id === answer), 10000, 'the run\'s branch again');
      assert.ok(back.messages.find((m) => m.id === answer).content.length > 10, 'with the text so far');
      await waitFor(c, done(r5.runId), 20000, 'the run to end');
      await waitFor(c, (s) => s.messages.at(-1)?.id === answer && s.messages.at(-1).status === 'complete', 20000, 'the run\'s answer shown');
    }
    const f = await sameAsFresh();
    const [row] = await srv.query(`SELECT content FROM messages WHERE id = '${answer}'`);
    assert.equal(f.messages.at(-1).content, row.content, 'the text so far, then every delta: the stored text');

    // While a run is active: a regenerate is refused, an edit too unless it interrupts.
    const r6 = await a.send('one more');
    await waitFor(b, (s) => s.messages.some((m) => m.runId === r6.runId && m.role === 'assistant' && m.content.length > 10), 20000, 'text of one more run');
    await assert.rejects(b.regenerate(r5.runId), (err) => err.code === 'run_active');
    await assert.rejects(b.edit(q1.id, 'not now'), (err) => err.code === 'run_active');
    const r7 = await b.edit(q1.id, 'first, again', { whileRunning: 'interrupt' });
    for (const c of [a, b]) {
      const s = await waitFor(c, done(r7.runId), 20000, 'the interrupting edit answered');
      assert.equal(s.messages[0].content, 'first, again');
      assert.equal(s.messages[0].branch.siblings.length, 3);
    }
    const [cancelled] = await srv.query(`SELECT status, cancel_reason FROM runs WHERE id = '${r6.runId}'`);
    assert.equal(cancelled.status, 'cancelled');
    await sameAsFresh();
  } finally {
    a.close();
    b.close();
    await srv.stop();
  }
});
