// A long run's progress in the PWA, in Chromium against a real chatd: the demo's "steps"
// reports "demo steps: n of 7"; it shows above the composer in every tab, in the
// conversation list, and again after chatd is killed (-9) and restarted mid-run.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { assertNoPageErrors, openApp, screenshot, send, setup, waitFor, waitLive, waitRunEnded, WAIT } from './browser.mjs';

let env;
before(async () => {
  // 300 words at 20 ms: six seconds, 7 steps of almost a second each.
  env = await setup({ CHATD_DEMO_WORDS: '300', CHATD_DEMO_DELAY: '20ms' });
});
after(() => env?.teardown());

/** progressOf reads the step a page's progress element shows, or -1 when none. */
async function progressOf(page, testid) {
  return page.$eval(`[data-testid=${testid}]`, (el) => {
    const bar = el.querySelector('progress');
    return bar ? Number(bar.value) : -1;
  }).catch(() => -1);
}

async function waitProgress(page, testid, atLeast) {
  await page.waitForFunction(
    ([testid, atLeast]) => {
      const el = document.querySelector(`[data-testid=${testid}]`);
      if (!el) return false;
      const bar = el.querySelector('progress');
      // The run's panel says it whole, the list's row in short (the whole in its title).
      const text = testid === 'run-progress' ? el.textContent.trim() : el.getAttribute('title');
      const short = testid === 'session-progress' ? /^\d\/7$/.test(el.textContent.trim()) : true;
      return !!bar && Number(bar.value) >= atLeast && /^demo steps: \d of 7$/.test(text) && short;
    },
    [testid, atLeast],
    { timeout: WAIT },
  );
}

test('progress shows in every tab and the list, and survives a crash of chatd', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1100, height: 760 } });
  const a = await openApp(context, env.srv);
  const sessionId = await send(a, 'show me your steps');
  await waitProgress(a, 'run-progress', 1);
  const b = await openApp(context, env.srv, `/c/${sessionId}`);
  await waitProgress(b, 'run-progress', 1); // from its snapshot, then live
  await waitProgress(a, 'session-progress', 1); // this tab's row in the list: live
  await screenshot(a, 'progress');

  // Wait for a report to be stored (the first at once, then at most every 2 s), then crash.
  let stored;
  await waitFor('a stored report', async () => {
    [stored] = await env.srv.query(`SELECT progress_step, progress_of, progress_label FROM runs WHERE session_id = '${sessionId}'`);
    return stored.progress_step >= 1;
  });
  assert.equal(Number(stored.progress_of), 7);
  assert.equal(stored.progress_label, 'demo steps');
  // A page on another conversation lists it with the stored progress (GET /v1/sessions).
  const c = await openApp(context, env.srv);
  await waitProgress(c, 'session-progress', 1);
  await c.close();
  await env.srv.kill();
  await env.srv.restart();

  // The tabs reconnect by themselves; the continued run shows its progress again.
  for (const page of [a, b]) {
    await waitLive(page);
    await waitProgress(page, 'run-progress', Number(stored.progress_step));
  }
  for (const page of [a, b]) await waitRunEnded(page, 3 * WAIT);
  assert.equal(await progressOf(a, 'run-progress'), -1, 'no progress without an active run');
  const [run] = await env.srv.query(`SELECT status, recoveries, progress_step, progress_of FROM runs WHERE session_id = '${sessionId}'`);
  assert.equal(run.status, 'done');
  assert.equal(Number(run.recoveries), 1);
  assert.equal(Number(run.progress_step), 7);
  assert.equal(Number(run.progress_of), 7);
  assertNoPageErrors(a, b);
  await context.close();
});
