// What the browser tests share: Debian's Chromium driven by playwright-core (never a
// downloaded browser), a real chatd with the demo agent (chatd.mjs), and helpers that
// wait on the page's state (selectors, waitForFunction), never on time.
//
// The app marks what the tests need with data-testid; the conversation's id is
// #app[data-session-id] and the URL is /c/<id> (a new conversation's: once chatd named
// it, after the first send).
import { mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { startChatd } from './chatd.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const artifacts = join(root, 'web', 'test-artifacts');

/** How long a condition may take before the test fails; a guard, not a pace. */
export const WAIT = 20_000;

export async function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHATD_CHROMIUM || '/usr/bin/chromium',
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/**
 * setup starts chatd (env added to the demo's defaults) and Chromium for one test file;
 * teardown() stops both. A page error (an uncaught exception in the app) fails the test
 * that owns the page: pages made with newPage() record them.
 */
export async function setup(env = {}) {
  const srv = await startChatd({ env });
  let browser;
  try {
    browser = await launchChromium();
  } catch (err) {
    await srv.stop();
    throw err;
  }
  await mkdir(artifacts, { recursive: true });
  return {
    srv,
    browser,
    async teardown() {
      await browser.close().catch(() => {});
      await srv.stop();
    },
  };
}

/** newPage opens a page in context and records its uncaught errors in page.errors. */
export async function newPage(context) {
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (err) => page.errors.push(err));
  return page;
}

/** openApp loads the app at path and waits until its connection is live. */
export async function openApp(context, srv, path = '/') {
  const page = await newPage(context);
  await page.goto(srv.httpURL + path);
  await waitLive(page);
  return page;
}

/** waitNew waits for a new conversation's page: ready, and not connected until a send. */
export async function waitNew(page) {
  await page.waitForSelector('[data-testid=connection][data-state=new]', { timeout: WAIT });
}

export async function waitLive(page) {
  // At / the page shows a new conversation, which connects with its first message.
  if (new URL(page.url()).pathname === '/') return waitNew(page);
  await page.waitForSelector('[data-testid=connection][data-state=live]', { timeout: WAIT });
}

/**
 * send types content into the composer and presses Enter, and waits until the server
 * started the run (the message is in the transcript; the run is active in the same
 * state, so waitRunEnded cannot mistake "not started yet" for "ended"). It returns the
 * session id.
 */
export async function send(page, content) {
  const users = await page.$$eval('[data-testid=message-user]', (els) => els.length);
  await page.fill('[data-testid=composer-input]', content);
  await page.press('[data-testid=composer-input]', 'Enter');
  await page.waitForFunction(
    (n) => document.querySelectorAll('[data-testid=message-user]').length > n,
    users,
    { timeout: WAIT },
  );
  await page.waitForURL(/\/c\/[0-9a-f-]{36}$/, { timeout: WAIT });
  const id = await page.getAttribute('#app', 'data-session-id');
  assert.equal(new URL(page.url()).pathname, `/c/${id}`);
  return id;
}

/** waitStreaming waits until the streaming assistant bubble has more than n characters. */
export async function waitStreaming(page, n = 0) {
  await page.waitForFunction(
    (n) => {
      const b = document.querySelector('[data-testid=message-assistant][data-status=streaming] [data-testid=bubble]');
      return b !== null && b.textContent.length > n;
    },
    n,
    { timeout: WAIT },
  );
}

/** waitRunEnded waits until no run is active in the page (Stop gone, Send back). */
export async function waitRunEnded(page, timeout = WAIT) {
  await page.waitForSelector('[data-testid=run-status]', { state: 'detached', timeout });
  await page.waitForSelector('[data-testid=send]', { state: 'visible', timeout });
}

/** shown is the page's assistant text messages: id, status, text (whitespace collapsed). */
export async function shown(page) {
  return page.$$eval('[data-testid=message-assistant]', (els) =>
    els.map((el) => ({
      id: el.getAttribute('data-message-id'),
      status: el.getAttribute('data-status'),
      text: el.querySelector('[data-testid=bubble]').textContent.replace(/\s+/g, ' ').trim(),
    })),
  );
}

/** stored is the database's assistant text messages of a session, as shown() has them. */
export async function stored(srv, sessionId) {
  const rows = await srv.query(
    `SELECT id::text AS id, status, content FROM messages
     WHERE session_id = '${sessionId}' AND role = 'assistant' ORDER BY position`,
  );
  return rows.map((r) => ({ id: r.id, status: r.status, text: r.content.replace(/\s+/g, ' ').trim() }));
}

/** assertMatchesDatabase: the page shows exactly the stored assistant text, every message. */
export async function assertMatchesDatabase(page, srv, sessionId) {
  const want = await stored(srv, sessionId);
  assert.ok(want.length > 0, 'the database has the reply');
  assert.deepEqual(await shown(page), want);
}

/** noHorizontalOverflow: nothing on the page is wider than the viewport. */
export async function assertNoHorizontalOverflow(page) {
  const { scroll, width } = await page.evaluate(() => ({
    scroll: Math.max(document.documentElement.scrollWidth, document.body.scrollWidth),
    width: window.innerWidth,
  }));
  assert.ok(scroll <= width, `the page is ${scroll}px wide in a ${width}px viewport`);
}

/**
 * waitFor polls an async condition outside the page (the database) until it holds; the
 * timeout is a failure guard.
 */
export async function waitFor(what, cond, timeout = WAIT) {
  const deadline = Date.now() + timeout;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function screenshot(page, name) {
  await page.screenshot({ path: join(artifacts, `${name}.png`) });
}

export function assertNoPageErrors(...pages) {
  for (const p of pages) assert.deepEqual(p.errors.map(String), [], 'uncaught errors in the page');
}
