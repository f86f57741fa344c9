// Losing the network, in Chromium against a real chatd: the indicator says so, the
// server goes on with the reply, and coming back catches the tab up to the stored text.
// With the service worker, the app itself opens offline.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  assertMatchesDatabase,
  assertNoPageErrors,
  openApp,
  screenshot,
  send,
  setup,
  shown,
  waitFor,
  waitLive,
  waitRunEnded,
  waitStreaming,
  WAIT,
} from './browser.mjs';

let env;
before(async () => {
  // 250 words at 15 ms: nearly four seconds, time to go offline mid-reply.
  env = await setup({ CHATD_DEMO_WORDS: '250', CHATD_DEMO_DELAY: '15ms' });
});
after(() => env?.teardown());

test('offline mid-reply: the indicator says so, and back online the text is caught up', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1100, height: 760 } });
  const page = await openApp(context, env.srv);
  const sessionId = await send(page, 'while I am away');
  await waitStreaming(page, 20);

  await context.setOffline(true);
  await page.waitForSelector('[data-testid=connection][data-state=offline]', { timeout: WAIT });
  assert.equal(await page.textContent('[data-testid=connection]'), 'Offline');
  await screenshot(page, 'offline');
  const seen = (await shown(page))[0];
  assert.equal(seen.status, 'streaming', 'the reply was cut mid-way');

  // The run is the server's: it ends while the tab is away, and the tab sees none of it.
  await waitFor('the run to end on the server', async () => {
    const [run] = await env.srv.query(`SELECT status FROM runs WHERE session_id = '${sessionId}'`);
    return run.status === 'done';
  });
  assert.deepEqual((await shown(page))[0], seen, 'nothing arrives while offline');

  await context.setOffline(false);
  await waitLive(page);
  await waitRunEnded(page);
  const [reply] = await shown(page);
  assert.equal(reply.id, seen.id);
  assert.ok(reply.text.startsWith(seen.text));
  await assertMatchesDatabase(page, env.srv, sessionId);
  assertNoPageErrors(page);
  await context.close();
});

test('the app opens offline from the service worker, with the conversation it had', async () => {
  const context = await env.browser.newContext();
  const page = await openApp(context, env.srv);
  await page.evaluate(() => navigator.serviceWorker.ready);
  await page.waitForFunction(() => navigator.serviceWorker.controller !== null, null, { timeout: WAIT });
  const sessionId = await send(page, 'remember me');
  await waitRunEnded(page);
  const before = await shown(page);

  await context.setOffline(true);
  await page.reload();
  await page.waitForSelector('[data-testid=connection][data-state=offline]', { timeout: WAIT });
  assert.equal(new URL(page.url()).pathname, `/c/${sessionId}`);
  assert.deepEqual(await shown(page), before, 'the tab kept the conversation it showed');

  await context.setOffline(false);
  await waitLive(page);
  await assertMatchesDatabase(page, env.srv, sessionId);
  assertNoPageErrors(page);
  await context.close();
});

test('a message sent offline waits, then is sent once when the tab is back', async () => {
  const context = await env.browser.newContext();
  const page = await openApp(context, env.srv);
  await context.setOffline(true);
  await page.waitForSelector('[data-testid=connection][data-state=offline]', { timeout: WAIT });
  await page.fill('[data-testid=composer-input]', 'sent from a tunnel');
  await page.press('[data-testid=composer-input]', 'Enter');
  await page.waitForSelector('[data-testid=message-pending] >> text=sent from a tunnel', { timeout: WAIT });
  assert.equal(await page.$$eval('[data-testid=message-user]', (els) => els.length), 0);
  // chatd has not named the conversation yet: it has no address.
  assert.equal(new URL(page.url()).pathname, '/');
  assert.equal(await page.getAttribute('#app', 'data-session-id'), null);

  await context.setOffline(false);
  await page.waitForSelector('[data-testid=message-user] >> text=sent from a tunnel', { timeout: WAIT });
  await page.waitForSelector('[data-testid=message-pending]', { state: 'detached', timeout: WAIT });
  await waitRunEnded(page);
  const sessionId = await page.getAttribute('#app', 'data-session-id');
  assert.equal(new URL(page.url()).pathname, `/c/${sessionId}`);
  await assertMatchesDatabase(page, env.srv, sessionId);
  const runs = await env.srv.query(`SELECT status FROM runs WHERE session_id = '${sessionId}'`);
  assert.deepEqual(runs, [{ status: 'done' }], 'one run');
  assertNoPageErrors(page);
  await context.close();
});
