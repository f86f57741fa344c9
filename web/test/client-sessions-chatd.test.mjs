// SessionsClient and ChatClient against the real chatd's HTTP sessions API: the list
// pages by activity, a rename sticks, a delete closes the open client for good (4004).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ChatClient, ChatError, MemoryStorage, SessionsClient, sessionKey } from '../client/dist/index.js';
import { startChatd } from './chatd.mjs';
import { waitFor, nodeWebSocket } from './client-util.mjs';

const WebSocket = nodeWebSocket();

function client(srv, storage = new MemoryStorage(), sessionId = null) {
  return new ChatClient({ url: srv.wsURL, WebSocket, storage, sessionId, backoff: { initialMs: 10, maxMs: 200 } });
}

const ended = (runId) => (s) => s.activeRun === null && s.lastRun?.runId === runId;

test('SessionsClient against chatd: list pages by activity, rename sticks, delete closes the open client with 4004', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '0s', CHATD_DEMO_WORDS: '8' } });
  const api = new SessionsClient({ baseURL: srv.httpURL });
  const clients = [];
  try {
    // Three conversations, one run each, in order; and one that was opened and never sent to.
    for (const text of ['first question', 'second question', 'third question']) {
      const c = client(srv);
      clients.push(c);
      c.connect();
      const ack = await c.send(text);
      await waitFor(c, ended(ack.runId), 10000, `the run of "${text}" to end`);
    }
    const idle = client(srv);
    clients.push(idle);
    idle.connect();
    await waitFor(idle, (s) => s.connection === 'live', 10000, 'the idle client to be live');

    // Paged two at a time, most recently active first; the idle session is not listed.
    const p1 = await api.list({ limit: 2 });
    assert.deepEqual(p1.sessions.map((s) => s.title), ['third question', 'second question']);
    assert.ok(p1.nextCursor, 'a next page');
    const p2 = await api.list({ limit: 2, cursor: p1.nextCursor });
    assert.deepEqual(p2.sessions.map((s) => s.title), ['first question']);
    assert.equal(p2.nextCursor, null);
    const third = p1.sessions[0];
    assert.equal(third.id, clients[2].state.sessionId);
    assert.equal(third.activeRun, null);
    assert.ok(third.preview.startsWith('Demo reply to'), `preview is the latest text: ${third.preview}`);

    // A rename sticks, also after another message in the session.
    const renamed = await api.rename(third.id, '  Renamed  ');
    assert.equal(renamed.title, 'Renamed');
    const ack = await clients[2].send('one more');
    await waitFor(clients[2], ended(ack.runId), 10000, 'the second run to end');
    const after = await api.list({ limit: 1 });
    assert.equal(after.sessions[0].id, third.id);
    assert.equal(after.sessions[0].title, 'Renamed');
    await assert.rejects(api.rename(third.id, '   '), (err) => err instanceof ChatError && err.code === 'bad_request');

    // Delete while a client is open on it: that client is closed for good with 4004, its
    // stored state is forgotten, the session is gone from the list and from the database.
    const victim = clients[1];
    const storage = new MemoryStorage();
    const watcher = client(srv, storage, victim.state.sessionId);
    clients.push(watcher);
    watcher.connect();
    await waitFor(watcher, (s) => s.connection === 'live', 10000, 'the watcher to be live');
    await api.delete(victim.state.sessionId);
    const closed = await waitFor(watcher, (s) => s.closed !== null, 10000, 'the watcher to be closed');
    assert.equal(closed.closed.code, 4004);
    assert.equal(storage.getItem(sessionKey(victim.state.sessionId)), null, 'the stored state is forgotten');
    await assert.rejects(watcher.send('hello?'), (err) => err instanceof ChatError);
    const rows = await srv.query(`SELECT (SELECT count(*) FROM messages WHERE session_id = '${victim.state.sessionId}')::int AS messages,
        (SELECT count(*) FROM runs WHERE session_id = '${victim.state.sessionId}')::int AS runs`);
    assert.deepEqual(rows, [{ messages: 0, runs: 0 }]);
    const list = await api.list();
    assert.deepEqual(list.sessions.map((s) => s.id).sort(), [clients[0].state.sessionId, third.id].sort());
    await assert.rejects(api.delete(victim.state.sessionId), (err) => err instanceof ChatError && err.code === 'not_found' && err.status === 404);

    // A new client on the deleted id is refused for good too.
    const late = client(srv, new MemoryStorage(), victim.state.sessionId);
    clients.push(late);
    late.connect();
    const lateState = await waitFor(late, (s) => s.closed !== null, 10000, 'the late client to be refused');
    assert.equal(lateState.closed.code, 4004);
  } finally {
    for (const c of clients) c.close();
    await srv.stop();
  }
});

test('SessionsClient runs without a socket: start, poll, list, a tab follows, erase', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '20ms', CHATD_DEMO_WORDS: '30' } });
  const api = new SessionsClient({ baseURL: srv.httpURL });
  try {
    const started = await api.start({ requestId: 'nightly-1', content: 'write the report' });
    assert.equal(started.queued, false);
    assert.equal(started.run.requestId, 'nightly-1');
    assert.equal(started.run.status, 'running');
    // A tab opened on the session follows the run live, to its end.
    const tab = client(srv, new MemoryStorage(), started.sessionId);
    tab.connect();
    await waitFor(tab, ended(started.run.runId), 15000, 'the tab to see the run end');
    // Read over HTTP it is done too (the session's actor answers, as its tabs know it);
    // the same requestId again starts nothing.
    const run = await api.run(started.sessionId, started.run.runId);
    assert.equal(run.status, 'done');
    assert.ok(run.endedAt);
    const again = await api.start({ requestId: 'nightly-1', content: 'write the report' });
    assert.equal(again.sessionId, started.sessionId);
    assert.equal(again.run.runId, started.run.runId);
    const second = await api.send(started.sessionId, { requestId: 'nightly-2', content: 'and a summary' });
    await waitFor(tab, ended(second.run.runId), 15000, 'the second run to end');
    const page = await api.runs(started.sessionId, { status: ['done'], limit: 1 });
    assert.deepEqual(page.runs.map((r) => r.requestId), ['nightly-2']);
    const rest = await api.runs(started.sessionId, { status: ['done'], cursor: page.nextCursor });
    assert.deepEqual(rest.runs.map((r) => r.requestId), ['nightly-1']);
    await assert.rejects(api.run(started.sessionId, '0193a000-0000-7000-8000-000000000000'), (e) => e instanceof ChatError && e.code === 'not_found' && e.status === 404);
    await assert.rejects(api.send(started.sessionId, { requestId: 'x', content: '' }), (e) => e instanceof ChatError && e.code === 'bad_request');
    tab.close();
    // Erasure needs an authenticated user: this chatd has none.
    await assert.rejects(api.eraseMe(), (e) => e instanceof ChatError && e.code === 'bad_request');
  } finally {
    await srv.stop();
  }
});
