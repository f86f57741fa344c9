// History paging in Chromium against a real chatd: a conversation longer than a snapshot
// (200 messages) shows its newest messages, and scrolling to the top loads the older
// ones above them without moving what the reader was looking at.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { assertNoPageErrors, openApp, setup, waitLive, WAIT } from './browser.mjs';

let env;
before(async () => {
  // 105 sends in a row on one socket: more than the default command rate allows.
  env = await setup({ CHATD_DEMO_WORDS: '3', CHATD_DEMO_DELAY: '0s', CHATD_COMMAND_RATE: 'off' });
});
after(() => env?.teardown());

test('scrolling to the top loads older messages in place', { timeout: 120000 }, async () => {
  const context = await env.browser.newContext({ viewport: { width: 1100, height: 700 } });
  const page = await openApp(context, env.srv);
  // 105 runs, one after the other, over a raw socket: 210 messages.
  const id = await page.evaluate(async (n) => {
    const ws = new WebSocket(`ws://${location.host}/v1/ws`);
    const frames = [];
    let wake = () => {};
    ws.onmessage = (e) => {
      frames.push(JSON.parse(e.data));
      wake();
    };
    const next = async (pred) => {
      for (;;) {
        const i = frames.findIndex(pred);
        if (i >= 0) return frames.splice(0, i + 1)[i];
        await new Promise((r) => (wake = r));
      }
    };
    await new Promise((r) => (ws.onopen = r));
    ws.send(JSON.stringify({ type: 'hello' })); // a new session: chatd names it
    const { sessionId: id } = await next((f) => f.type === 'snapshot');
    for (let i = 0; i < n; i++) {
      ws.send(JSON.stringify({ type: 'chat.send', requestId: `r${i}`, content: `message ${i}` }));
      const end = await next((f) => ['chat.done', 'chat.error', 'chat.cancelled'].includes(f.type) && f.requestId === `r${i}`);
      if (end.type !== 'chat.done') throw new Error(`run ${i} ended ${end.type}`);
    }
    ws.close();
    return id;
  }, 105);

  await page.goto(`${env.srv.httpURL}/c/${id}`);
  await waitLive(page);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=messages] > li').length === 200, null, { timeout: WAIT });
  await page.waitForSelector('[data-testid=load-older]', { state: 'visible', timeout: WAIT });
  const users = () => page.$$eval('[data-testid=message-user]', (els) => els.map((e) => e.textContent));
  assert.equal((await users())[0], 'message 5');
  const anchor = await page.getAttribute('[data-testid=messages] > li', 'data-message-id');

  // The reader scrolls up to the oldest message shown.
  await page.$eval('[data-testid=transcript]', (el) => el.scrollTo(0, 0));
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=messages] > li').length === 210, null, { timeout: WAIT });
  await page.waitForSelector('[data-testid=load-older]', { state: 'hidden', timeout: WAIT });
  const all = await users();
  assert.equal(all.length, 105);
  assert.deepEqual(all, Array.from({ length: 105 }, (_, i) => `message ${i}`));

  // What was at the top is still where it was: the older messages went above it.
  const offset = await page.evaluate((anchor) => {
    const t = document.querySelector('[data-testid=transcript]').getBoundingClientRect();
    const a = document.querySelector(`[data-message-id="${anchor}"]`).getBoundingClientRect();
    return a.top - t.top;
  }, anchor);
  assert.ok(offset >= 0 && offset < 120, `the oldest message shown before is ${offset}px from the top`);

  const stored = await env.srv.query(`SELECT count(*)::int AS n FROM messages WHERE session_id = '${id}'`);
  assert.deepEqual(stored, [{ n: 210 }]);
  assertNoPageErrors(page);
  await context.close();
});
