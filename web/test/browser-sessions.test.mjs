// The conversation list (the HTTP sessions API through the client library), in Chromium
// against a real chatd: it lists conversations most recent first with their titles and
// context meters, renames and deletes them, pages with "Load more", and all of it
// survives a reload. A conversation deleted while a tab shows it sends that tab to a new
// conversation; the address of one that does not exist says so.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  assertNoPageErrors,
  newPage,
  openApp,
  screenshot,
  send,
  setup,
  waitLive,
  waitNew,
  waitRunEnded,
  WAIT,
} from './browser.mjs';

let env;
before(async () => {
  env = await setup({ CHATD_DEMO_WORDS: '30', CHATD_DEMO_DELAY: '5ms' });
});
after(() => env?.teardown());

/** row is the selector of a session's row in the list. */
const row = (id) => `[data-testid=session-item][data-session-id="${id}"]`;

/**
 * clearSessions deletes every listed session through the API: the tests share chatd's
 * one anonymous user, so each starts from an empty list.
 */
async function clearSessions() {
  for (;;) {
    const res = await fetch(`${env.srv.httpURL}/v1/sessions?limit=100`);
    assert.equal(res.status, 200);
    const { sessions } = await res.json();
    if (sessions.length === 0) return;
    for (const s of sessions) {
      const del = await fetch(`${env.srv.httpURL}/v1/sessions/${s.id}`, { method: 'DELETE' });
      assert.equal(del.status, 204);
    }
  }
}

/** waitListed waits until the list shows exactly these sessions, in this order. */
async function waitListed(page, ids) {
  await page.waitForFunction(
    (ids) =>
      [...document.querySelectorAll('[data-testid=session-item]')].map((e) => e.dataset.sessionId).join() === ids.join(),
    ids,
    { timeout: WAIT },
  );
}

async function titles(page) {
  return page.$$eval('[data-testid=session-title]', (els) => els.map((e) => e.textContent));
}

test('the list shows, renames and deletes conversations, and survives a reload', async () => {
  await clearSessions();
  const context = await env.browser.newContext({ viewport: { width: 1200, height: 760 } });
  const page = await openApp(context, env.srv);
  const first = await send(page, 'first conversation');
  await waitRunEnded(page);
  await page.click('[data-testid=new-conversation]');
  await page.waitForURL(env.srv.httpURL + '/', { timeout: WAIT });
  await waitLive(page);
  assert.equal(await page.textContent('[data-testid=conversation-title]'), 'New conversation');
  const second = await send(page, 'second conversation');
  await waitRunEnded(page);

  // Most recently active first, titled from the first message, the open one marked.
  await waitListed(page, [second, first]);
  assert.deepEqual(await titles(page), ['second conversation', 'first conversation']);
  assert.equal(await page.getAttribute(row(second), 'aria-current'), 'page');
  await page.waitForSelector(`${row(first)} [data-testid=session-meter]:not([hidden])`, { timeout: WAIT });
  await screenshot(page, 'conversation-list');

  // Rename inline.
  await page.click(`${row(first)} [data-testid=rename-session]`);
  await page.fill('[data-testid=rename-input]', 'Renamed first');
  await page.press('[data-testid=rename-input]', 'Enter');
  await page.waitForSelector(`${row(first)} [data-testid=session-title] >> text=Renamed first`, { timeout: WAIT });
  const [session] = await env.srv.query(`SELECT title FROM sessions WHERE id = '${first}'`);
  assert.equal(session.title, 'Renamed first');

  // A reload shows the same list.
  await page.reload();
  await waitLive(page);
  await waitListed(page, [second, first]);
  assert.deepEqual(await titles(page), ['second conversation', 'Renamed first']);

  // Switch conversations from the list, and back with the browser's history.
  await page.click(`${row(first)} [data-testid=session-title]`);
  await page.waitForURL(`${env.srv.httpURL}/c/${first}`, { timeout: WAIT });
  await page.waitForSelector('[data-testid=message-user] >> text=first conversation', { timeout: WAIT });
  assert.equal(await page.textContent('[data-testid=conversation-title]'), 'Renamed first');
  assert.equal(await page.$$eval('[data-testid=message-user]', (els) => els.length), 1);
  await page.goBack();
  await page.waitForURL(`${env.srv.httpURL}/c/${second}`, { timeout: WAIT });
  await page.waitForSelector('[data-testid=message-user] >> text=second conversation', { timeout: WAIT });

  // Delete the open conversation: after the confirmation, a new conversation.
  page.once('dialog', (d) => {
    assert.equal(d.type(), 'confirm');
    void d.accept();
  });
  await page.click(`${row(second)} [data-testid=delete-session]`);
  await page.waitForURL(env.srv.httpURL + '/', { timeout: WAIT });
  await waitListed(page, [first]);
  assert.deepEqual(await env.srv.query(`SELECT id FROM messages WHERE session_id = '${second}'`), []);
  // Its state is not kept in the tab either (Back to its URL would show it until the
  // server said no).
  const kept = await page.evaluate((id) => Object.keys(sessionStorage).filter((k) => k.includes(id)), second);
  assert.deepEqual(kept, []);

  // Declining the confirmation deletes nothing.
  page.once('dialog', (d) => void d.dismiss());
  await page.click(`${row(first)} [data-testid=delete-session]`);
  await page.reload();
  await waitLive(page);
  await waitListed(page, [first]);
  assertNoPageErrors(page);
  await context.close();
});

test('a conversation deleted in another tab leaves this one for a new conversation', async () => {
  await clearSessions();
  const context = await env.browser.newContext();
  const a = await openApp(context, env.srv);
  const id = await send(a, 'soon gone');
  await waitRunEnded(a);
  const b = await openApp(context, env.srv);
  await waitListed(b, [id]);
  b.once('dialog', (d) => void d.accept());
  await b.click(`${row(id)} [data-testid=delete-session]`);

  await a.waitForURL(env.srv.httpURL + '/', { timeout: WAIT });
  await a.waitForSelector('[data-testid=toast] >> text=deleted', { timeout: WAIT });
  await waitLive(a);
  assert.equal(await a.$$eval('[data-testid=messages] > li', (els) => els.length), 0);
  assert.notEqual(await a.getAttribute('#app', 'data-session-id'), id);
  for (const p of [a, b]) {
    const kept = await p.evaluate((id) => Object.keys(sessionStorage).filter((k) => k.includes(id)), id);
    assert.deepEqual(kept, [], 'no tab keeps the deleted conversation');
  }
  assert.equal(await a.$$eval('[data-testid=toast]', (els) => els.filter((e) => e.textContent.includes('deleted')).length), 1, 'said once');
  assertNoPageErrors(a, b);
  await context.close();
});

test('the list pages with Load more', async () => {
  await clearSessions();
  const context = await env.browser.newContext();
  const page = await openApp(context, env.srv);
  // 22 conversations, each with a run, started over raw sockets from the page.
  const ids = await page.evaluate(async (n) => {
    const started = [];
    for (let i = 0; i < n; i++) {
      const id = await new Promise((resolve, reject) => {
        const ws = new WebSocket(`ws://${location.host}/v1/ws`);
        let id = null;
        // A new session: chatd names it in the snapshot, then the send goes to it.
        ws.onopen = () => ws.send(JSON.stringify({ type: 'hello' }));
        ws.onmessage = (e) => {
          const f = JSON.parse(e.data);
          if (f.type === 'snapshot') {
            id = f.sessionId;
            ws.send(JSON.stringify({ type: 'chat.send', requestId: 'r1', content: `conversation ${i}` }));
          } else if (f.type === 'ack') {
            ws.close();
            resolve(id);
          } else if (f.type === 'error') reject(new Error(f.message));
        };
      });
      started.push(id);
    }
    return started;
  }, 22);
  await page.reload();
  await waitLive(page);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=session-item]').length === 20, null, { timeout: WAIT });
  await page.click('[data-testid=load-more]');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=session-item]').length === 22, null, { timeout: WAIT });
  await page.waitForSelector('[data-testid=load-more]', { state: 'hidden', timeout: WAIT });
  const listed = await page.$$eval('[data-testid=session-item]', (els) => els.map((e) => e.dataset.sessionId));
  assert.deepEqual([...listed].sort(), [...ids].sort());
  assertNoPageErrors(page);
  await context.close();
});

test('opening the app, reloading it and starting a new conversation store no session until something is sent', async () => {
  const count = async () => (await env.srv.query('SELECT count(*)::int AS n FROM sessions'))[0].n;
  const before = await count();
  const context = await env.browser.newContext({ viewport: { width: 1100, height: 760 } });
  const page = await openApp(context, env.srv);
  await page.reload();
  await page.waitForSelector('[data-testid=connection][data-state=new]', { timeout: WAIT });
  await page.click('[data-testid=new-conversation]');
  await page.waitForSelector('[data-testid=connection][data-state=new]', { timeout: WAIT });
  // Wait on the server: a page that connected would have said hello by the time the
  // list (fetched at load) is shown.
  await page.waitForSelector('[data-testid=session-list]', { timeout: WAIT });
  assert.equal(await count(), before, 'no session row for a page that sent nothing');
  const id = await send(page, 'now it exists');
  await waitLive(page);
  await waitRunEnded(page);
  assert.equal(await count(), before + 1);
  assert.deepEqual(await env.srv.query(`SELECT count(*)::int AS n FROM runs WHERE session_id = '${id}'`), [{ n: 1 }]);
  assertNoPageErrors(page);
  await context.close();
});

test('the address of a conversation that does not exist says "not found" and offers a new one; no reconnects', async () => {
  await clearSessions();
  const context = await env.browser.newContext();
  const page = await newPage(context);
  const sockets = [];
  page.on('websocket', (ws) => sockets.push(ws.url()));
  const made = crypto.randomUUID(); // chatd creates no session a client names
  await page.goto(`${env.srv.httpURL}/c/${made}`);
  await page.waitForSelector('[data-testid=not-found]', { state: 'visible', timeout: WAIT });
  assert.equal(await page.textContent('[data-testid=conversation-title]'), 'Conversation not found');
  assert.equal(await page.textContent('[data-testid=connection]'), 'Not found');
  assert.equal(await page.isVisible('[data-testid=empty-state]'), false);
  assert.equal(await page.isDisabled('[data-testid=composer-input]'), true);
  assert.equal(new URL(page.url()).pathname, `/c/${made}`, 'the address stays, to show what was not found');
  await page.waitForTimeout(1500); // a reconnect loop would open more sockets meanwhile
  assert.equal(sockets.length, 1, 'one connection, refused, and no more');
  await screenshot(page, 'not-found');

  await page.click('[data-testid=not-found-new]');
  await page.waitForURL(env.srv.httpURL + '/', { timeout: WAIT });
  await waitNew(page);
  assert.equal(await page.isVisible('[data-testid=not-found]'), false);
  const id = await send(page, 'a new one instead');
  assert.notEqual(id, made);
  assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, "chatd's id");
  await waitRunEnded(page);
  await waitListed(page, [id]);
  const rows = await env.srv.query(`SELECT id::text FROM sessions WHERE id = '${made}'`);
  assert.deepEqual(rows, [], 'the made-up id was not created');
  assertNoPageErrors(page);
  await context.close();
});
