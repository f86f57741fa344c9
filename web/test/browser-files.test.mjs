// The files panel in the PWA, in Chromium against a real chatd: the demo's approved
// demo_sandbox call appends to visits.txt in the session's sandbox; the open panel lists it
// when the call ends, with its size, and downloads it (through SessionsClient, an object
// URL and an <a download>). A conversation without a sandbox shows the empty state, a
// failing API an error line, and on a phone the panel fills the screen.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import {
  assertNoHorizontalOverflow,
  assertNoPageErrors,
  openApp,
  screenshot,
  send,
  setup,
  waitRunEnded,
  WAIT,
} from './browser.mjs';

let env;
let sessionId;
before(async () => {
  env = await setup();
});
after(() => env?.teardown());

/** listed is what the API lists for a session, fetched from the page (its origin). */
async function listed(page, id) {
  return page.evaluate(async (id) => (await fetch(`/v1/sessions/${id}/files`)).json(), id);
}

async function openFiles(page) {
  await page.click('[data-testid=files-button]');
  await page.waitForSelector('[data-testid=files-panel]', { state: 'visible', timeout: WAIT });
  assert.equal(await page.getAttribute('[data-testid=files-button]', 'aria-expanded'), 'true');
  // Focus moves into the panel.
  assert.equal(await page.evaluate(() => document.getElementById('files-panel').contains(document.activeElement)), true);
}

async function closeWithEscape(page) {
  await page.keyboard.press('Escape');
  await page.waitForSelector('[data-testid=files-panel]', { state: 'hidden', timeout: WAIT });
  assert.equal(await page.getAttribute('[data-testid=files-button]', 'aria-expanded'), 'false');
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('data-testid')), 'files-button', 'focus is back on the button');
}

test('an open files panel lists what an approved tool call wrote, and downloads it', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1100, height: 760 }, acceptDownloads: true });
  const page = await openApp(context, env.srv);
  sessionId = await send(page, 'please approve this');
  await page.waitForSelector('[data-testid=approval][data-state=awaiting_approval]', { timeout: WAIT });

  // Opened before the call runs: nothing in the workspace yet.
  await openFiles(page);
  await page.waitForSelector('[data-testid=files-empty]', { state: 'visible', timeout: WAIT });
  assert.equal(await page.locator('[data-testid=file-row]').count(), 0);

  await page.click('[data-testid=approve]');
  await page.waitForSelector('[data-testid=tool-card][data-tool-status=ok]', { timeout: WAIT });
  // The panel stayed open and lists the file once the call ended, without a click.
  const row = '[data-testid=file-row][data-path="visits.txt"]';
  await page.waitForSelector(row, { timeout: WAIT });
  assert.equal(await page.isVisible('[data-testid=files-empty]'), false);
  const { files } = await listed(page, sessionId);
  const visits = files.find((f) => f.path === 'visits.txt');
  assert.ok(visits && visits.size > 0, 'the API lists visits.txt');
  assert.equal(await page.textContent(`${row} [data-testid=file-size]`), `${visits.size} B`);
  assert.equal(await page.getAttribute(`${row} [data-testid=file-size]`, 'title'), `${visits.size} bytes`);
  assert.equal(await page.getAttribute(`${row} [data-testid=file-modified]`, 'datetime'), visits.modifiedAt);
  assert.notEqual((await page.textContent(`${row} [data-testid=file-modified]`)).trim(), '');
  await screenshot(page, 'files-panel');

  const [download] = await Promise.all([page.waitForEvent('download', { timeout: WAIT }), page.click(`${row} [data-testid=file-download]`)]);
  assert.equal(download.suggestedFilename(), 'visits.txt');
  const content = await readFile(await download.path(), 'utf8');
  assert.match(content, /^visit \d+$/m);
  assert.equal(Buffer.byteLength(content), visits.size);
  assert.equal(await page.isVisible('[data-testid=files-error]'), false);

  await closeWithEscape(page);
  await waitRunEnded(page);

  // A second call appends a line: the panel lists the new size when opened again.
  await send(page, 'approve once more');
  await page.click('[data-testid=approve]');
  await page.waitForSelector('[data-testid=tool-card][data-tool-status=ok] >> nth=1', { timeout: WAIT });
  await waitRunEnded(page);
  const after = (await listed(page, sessionId)).files.find((f) => f.path === 'visits.txt');
  assert.ok(after.size > visits.size);
  await openFiles(page);
  await page.waitForFunction(
    (size) => document.querySelector('[data-testid=file-row][data-path="visits.txt"] [data-testid=file-size]')?.textContent === `${size} B`,
    after.size,
    { timeout: WAIT },
  );
  await page.click('[data-testid=files-close]');
  await page.waitForSelector('[data-testid=files-panel]', { state: 'hidden', timeout: WAIT });
  assertNoPageErrors(page);
  await context.close();
});

test('a conversation without files shows the empty state, a new one too', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1100, height: 760 } });
  const page = await openApp(context, env.srv);
  // A new conversation: nothing sent, nothing asked.
  await openFiles(page);
  await page.waitForSelector('[data-testid=files-empty]', { state: 'visible', timeout: WAIT });
  await closeWithEscape(page);

  // One whose tools never ran: the API lists none.
  const id = await send(page, 'hello there');
  await waitRunEnded(page);
  assert.deepEqual(await listed(page, id), { files: [], truncated: false });
  await openFiles(page);
  await page.waitForSelector('[data-testid=files-empty]', { state: 'visible', timeout: WAIT });
  assert.equal(await page.locator('[data-testid=file-row]').count(), 0);
  assert.equal(await page.isVisible('[data-testid=files-error]'), false);

  // Switching to the conversation with files lists its files.
  await page.goto(`${env.srv.httpURL}/c/${sessionId}`);
  await openFiles(page);
  await page.waitForSelector('[data-testid=file-row][data-path="visits.txt"]', { timeout: WAIT });
  assertNoPageErrors(page);
  await context.close();
});

test('a failing files API shows an error line', async () => {
  // No service worker: page.route sees every request.
  const context = await env.browser.newContext({ viewport: { width: 1100, height: 760 }, serviceWorkers: 'block' });
  const page = await openApp(context, env.srv, `/c/${sessionId}`);
  await page.route('**/v1/sessions/*/files', (route) =>
    route.fulfill({ status: 503, contentType: 'application/json', body: JSON.stringify({ error: { code: 'unavailable', message: 'try again later' } }) }),
  );
  await openFiles(page);
  await page.waitForSelector('[data-testid=files-error]', { state: 'visible', timeout: WAIT });
  assert.match(await page.textContent('[data-testid=files-error]'), /try again later/);
  // The refresh button asks again; with the API back, the list comes.
  await page.unroute('**/v1/sessions/*/files');
  await page.click('[data-testid=files-refresh]');
  await page.waitForSelector('[data-testid=file-row][data-path="visits.txt"]', { timeout: WAIT });
  await page.waitForSelector('[data-testid=files-error]', { state: 'hidden', timeout: WAIT });
  assertNoPageErrors(page);
  await context.close();
});

test('on a phone the panel fills the screen and its download works', async () => {
  const context = await env.browser.newContext({ viewport: { width: 375, height: 700 }, isMobile: true, hasTouch: true, acceptDownloads: true });
  const page = await openApp(context, env.srv, `/c/${sessionId}`);
  assert.equal(await page.isVisible('[data-testid=files-button]'), true);
  await assertNoHorizontalOverflow(page);
  await page.tap('[data-testid=files-button]');
  await page.waitForSelector('[data-testid=file-row][data-path="visits.txt"]', { timeout: WAIT });
  const box = await page.locator('[data-testid=files-panel]').boundingBox();
  assert.equal(Math.round(box.x), 0);
  assert.equal(Math.round(box.width), 375);
  await assertNoHorizontalOverflow(page);
  await screenshot(page, 'files-panel-phone');
  const [download] = await Promise.all([
    page.waitForEvent('download', { timeout: WAIT }),
    page.tap('[data-testid=file-row][data-path="visits.txt"] [data-testid=file-download]'),
  ]);
  assert.match(await readFile(await download.path(), 'utf8'), /^visit \d+$/m);
  await page.tap('[data-testid=files-close]');
  await page.waitForSelector('[data-testid=files-panel]', { state: 'hidden', timeout: WAIT });
  assertNoPageErrors(page);
  await context.close();
});
