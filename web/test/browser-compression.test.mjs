// The app in Chromium against a chatd with CHATD_COMPRESSION=on: Chromium offers
// permessage-deflate, chatd negotiates it (without context takeover), and the app reads
// compressed frames (a snapshot of a long answer is past the 512-byte threshold) and
// plain ones (each token's delta is under it) alike.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { assertMatchesDatabase, assertNoPageErrors, newPage, send, setup, shown, waitRunEnded, WAIT } from './browser.mjs';

let env;
before(async () => {
  env = await setup({ CHATD_COMPRESSION: 'on', CHATD_DEMO_WORDS: '300', CHATD_DEMO_DELAY: '5ms' });
});
after(() => env?.teardown());

// recordExtensions makes every WebSocket the page opens record the extensions it
// negotiated.
async function recordExtensions(context) {
  await context.addInitScript(() => {
    const Native = window.WebSocket;
    window.negotiated = [];
    window.WebSocket = class extends Native {
      constructor(...args) {
        super(...args);
        this.addEventListener('open', () => window.negotiated.push(this.extensions));
      }
    };
  });
}

test('the app negotiates permessage-deflate and reads compressed frames', async () => {
  const context = await env.browser.newContext();
  await recordExtensions(context);
  const page = await newPage(context);
  await page.goto(env.srv.httpURL + '/');
  await page.waitForSelector('[data-testid=connection][data-state=new]', { timeout: WAIT });
  const sessionId = await send(page, 'a long answer, compressed');
  await waitRunEnded(page);
  const [live] = await shown(page);
  assert.ok(live.text.length > 1000, `a long answer: ${live.text.length} characters`);
  await assertMatchesDatabase(page, env.srv, sessionId);

  // A reload: the whole answer comes back in the snapshot, one compressed frame.
  await page.reload();
  await page.waitForSelector('[data-testid=connection][data-state=live]', { timeout: WAIT });
  await page.waitForFunction((n) => {
    const b = document.querySelector('[data-testid=message-assistant] [data-testid=bubble]');
    return b !== null && b.textContent.replace(/\s+/g, ' ').trim().length >= n;
  }, live.text.length, { timeout: WAIT });
  const [back] = await shown(page);
  assert.equal(back.text, live.text, 'the snapshot carries the same text');
  await assertMatchesDatabase(page, env.srv, sessionId);

  const negotiated = await page.evaluate(() => window.negotiated);
  assert.ok(negotiated.length >= 1, 'the page connected');
  for (const ext of negotiated) {
    assert.match(ext, /^permessage-deflate/, `negotiated: ${JSON.stringify(ext)}`);
    assert.match(ext, /server_no_context_takeover/);
    assert.match(ext, /client_no_context_takeover/);
  }
  assertNoPageErrors(page);
  await context.close();
});
