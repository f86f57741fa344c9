// Two tabs on one conversation (two pages of one browser context), in Chromium against a
// real chatd: a cancel from one stops the reply in both, an approval asked in one is
// answered from the other, and a resumable run's card is offered and dismissed in both.
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
  waitRunEnded,
  waitStreaming,
  WAIT,
} from './browser.mjs';

let env;
before(async () => {
  // 400 words at 20 ms: eight seconds, time enough to cancel from the other tab.
  env = await setup({ CHATD_DEMO_WORDS: '400', CHATD_DEMO_DELAY: '20ms' });
});
after(() => env?.teardown());

test('two tabs: stop in one, both show the reply cancelled', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1100, height: 760 } });
  const a = await openApp(context, env.srv);
  const sessionId = await send(a, 'a long story');
  const b = await openApp(context, env.srv, `/c/${sessionId}`);
  await waitStreaming(b, 20);
  await waitStreaming(a, 20);

  await b.click('[data-testid=stop]');
  for (const page of [a, b]) {
    await page.waitForSelector('[data-testid=resume-card][data-run-status=cancelled]', { timeout: WAIT });
    await page.waitForSelector('[data-testid=message-assistant][data-status=cancelled] [data-testid=message-status]', { timeout: WAIT });
    assert.equal(await page.isVisible('[data-testid=stop]'), false);
    assert.equal(await page.textContent('[data-testid=message-assistant] [data-testid=message-status]'), 'Stopped');
  }
  const [run] = await env.srv.query(`SELECT status FROM runs WHERE session_id = '${sessionId}'`);
  assert.equal(run.status, 'cancelled');
  // Both show what was stored, to the character.
  await assertMatchesDatabase(a, env.srv, sessionId);
  await assertMatchesDatabase(b, env.srv, sessionId);
  await screenshot(a, 'cancelled');

  // Dismissed in one tab, the card goes away in both.
  await a.click('[data-testid=resume-dismiss]');
  for (const page of [a, b]) await page.waitForSelector('[data-testid=resume-card]', { state: 'detached', timeout: WAIT });
  assertNoPageErrors(a, b);
  await context.close();
});

test('a cancelled reply continues from where it stopped', async () => {
  const context = await env.browser.newContext();
  const a = await openApp(context, env.srv);
  const sessionId = await send(a, 'continue me');
  await waitStreaming(a, 40);
  await a.click('[data-testid=stop]');
  await a.waitForSelector('[data-testid=resume-card][data-run-status=cancelled]', { timeout: WAIT });
  const stopped = (await shown(a))[0].text;

  await a.click('[data-testid=resume-continue]');
  await a.waitForSelector('[data-testid=resume-card]', { state: 'detached', timeout: WAIT });
  await a.waitForSelector('[data-testid=run-status][data-status=running]', { timeout: WAIT });
  // The continued text streams as a new segment after the stopped one.
  await a.waitForFunction(() => document.querySelectorAll('[data-testid=message-assistant]').length === 2, null, { timeout: WAIT });
  await waitStreaming(a, 10);
  await a.click('[data-testid=stop]'); // no need to wait for 400 words
  await a.waitForSelector('[data-testid=resume-card]', { timeout: WAIT });
  const texts = (await shown(a)).map((m) => m.text);
  assert.equal(texts.length, 2);
  assert.equal(texts[0], stopped, 'the stopped text is kept as it was');
  await assertMatchesDatabase(a, env.srv, sessionId);
  assertNoPageErrors(a);
  await context.close();
});

test('two tabs: an approval asked in one is answered from the other', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1100, height: 760 } });
  const a = await openApp(context, env.srv);
  const sessionId = await send(a, 'please approve this');
  const b = await openApp(context, env.srv, `/c/${sessionId}`);
  for (const page of [a, b]) {
    await page.waitForSelector('[data-testid=approval][data-state=awaiting_approval]', { timeout: WAIT });
    assert.equal(await page.textContent('[data-testid=approval-tool]'), 'demo_sandbox');
    await page.waitForSelector('[data-testid=tool-card][data-tool-status=awaiting_approval]', { timeout: WAIT });
  }
  assert.deepEqual(JSON.parse(await a.textContent('[data-testid=approval-input]')), { reason: 'please approve this' });
  await screenshot(a, 'approval');

  await b.click('[data-testid=approve]');
  for (const page of [a, b]) {
    await page.waitForSelector('[data-testid=approval]', { state: 'detached', timeout: WAIT });
    await page.waitForSelector('[data-testid=tool-card][data-tool-status=ok]', { timeout: WAIT });
  }
  const output = await a.textContent('[data-testid=tool-output]');
  assert.match(output, /hello from your sandbox/);
  // Stop the rest of the reply; the call's result is what this test is about.
  await a.click('[data-testid=stop]');
  for (const page of [a, b]) await waitRunEnded(page);
  const [row] = await env.srv.query(
    `SELECT tool_status, tool_output FROM messages WHERE session_id = '${sessionId}' AND role = 'tool'`,
  );
  assert.equal(row.tool_status, 'ok');
  assert.equal(await b.textContent('[data-testid=tool-output]'), row.tool_output);
  await assertMatchesDatabase(b, env.srv, sessionId);
  assertNoPageErrors(a, b);
  await context.close();
});

test('a denied call shows as denied and the reply goes on', async () => {
  const context = await env.browser.newContext();
  const a = await openApp(context, env.srv);
  const sessionId = await send(a, 'approve nothing');
  await a.click('[data-testid=deny]', { timeout: WAIT });
  await a.waitForSelector('[data-testid=tool-card][data-tool-status=denied]', { timeout: WAIT });
  await a.waitForSelector('[data-testid=run-status][data-status=running]', { timeout: WAIT });
  await a.click('[data-testid=stop]');
  await waitRunEnded(a);
  await assertMatchesDatabase(a, env.srv, sessionId);
  assertNoPageErrors(a);
  await context.close();
});
