// The installable app, in Chromium against a real chatd: the service worker registers and
// caches the shell but never the API, the manifest is one Chromium accepts with icons that
// resolve, and the app works on a phone-sized screen and in dark mode.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  assertMatchesDatabase,
  assertNoHorizontalOverflow,
  assertNoPageErrors,
  newPage,
  openApp,
  screenshot,
  send,
  setup,
  waitRunEnded,
  WAIT,
} from './browser.mjs';

let env;
before(async () => {
  env = await setup({ CHATD_DEMO_WORDS: '60', CHATD_DEMO_DELAY: '10ms' });
});
after(() => env?.teardown());

/** pngSize reads a PNG's width and height from its IHDR chunk. */
function pngSize(buf) {
  assert.equal(buf.subarray(1, 4).toString('latin1'), 'PNG');
  return `${buf.readUInt32BE(16)}x${buf.readUInt32BE(20)}`;
}

test('the service worker registers and caches the shell, never the API', async () => {
  const context = await env.browser.newContext();
  const page = await openApp(context, env.srv);
  const reg = await page.evaluate(async () => {
    const r = await navigator.serviceWorker.ready;
    return { scope: r.scope, script: r.active.scriptURL };
  });
  assert.equal(reg.scope, env.srv.httpURL + '/');
  assert.equal(reg.script, env.srv.httpURL + '/sw.js');
  await page.waitForFunction(() => navigator.serviceWorker.controller !== null, null, { timeout: WAIT });

  // Use the API with the worker in control: chat (WebSocket) and the sessions list.
  await send(page, 'cache nothing of mine');
  await waitRunEnded(page);
  await page.evaluate(() => fetch('/v1/sessions').catch(() => {}));

  const caches = await page.evaluate(async () => {
    const out = {};
    for (const name of await caches.keys()) {
      const c = await caches.open(name);
      out[name] = (await c.keys()).map((r) => new URL(r.url).pathname).sort();
    }
    return out;
  });
  const names = Object.keys(caches);
  assert.equal(names.length, 1, JSON.stringify(caches));
  assert.match(names[0], /^chatd-shell-[0-9a-f]{16}$/);
  const cached = caches[names[0]];
  for (const path of ['/', '/app.js', '/app.css', '/manifest.webmanifest', '/icons/icon-192.png']) {
    assert.ok(cached.includes(path), `${path} is cached: ${cached}`);
  }
  assert.deepEqual(cached.filter((p) => !p.startsWith('/icons/') && !['/', '/app.js', '/app.css', '/manifest.webmanifest'].includes(p)), []);
  // The cache is named after the build it holds.
  const sw = await (await fetch(env.srv.httpURL + '/sw.js')).text();
  assert.ok(sw.includes(JSON.stringify(names[0].slice('chatd-shell-'.length))), 'the cache name is the build version in sw.js');
  assertNoPageErrors(page);
  await context.close();
});

test('the manifest is valid, installable, and its icons resolve', async () => {
  const res = await fetch(env.srv.httpURL + '/manifest.webmanifest');
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'application/manifest+json');
  const manifest = await res.json();
  assert.equal(manifest.name, 'chatd');
  assert.equal(manifest.short_name, 'chatd');
  assert.equal(manifest.start_url, '/');
  assert.equal(manifest.display, 'standalone');
  assert.match(manifest.theme_color, /^#[0-9a-f]{6}$/);
  assert.match(manifest.background_color, /^#[0-9a-f]{6}$/);
  const purposes = new Set();
  for (const icon of manifest.icons) {
    const r = await fetch(new URL(icon.src, env.srv.httpURL));
    assert.equal(r.status, 200, icon.src);
    assert.equal(r.headers.get('content-type'), icon.type, icon.src);
    if (icon.type === 'image/png') assert.equal(pngSize(Buffer.from(await r.arrayBuffer())), icon.sizes, icon.src);
    purposes.add(icon.purpose);
  }
  assert.ok(purposes.has('maskable'));
  assert.ok(manifest.icons.some((i) => i.sizes === '192x192') && manifest.icons.some((i) => i.sizes === '512x512'));

  // Chromium's own reading: no manifest errors, nothing keeps it from being installed.
  const context = await env.browser.newContext();
  const page = await openApp(context, env.srv);
  await page.evaluate(() => navigator.serviceWorker.ready);
  const cdp = await context.newCDPSession(page);
  const parsed = await cdp.send('Page.getAppManifest');
  assert.equal(parsed.url, env.srv.httpURL + '/manifest.webmanifest');
  assert.deepEqual(parsed.errors, []);
  const { installabilityErrors } = await cdp.send('Page.getInstallabilityErrors');
  // A test's browser context is incognito, where nothing installs; that is the browser's.
  assert.deepEqual(installabilityErrors.filter((e) => e.errorId !== 'in-incognito'), []);
  await context.close();
});

test('a phone-sized screen: the list is a drawer, sending works, nothing overflows', async () => {
  const context = await env.browser.newContext({
    viewport: { width: 390, height: 844 },
    deviceScaleFactor: 2,
    isMobile: true,
    hasTouch: true,
  });
  const page = await openApp(context, env.srv);
  assert.equal(await page.isVisible('[data-testid=sidebar]'), false, 'the list starts closed');
  assert.equal(await page.isVisible('[data-testid=menu-button]'), true);

  await page.tap('[data-testid=menu-button]');
  await page.waitForSelector('[data-testid=sidebar]', { state: 'visible', timeout: WAIT });
  assert.equal(await page.getAttribute('[data-testid=menu-button]', 'aria-expanded'), 'true');
  await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().left >= 0, null, { timeout: WAIT });
  await screenshot(page, 'phone-drawer');
  await page.tap('[data-testid=drawer-scrim]', { position: { x: 370, y: 400 } });
  await page.waitForSelector('[data-testid=sidebar]', { state: 'hidden', timeout: WAIT });

  await page.tap('[data-testid=menu-button]');
  await page.waitForSelector('[data-testid=sidebar]', { state: 'visible', timeout: WAIT });
  await page.keyboard.press('Escape');
  await page.waitForSelector('[data-testid=sidebar]', { state: 'hidden', timeout: WAIT });

  await page.fill('[data-testid=composer-input]', 'a phone asks for a tool with a rather long message');
  await page.tap('[data-testid=send]');
  await page.waitForURL(/\/c\//, { timeout: WAIT });
  const sessionId = await page.getAttribute('#app', 'data-session-id');
  await page.waitForSelector('[data-testid=tool-card]', { timeout: WAIT });
  await waitRunEnded(page);
  await assertNoHorizontalOverflow(page);
  const transcript = await page.$eval('[data-testid=transcript]', (e) => [e.scrollWidth, e.clientWidth]);
  assert.ok(transcript[0] <= transcript[1], `the transcript scrolls sideways: ${transcript}`);
  await assertMatchesDatabase(page, env.srv, sessionId);
  await screenshot(page, 'phone');

  // The drawer closes itself when a conversation is picked.
  await page.tap('[data-testid=menu-button]');
  await page.tap('[data-testid=new-conversation]');
  await page.waitForSelector('[data-testid=sidebar]', { state: 'hidden', timeout: WAIT });
  await page.waitForURL(env.srv.httpURL + '/', { timeout: WAIT });
  assertNoPageErrors(page);
  await context.close();
});

test('dark mode follows the system', async () => {
  const context = await env.browser.newContext({ colorScheme: 'dark', viewport: { width: 1100, height: 760 } });
  const page = await newPage(context);
  await page.goto(env.srv.httpURL + '/');
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(bg, 'rgb(21, 23, 28)');
  await page.waitForSelector('[data-testid=connection][data-state=new]', { timeout: WAIT });
  await send(page, 'show a tool in the dark');
  await page.waitForSelector('[data-testid=tool-card][data-tool-status=ok]', { timeout: WAIT });
  await waitRunEnded(page);
  await screenshot(page, 'dark');
  assertNoPageErrors(page);
  await context.close();

  const light = await env.browser.newContext({ colorScheme: 'light' });
  const lp = await newPage(light);
  await lp.goto(env.srv.httpURL + '/');
  assert.equal(await lp.evaluate(() => getComputedStyle(document.body).backgroundColor), 'rgb(255, 255, 255)');
  await light.close();
});
