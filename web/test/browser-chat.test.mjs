// The chat in Chromium against a real chatd with the demo agent: a reply streams into
// one bubble, a reload mid-reply continues it to the exact text, tool calls show as
// cards, and the model's text is sanitized Markdown.
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
  // 250 words at 15 ms: nearly four seconds of streaming, time to watch and reload even on
  // a busy machine.
  env = await setup({ CHATD_DEMO_WORDS: '250', CHATD_DEMO_DELAY: '15ms' });
});
after(() => env?.teardown());

test('a reply streams into one bubble and ends as stored', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await openApp(context, env.srv);
  assert.equal(await page.isVisible('[data-testid=empty-state]'), true);
  assert.equal(await page.getAttribute('#app', 'data-session-id'), null, 'no id before chatd names one');

  const sessionId = await send(page, 'hello there');
  assert.match(sessionId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, "chatd's id: a v4 UUID");
  await page.waitForSelector('[data-testid=message-user] >> text=hello there', { timeout: WAIT });
  await waitStreaming(page, 20);
  // Mark the bubble's node: it must be the very node that ends up holding the reply.
  await page.$eval('[data-testid=message-assistant]', (el) => {
    el.dataset.watched = 'yes';
  });
  const early = (await shown(page))[0].text;
  await page.waitForSelector('[data-testid=stop]', { state: 'visible' });
  await screenshot(page, 'streaming');
  await waitStreaming(page, early.length + 40);
  assert.equal((await shown(page)).length, 1, 'one bubble while streaming');

  await waitRunEnded(page);
  const [reply] = await shown(page);
  assert.equal(reply.status, 'complete');
  assert.ok(reply.text.startsWith(early), 'the text grew in place');
  assert.ok(reply.text.startsWith('Demo reply to "hello there".'), reply.text);
  assert.equal(await page.getAttribute('[data-testid=message-assistant]', 'data-watched'), 'yes', 'the same node, re-rendered in place');
  await assertMatchesDatabase(page, env.srv, sessionId);
  assert.equal(await page.textContent('[data-testid=conversation-title]'), 'hello there');
  await page.waitForSelector('[data-testid=context-meter]:not([hidden])', { timeout: WAIT });
  assertNoPageErrors(page);
  await context.close();
});

test('a reload mid-reply continues the reply with the exact text', async () => {
  const context = await env.browser.newContext();
  const page = await openApp(context, env.srv);
  const sessionId = await send(page, 'reload me');
  await waitStreaming(page, 30);
  const before = (await shown(page))[0];

  await page.reload();
  await page.waitForSelector('[data-testid=connection][data-state=live]', { timeout: WAIT });
  assert.equal(new URL(page.url()).pathname, `/c/${sessionId}`, 'the URL reopens the conversation');
  // Caught up: the same message, at least as long as before, still streaming or done.
  await page.waitForFunction(
    ({ id, n }) => {
      const el = document.querySelector(`[data-message-id="${id}"] [data-testid=bubble]`);
      return el !== null && el.textContent.length >= n;
    },
    { id: before.id, n: before.text.length },
    { timeout: WAIT },
  );
  await waitRunEnded(page);
  const after = await shown(page);
  assert.equal(after.length, 1, 'no duplicate bubble');
  assert.equal(after[0].id, before.id);
  assert.ok(after[0].text.startsWith(before.text), 'what was shown before the reload is kept, in place');
  await assertMatchesDatabase(page, env.srv, sessionId);
  assertNoPageErrors(page);
  await context.close();
});

test('a tool call shows as a card between the two segments', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await openApp(context, env.srv);
  const sessionId = await send(page, 'use a tool please');
  const card = await page.waitForSelector('[data-testid=tool-card]', { timeout: WAIT });
  assert.equal(await card.$eval('[data-testid=tool-name]', (e) => e.textContent), 'current_time');
  await page.waitForSelector('[data-testid=tool-card][data-tool-status=ok]', { timeout: WAIT });
  await waitStreaming(page, 0);
  await screenshot(page, 'tool-card');
  await waitRunEnded(page);

  assert.deepEqual(
    await page.$$eval('[data-testid=messages] > li', (els) => els.map((e) => e.getAttribute('data-testid'))),
    ['message-user', 'message-assistant', 'message-tool', 'message-assistant'],
  );
  assert.equal(await card.$eval('[data-testid=tool-input]', (e) => e.textContent), '{}');
  const output = await card.$eval('[data-testid=tool-output]', (e) => e.textContent);
  const [row] = await env.srv.query(`SELECT tool_output FROM messages WHERE session_id = '${sessionId}' AND role = 'tool'`);
  assert.equal(output, row.tool_output);
  const [, second] = await shown(page);
  assert.ok(second.text.startsWith('(current_time said:'), second.text);
  await assertMatchesDatabase(page, env.srv, sessionId);
  assertNoPageErrors(page);
  await context.close();
});

test("the model's text is rendered as Markdown and sanitized", async () => {
  const context = await env.browser.newContext();
  const page = await openApp(context, env.srv);
  page.on('dialog', (d) => d.dismiss()); // an alert would be a script that ran
  // The demo quotes the message's first words in its reply, HTML and all.
  await send(page, '**bold** `code` <img src=x onerror="window.__xss=1">');
  await waitRunEnded(page);
  const bubble = '[data-testid=message-assistant] [data-testid=bubble]';
  assert.equal(await page.textContent(`${bubble} strong`), 'bold');
  assert.equal(await page.textContent(`${bubble} code`), 'code');
  assert.equal(await page.$$eval(`${bubble} [onerror]`, (els) => els.length), 0, 'no event handler survives');
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  // The user's own message is shown as typed, not rendered.
  assert.equal(
    await page.textContent('[data-testid=message-user] [data-testid=bubble]'),
    '**bold** `code` <img src=x onerror="window.__xss=1">',
  );
  assertNoPageErrors(page);
  await context.close();
});

test('Shift+Enter is a new line, Enter sends', async () => {
  const context = await env.browser.newContext();
  const page = await openApp(context, env.srv);
  const input = '[data-testid=composer-input]';
  await page.click(input);
  await page.keyboard.type('first line');
  await page.keyboard.press('Shift+Enter');
  await page.keyboard.type('second line');
  assert.equal(await page.inputValue(input), 'first line\nsecond line');
  await page.keyboard.press('Enter');
  await page.waitForSelector('[data-testid=message-user]', { timeout: WAIT });
  assert.equal(await page.inputValue(input), '');
  assert.equal(await page.textContent('[data-testid=message-user] [data-testid=bubble]'), 'first line\nsecond line');
  await waitRunEnded(page);
  assertNoPageErrors(page);
  await context.close();
});

test('a message sent while a reply streams is queued, with a cancel, and starts when the reply ends', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await openApp(context, env.srv);
  // A reply that waits for an approval holds its run open however slow the machine: a
  // reply left to stream could end before the cancel below, and start "first in line".
  const sessionId = await send(page, 'please approve this');
  await page.waitForSelector('[data-testid=approval][data-state=awaiting_approval]', { timeout: WAIT });
  for (const text of ['first in line', 'second in line']) {
    await page.fill('[data-testid=composer-input]', text);
    await page.press('[data-testid=composer-input]', 'Enter');
    await page.waitForSelector(`[data-testid=message-queued] >> text=${text}`, { timeout: WAIT });
  }
  await page.click('[data-testid=message-queued]:has-text("first in line") [data-testid=queued-cancel]');
  await page.waitForSelector('[data-testid=message-queued] >> text=first in line', { state: 'detached', timeout: WAIT });
  assert.equal(await page.$$eval('[data-testid=message-queued]', (els) => els.length), 1);
  await page.click('[data-testid=stop]');
  await page.waitForSelector('[data-testid=message-user] >> text=second in line', { timeout: WAIT });
  await page.waitForSelector('[data-testid=message-queued]', { state: 'detached', timeout: WAIT });
  await waitRunEnded(page);
  const users = await page.$$eval('[data-testid=message-user]', (els) => els.map((el) => el.textContent));
  assert.equal(users.length, 2);
  assert.ok(!users.some((u) => u.includes('first in line')), 'the cancelled message never ran');
  await assertMatchesDatabase(page, env.srv, sessionId);
  assertNoPageErrors(page);
  await context.close();
});

test('a queued message sent now steers the reply: the assistant reads it at its next step, in the same run', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await openApp(context, env.srv);
  // The demo's tool call waits for an approval: the step boundary (the call's result) comes
  // after the steer however slow the machine is. A call that needs none could come and go,
  // and the run end, before the steer reached chatd.
  const sessionId = await send(page, 'please approve this');
  await page.waitForSelector('[data-testid=approval][data-state=awaiting_approval]', { timeout: WAIT });
  await page.fill('[data-testid=composer-input]', 'and what about tomorrow');
  await page.press('[data-testid=composer-input]', 'Enter');
  await page.waitForSelector('[data-testid=message-queued][data-status=queued] >> text=and what about tomorrow', { timeout: WAIT });
  await page.click('[data-testid=message-queued] [data-testid=queued-steer]');
  await page.waitForSelector('[data-testid=message-queued][data-status=steering]', { timeout: WAIT });
  await page.click('[data-testid=approve]');
  // Given to the reply as a user turn of the same run, after the tool's result; the
  // assistant answers it there.
  await page.waitForSelector('[data-testid=message-user] >> text=and what about tomorrow', { timeout: WAIT });
  await page.waitForSelector('[data-testid=message-queued]', { state: 'detached', timeout: WAIT });
  await waitRunEnded(page);
  assert.deepEqual(
    await page.$$eval('[data-testid=messages] > li', (els) => els.map((e) => e.getAttribute('data-testid'))),
    ['message-user', 'message-assistant', 'message-tool', 'message-user', 'message-assistant'],
  );
  const last = (await shown(page)).at(-1);
  assert.ok(last.text.startsWith('Demo reply to "and what about tomorrow".'), last.text);
  const runs = await env.srv.query(`SELECT id::text AS id FROM runs WHERE session_id = '${sessionId}'`);
  assert.equal(runs.length, 1, 'steering starts no run');
  const users = await env.srv.query(`SELECT run_id::text AS run_id FROM messages WHERE session_id = '${sessionId}' AND role = 'user'`);
  assert.deepEqual(users.map((u) => u.run_id), [runs[0].id, runs[0].id]);
  await assertMatchesDatabase(page, env.srv, sessionId);
  assertNoPageErrors(page);
  await context.close();
});
