// The client library against a real chatd (bin/chatd on a fresh database): reconnects at
// random moments, a send retried across a reconnect, two clients, stored state, fatal
// closes. Every test ends comparing the library's state with the database.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ChatClient, MemoryStorage, pendingApprovals } from '../client/dist/index.js';
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
    env: { CHATD_DEMO_DELAY: '3ms', CHATD_DEMO_WORDS: '150', CHATD_RING_EVENTS: '48', CHATD_COALESCE_DELTAS: '0s' },
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

function longestPause(trace) {
  let best = { ms: 0, entry: null };
  for (let i = 1; i < trace.length; i++) {
    const ms = trace[i].at - trace[i - 1].at;
    if (ms > best.ms) best = { ms, entry: trace[i], i };
  }
  return best;
}
