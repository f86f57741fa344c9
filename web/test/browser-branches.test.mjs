// Branches in Chromium against a real chatd with the demo agent: editing an earlier
// question answers the new version under it and keeps the old one an arrow away,
// regenerating an earlier answer does the same for the answer, and the arrows select a
// branch for every tab of the conversation.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { assertNoPageErrors, openApp, screenshot, send, setup, waitFor, waitRunEnded, WAIT } from './browser.mjs';

let env;
before(async () => {
  // Short replies, a little slow: a run takes about half a second, time enough to see
  // one stream and to find its buttons disabled.
  env = await setup({ CHATD_DEMO_WORDS: '40', CHATD_DEMO_DELAY: '10ms' });
});
after(() => env?.teardown());

/**
 * transcript is what the page shows, message by message: its id, kind (the data-testid:
 * message-user, message-assistant, ...), status, text (whitespace collapsed) and "2/3"
 * when it has alternatives (null when not).
 */
async function transcript(page) {
  return page.$$eval('[data-testid=messages] > li', (els) =>
    els.map((el) => ({
      id: el.getAttribute('data-message-id'),
      kind: el.getAttribute('data-testid'),
      status: el.getAttribute('data-status'),
      text: (el.querySelector('[data-testid=bubble]')?.textContent ?? '').replace(/\s+/g, ' ').trim(),
      branch: el.querySelector('[data-testid=branch-position]')?.textContent ?? null,
    })),
  );
}

/** waitTranscript waits until pred holds of the page's transcript, and returns it. */
async function waitTranscript(page, what, pred) {
  let t;
  try {
    await waitFor(what, async () => pred((t = await transcript(page))));
  } catch (err) {
    err.message += `; the page shows ${JSON.stringify(t, null, 1)}`;
    throw err;
  }
  return t;
}

const kinds = (t) => t.map((m) => m.kind);
const ids = (t) => t.map((m) => m.id);
const at = (id, testid) => `[data-message-id="${id}"] [data-testid=${testid}]`;

/** A conversation of two questions, each answered. */
async function twoQuestions(page, a, b) {
  const sessionId = await send(page, a);
  await waitRunEnded(page);
  await send(page, b);
  await waitRunEnded(page);
  const t = await transcript(page);
  assert.deepEqual(kinds(t), ['message-user', 'message-assistant', 'message-user', 'message-assistant']);
  assert.deepEqual(t.map((m) => m.branch), [null, null, null, null], 'no alternatives yet');
  return { sessionId, t };
}

async function edit(page, id, content) {
  await page.click(at(id, 'edit-message'));
  const input = at(id, 'edit-input');
  await page.waitForSelector(input, { timeout: WAIT });
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('data-testid')), 'edit-input', 'the editor has the focus');
  await page.fill(input, content);
  await page.click(at(id, 'edit-save'));
}

test('editing an earlier question answers the new version under it, "< 2/2 >", and the arrows go back', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await openApp(context, env.srv);
  const { sessionId, t: before } = await twoQuestions(page, 'first question', 'second question');
  const [q1] = before;

  // Every question has an edit button; Cancel (and Escape) leave it as it was.
  assert.equal(await page.locator('[data-testid=message-user] [data-testid=edit-message]').count(), 2);
  assert.equal(await page.getAttribute(at(q1.id, 'edit-message'), 'aria-label'), 'Edit this message');
  await page.click(at(q1.id, 'edit-message'));
  await page.fill(at(q1.id, 'edit-input'), 'never sent');
  await page.click(at(q1.id, 'edit-cancel'));
  await page.waitForSelector(at(q1.id, 'edit-input'), { state: 'detached', timeout: WAIT });
  assert.deepEqual(await transcript(page), before);

  await edit(page, q1.id, 'first question, edited');
  // The path is now the new version and its answer; the second question is on the old branch.
  const after = await waitTranscript(page, 'the edited question answered', (t) =>
    t.length === 2 && t[0].text === 'first question, edited' && t[1].status === 'complete');
  await waitRunEnded(page);
  assert.notEqual(after[0].id, q1.id, 'a new message, beside the old one');
  assert.equal(after[0].branch, '2/2');
  assert.equal(after[1].branch, null);
  assert.ok(after[1].text.startsWith('Demo reply to "first question, edited".'), after[1].text);
  assert.equal(await page.getAttribute(`[data-message-id="${after[0].id}"] [data-testid=branch]`, 'aria-label'), 'Version 2 of 2');
  assert.equal(await page.isDisabled(at(after[0].id, 'branch-next')), true, 'the last version has no next');
  await screenshot(page, 'branch-edited');

  // The previous version, with everything that followed it.
  await page.click(at(after[0].id, 'branch-prev'));
  const back = await waitTranscript(page, 'the first version again', (t) => t[0]?.id === q1.id && t.length === 4);
  assert.deepEqual(ids(back), ids(before));
  assert.equal(back[0].branch, '1/2');
  assert.equal(await page.isDisabled(at(q1.id, 'branch-prev')), true);
  // The focus followed to the version shown, on the arrow that is left.
  await page.waitForFunction((id) => document.activeElement?.closest('[data-message-id]')?.getAttribute('data-message-id') === id, q1.id, { timeout: WAIT });
  assert.equal(await page.evaluate(() => document.activeElement.getAttribute('data-testid')), 'branch-next');
  await page.click(at(q1.id, 'branch-next'));
  await waitTranscript(page, 'the edited version again', (t) => t[0]?.id === after[0].id && t.length === 2);

  // The active path is the server's: a reload shows the same.
  await page.reload();
  await page.waitForSelector('[data-testid=connection][data-state=live]', { timeout: WAIT });
  assert.deepEqual(await transcript(page), after);

  const users = await env.srv.query(`SELECT content FROM messages WHERE session_id = '${sessionId}' AND role = 'user' ORDER BY position`);
  assert.deepEqual(users.map((u) => u.content), ['first question', 'second question', 'first question, edited']);
  assertNoPageErrors(page);
  await context.close();
});

test('regenerating an earlier answer writes a new one beside it; the arrows go between the answers', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await openApp(context, env.srv);
  const { sessionId, t: before } = await twoQuestions(page, 'alpha', 'beta');
  const [q1, a1] = before;
  assert.equal(await page.locator('[data-testid=regenerate]').count(), 2, 'one under each answer');
  assert.equal(await page.getAttribute(at(a1.id, 'regenerate'), 'aria-label'), 'Regenerate this answer');

  await page.click(at(a1.id, 'regenerate'));
  // While the new answer streams, no answer can be regenerated (the server would refuse).
  await page.waitForFunction(
    () =>
      document.querySelector('[data-testid=run-status]') !== null &&
      [...document.querySelectorAll('[data-testid=regenerate]')].every((b) => b.disabled),
    null,
    { timeout: WAIT },
  );
  const streaming = await waitTranscript(page, 'the new answer', (t) => t.length === 2 && t[0].id === q1.id && t[1].id !== a1.id);
  assert.equal(streaming[1].branch, '2/2', 'the answer is the second of two');
  await waitRunEnded(page);
  const after = await transcript(page);
  assert.deepEqual(ids(after), ids(streaming));
  assert.equal(after[1].status, 'complete');
  assert.ok(after[1].text.startsWith('Demo reply to "alpha".'), after[1].text);
  assert.equal(await page.isEnabled(at(after[1].id, 'regenerate')), true);
  assert.equal(await page.getAttribute(`[data-message-id="${after[1].id}"] [data-testid=branch]`, 'aria-label'), 'Answer 2 of 2');
  await screenshot(page, 'branch-regenerated');

  // The new run answers again the old one's question.
  const runs = await env.srv.query(`SELECT id::text AS id, retry_of::text AS retry_of FROM runs WHERE session_id = '${sessionId}' ORDER BY started_at`);
  assert.equal(runs.length, 3);
  assert.deepEqual(runs.map((r) => r.retry_of), [null, null, runs[0].id]);

  // The first answer, and the question after it, are an arrow away.
  await page.click(at(after[1].id, 'branch-prev'));
  const back = await waitTranscript(page, 'the first answer again', (t) => t.length === 4);
  assert.deepEqual(ids(back), ids(before));
  assert.equal(back[1].branch, '1/2');
  await page.click(at(a1.id, 'branch-next'));
  await waitTranscript(page, 'the second answer again', (t) => t.length === 2 && t[1].id === after[1].id);
  assertNoPageErrors(page);
  await context.close();
});

test('the arrows in one tab select the branch in every tab', async () => {
  const context = await env.browser.newContext();
  const a = await openApp(context, env.srv);
  const { sessionId, t: before } = await twoQuestions(a, 'one', 'two');
  const b = await openApp(context, env.srv, `/c/${sessionId}`);
  await waitTranscript(b, 'the second tab caught up', (t) => t.length === 4);

  // An edit in tab a: tab b shows the new branch too, with its arrows.
  await edit(a, before[2].id, 'two, edited');
  const edited = await waitTranscript(b, 'the edit in the second tab', (t) =>
    t.length === 4 && t[2].text === 'two, edited' && t[3].status === 'complete');
  assert.equal(edited[2].branch, '2/2');
  await waitRunEnded(a);
  await waitRunEnded(b);
  assert.deepEqual(await transcript(a), edited);

  // Tab a goes back: tab b follows; tab b goes forward: tab a follows.
  await a.click(at(edited[2].id, 'branch-prev'));
  for (const p of [a, b]) {
    const t = await waitTranscript(p, 'the first version in both tabs', (t) => t[2]?.id === before[2].id);
    assert.deepEqual(ids(t), ids(before));
    assert.equal(t[2].branch, '1/2');
  }
  await b.click(at(before[2].id, 'branch-next'));
  for (const p of [a, b]) {
    const t = await waitTranscript(p, 'the edited version in both tabs', (t) => t[2]?.id === edited[2].id);
    assert.deepEqual(t, edited);
  }
  assertNoPageErrors(a, b);
  await context.close();
});
