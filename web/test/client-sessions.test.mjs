// SessionsClient against a small in-test HTTP server that follows the contract's shapes
// (docs/http.md): GET /v1/sessions with a cursor, PATCH and DELETE /v1/sessions/{id}, JSON
// errors with the protocol's codes, a bearer token.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { SessionsClient, ChatError } from '../client/dist/index.js';

function session(i) {
  return {
    id: `0193a000-0000-7000-8000-${String(i).padStart(12, '0')}`,
    title: `chat ${i}`,
    createdAt: '2026-11-20T22:00:00Z',
    updatedAt: `2026-11-20T22:${String(59 - i).padStart(2, '0')}:00Z`,
    preview: `preview ${i}`,
    activeRun: i === 0 ? { runId: '0193a000-0000-7000-8000-0000000000a1', status: 'running' } : null,
    ...(i % 2 ? { usage: { contextTokens: 100 * i, contextWindow: 64000 } } : {}),
  };
}

async function fakeAPI() {
  const sessions = Array.from({ length: 5 }, (_, i) => session(i));
  const requests = [];
  const workspace = { 'visits.txt': 'visit 1\n', 'report/a b?#%.md': '# ünïcode\n' };
  const send = (res, status, body) => {
    res.writeHead(status, body === undefined ? {} : { 'Content-Type': 'application/json' });
    res.end(body === undefined ? undefined : JSON.stringify(body));
  };
  const error = (res, status, code, message) => send(res, status, { error: { code, message } });
  const server = createServer(async (req, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    const url = new URL(req.url, 'http://x');
    requests.push({ method: req.method, path: url.pathname, raw: req.url, query: Object.fromEntries(url.searchParams), auth: req.headers.authorization ?? null, type: req.headers['content-type'] ?? null, body });
    if (req.headers.authorization !== 'Bearer good') return error(res, 401, 'unauthorized', 'unauthorized');
    if (url.pathname === '/v1/sessions' && req.method === 'GET') {
      const limit = Number(url.searchParams.get('limit') ?? 20);
      if (!(limit >= 1 && limit <= 100)) return error(res, 400, 'bad_request', 'limit must be 1 to 100');
      const start = Number(url.searchParams.get('cursor') ?? 0);
      const page = sessions.slice(start, start + limit);
      return send(res, 200, { sessions: page, nextCursor: start + limit < sessions.length ? String(start + limit) : null });
    }
    const f = /^\/v1\/sessions\/([^/]+)\/files(?:\/(.*))?$/.exec(url.pathname);
    if (f && req.method === 'GET') {
      if (!sessions.some((s) => s.id === f[1])) return error(res, 404, 'not_found', 'session not found');
      if (f[2] === undefined) return send(res, 200, { files: Object.entries(workspace).map(([path, data]) => ({ path, size: Buffer.byteLength(data), modifiedAt: '2026-11-27T12:03:11Z' })), truncated: false });
      // The raw path, as it came: every part decoded on its own.
      const name = f[2].split('/').map(decodeURIComponent).join('/');
      if (!(name in workspace)) return error(res, 404, 'not_found', 'no such file');
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Disposition': 'attachment' });
      return res.end(workspace[name]);
    }
    const m = /^\/v1\/sessions\/([^/]+)$/.exec(url.pathname);
    const i = m ? sessions.findIndex((s) => s.id === decodeURIComponent(m[1])) : -1;
    if (m && i < 0) return error(res, 404, 'not_found', 'session not found');
    if (m && req.method === 'PATCH') {
      const title = JSON.parse(body).title?.trim();
      if (!title) return error(res, 400, 'bad_request', 'title must be 1 to 200 characters');
      sessions[i] = { ...sessions[i], title };
      return send(res, 200, sessions[i]);
    }
    if (m && req.method === 'DELETE') {
      sessions.splice(i, 1);
      return send(res, 204);
    }
    if (url.pathname === '/v1/broken') return send(res, 502, undefined);
    return error(res, 404, 'not_found', 'no such route');
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}`, requests, sessions, close: () => new Promise((r) => server.close(r)) };
}

test('list pages with the cursor, sending the bearer token', async () => {
  const api = await fakeAPI();
  try {
    const sc = new SessionsClient({ baseURL: api.url + '/', token: 'good' });
    const p1 = await sc.list({ limit: 2 });
    assert.deepEqual(p1.sessions, [session(0), session(1)]);
    assert.equal(p1.nextCursor, '2');
    const p2 = await sc.list({ limit: 2, cursor: p1.nextCursor });
    assert.deepEqual(p2.sessions.map((s) => s.title), ['chat 2', 'chat 3']);
    const p3 = await sc.list({ limit: 2, cursor: p2.nextCursor });
    assert.deepEqual(p3, { sessions: [session(4)], nextCursor: null });
    const all = await sc.list();
    assert.equal(all.sessions.length, 5);
    assert.deepEqual(api.requests.map((r) => [r.method, r.path, r.query, r.auth]), [
      ['GET', '/v1/sessions', { limit: '2' }, 'Bearer good'],
      ['GET', '/v1/sessions', { limit: '2', cursor: '2' }, 'Bearer good'],
      ['GET', '/v1/sessions', { limit: '2', cursor: '4' }, 'Bearer good'],
      ['GET', '/v1/sessions', {}, 'Bearer good'],
    ]);
  } finally {
    await api.close();
  }
});

test('rename sends the title as JSON and returns the session', async () => {
  const api = await fakeAPI();
  try {
    const sc = new SessionsClient({ baseURL: api.url, token: async () => 'good' });
    const s = await sc.rename(session(1).id, '  Trip plans ');
    assert.equal(s.title, 'Trip plans');
    assert.equal(s.id, session(1).id);
    const r = api.requests.at(-1);
    assert.equal(r.method, 'PATCH');
    assert.equal(r.type, 'application/json');
    assert.deepEqual(JSON.parse(r.body), { title: '  Trip plans ' });
    await assert.rejects(sc.rename(session(1).id, '   '), (e) => e instanceof ChatError && e.code === 'bad_request' && e.status === 400);
  } finally {
    await api.close();
  }
});

test('delete resolves on 204; again it is not_found', async () => {
  const api = await fakeAPI();
  try {
    const sc = new SessionsClient({ baseURL: api.url, token: 'good' });
    assert.equal(await sc.delete(session(2).id), undefined);
    assert.equal(api.sessions.length, 4);
    await assert.rejects(sc.delete(session(2).id), (e) => e.code === 'not_found' && e.status === 404 && e.message === 'session not found');
  } finally {
    await api.close();
  }
});

test('errors: the API\'s code; http for a response that is not the API\'s; network when unreachable', async () => {
  const api = await fakeAPI();
  try {
    await assert.rejects(new SessionsClient({ baseURL: api.url, token: 'bad' }).list(), (e) => e.code === 'unauthorized' && e.status === 401);
    await assert.rejects(new SessionsClient({ baseURL: api.url }).list(), (e) => e.code === 'unauthorized');
    assert.equal(api.requests.at(-1).auth, null, 'no token: no Authorization header');
    await assert.rejects(new SessionsClient({ baseURL: api.url, token: 'good' }).list({ limit: 0 }), (e) => e.code === 'bad_request');
    const sc = new SessionsClient({ baseURL: api.url, token: 'good', fetch: (u, init) => fetch(u.replace('/v1/sessions', '/v1/broken'), init) });
    await assert.rejects(sc.list(), (e) => e.code === 'http' && e.status === 502);
  } finally {
    await api.close();
  }
  await assert.rejects(new SessionsClient({ baseURL: api.url, token: 'good' }).list(), (e) => e.code === 'network');
});

test('SessionsClient calls fetch as a plain function, as a browser requires ("Illegal invocation" otherwise)', async () => {
  let calls = 0;
  // A browser's fetch refuses to be called as a method of any object but the window.
  const strictFetch = function (input, init) {
    if (this !== undefined && this !== globalThis) throw new TypeError('Illegal invocation');
    calls++;
    return Promise.resolve(new Response(JSON.stringify({ sessions: [], nextCursor: null }), { status: 200, headers: { 'Content-Type': 'application/json' } }));
  };
  const api = new SessionsClient({ baseURL: 'http://127.0.0.1:1', fetch: strictFetch });
  assert.deepEqual(await api.list(), { sessions: [], nextCursor: null });
  const saved = globalThis.fetch;
  globalThis.fetch = strictFetch;
  try {
    assert.deepEqual(await new SessionsClient({ baseURL: 'http://127.0.0.1:1' }).list(), { sessions: [], nextCursor: null });
  } finally {
    globalThis.fetch = saved;
  }
  assert.equal(calls, 2);
});

test('files lists the workspace; download fetches one with the token, each part of its path encoded', async () => {
  const api = await fakeAPI();
  try {
    const sc = new SessionsClient({ baseURL: api.url, token: () => 'good' });
    const id = session(1).id;
    assert.deepEqual(await sc.files(id), {
      files: [
        { path: 'visits.txt', size: 8, modifiedAt: '2026-11-27T12:03:11Z' },
        { path: 'report/a b?#%.md', size: 12, modifiedAt: '2026-11-27T12:03:11Z' },
      ],
      truncated: false,
    });
    const blob = await sc.download(id, 'report/a b?#%.md');
    assert.ok(blob instanceof Blob);
    assert.equal(await blob.text(), '# ünïcode\n');
    const r = api.requests.at(-1);
    assert.equal(r.raw, `/v1/sessions/${id}/files/report/a%20b%3F%23%25.md`);
    assert.equal(r.auth, 'Bearer good');
    assert.equal(await (await sc.download(id, 'visits.txt')).text(), 'visit 1\n');
    await assert.rejects(sc.download(id, 'nothing.txt'), (e) => e instanceof ChatError && e.code === 'not_found' && e.status === 404 && e.message === 'no such file');
    await assert.rejects(sc.files('0193a000-0000-7000-8000-999999999999'), (e) => e.code === 'not_found' && e.status === 404);
    await assert.rejects(new SessionsClient({ baseURL: api.url, token: 'bad' }).download(id, 'visits.txt'), (e) => e.code === 'unauthorized' && e.status === 401);
  } finally {
    await api.close();
  }
});

test('download: a response that is not the API\'s is http; an unreachable server is network', async () => {
  const broken = new SessionsClient({ baseURL: 'http://x', fetch: async () => new Response('<html>bad gateway</html>', { status: 502 }) });
  await assert.rejects(broken.download('s', 'a.txt'), (e) => e instanceof ChatError && e.code === 'http' && e.status === 502);
  const down = new SessionsClient({ baseURL: 'http://x', fetch: async () => { throw new TypeError('fetch failed'); } });
  await assert.rejects(down.download('s', 'a.txt'), (e) => e.code === 'network');
  await assert.rejects(down.files('s'), (e) => e.code === 'network');
  // An empty answer's fields default.
  const bare = new SessionsClient({ baseURL: 'http://x', fetch: async () => new Response('{}', { status: 200 }) });
  assert.deepEqual(await bare.files('s'), { files: [], truncated: false });
});
