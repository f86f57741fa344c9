// The React app of docs/ai-sdk.md (useChat, React 19 in StrictMode, the pinned ai and
// @ai-sdk/react) in Chromium, on another origin than chatd, through a proxy that can cut
// the network: with the stock DefaultChatTransport and with @chatd/ai-sdk's
// ChatdChatTransport. Every test ends with the page equal, word for word, to the stored
// transcript, and checks the page never showed `ready` with a cut-off answer.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launchChromium, newPage, WAIT } from './browser.mjs';
import { startChatd } from './chatd.mjs';
import {
  assertNeverReadyTruncated,
  bundle,
  cutProxy,
  lastAnswer,
  runStatus,
  serveStatic,
  shownTexts,
  stored,
  textsOf,
  waitAnswerLonger,
  waitEqualsStored,
  waitStatus,
} from './react-util.mjs';

const here = dirname(fileURLToPath(import.meta.url));
let srv, browser, app, site, proxy;
const timings = [];

before(async () => {
  // 250 words at 15 ms: about four seconds of streaming, time to break it mid-reply.
  srv = await startChatd({
    env: { CHATD_DEMO_WORDS: '250', CHATD_DEMO_DELAY: '15ms', CHATD_ALLOWED_ORIGINS: '127.0.0.1:*' },
  });
  proxy = await cutProxy(srv.addr);
  app = await bundle(join(here, 'react', 'chat-app.jsx'));
  site = await serveStatic(app.dir);
  browser = await launchChromium();
});
after(async () => {
  for (const t of timings) console.log(`# recovery: ${t}`);
  await browser?.close().catch(() => {});
  await site?.close();
  await app?.close();
  await proxy?.close();
  await srv?.stop();
});

/** open opens the app on chat id with a transport ('default' or 'chatd'). */
async function open(context, id, transport) {
  const page = await newPage(context);
  const api = `${proxy.url}/v1/aisdk/chat`;
  await page.goto(`${site.url}/?api=${encodeURIComponent(api)}&id=${encodeURIComponent(id)}&transport=${transport}`);
  await page.waitForSelector('[data-testid=status]', { timeout: WAIT });
  return page;
}

async function send(page, text) {
  await page.fill('[data-testid=input]', text);
  await page.press('[data-testid=input]', 'Enter');
}

/** The answer's run id once the page shows it streaming with more than n characters. */
async function streamingAnswer(page, n = 40) {
  await waitAnswerLonger(page, n);
  return page.$$eval('[data-testid=message][data-role=assistant]', (els) => els[els.length - 1].dataset.id);
}

async function done(page, id) {
  await waitEqualsStored(page, srv, id);
  const early = await assertNeverReadyTruncated(page, srv, id);
  assert.deepEqual(page.errors, [], 'no uncaught errors');
  return early;
}

test('DefaultChatTransport (the docs example): a reply streams and ends as stored; a reload mid-reply resumes it', async () => {
  const context = await browser.newContext();
  const id = randomUUID();
  const page = await open(context, id, 'default');
  await send(page, 'hello there');
  await streamingAnswer(page);
  await waitStatus(page, 'streaming');
  await done(page, id);

  await send(page, 'and reload me');
  const runId = await streamingAnswer(page, (await lastAnswer(page)).length + 40);
  const before = await lastAnswer(page);
  const t0 = Date.now();
  await page.reload();
  const t1 = await waitAnswerLonger(page, before.length);
  timings.push(`DefaultChatTransport, reload mid-reply: ${t1 - t0} ms`);
  const early = await done(page, id);
  assert.equal(await runStatus(srv, runId), 'done');
  if (early) console.log(`# DefaultChatTransport reload: ${early} render(s) of the loaded, partial answer as ready before the resume`);
  await context.close();
});

for (const [name, fault] of [
  ['a reload mid-reply', async (page) => page.reload()],
  ['a network cut mid-reply, restored 1 s later', async () => {
    proxy.down();
    await new Promise((r) => setTimeout(r, 1000));
    proxy.up();
    return Date.now();
  }],
  ['SIGTERM and restart of chatd mid-reply', async () => {
    await srv.terminate();
    await srv.start(srv.addr);
  }],
  ['kill -9 and restart of chatd mid-reply', async () => {
    await srv.kill();
    await srv.start(srv.addr);
  }],
]) {
  test(`ChatdChatTransport: ${name} recovers${name.includes('reload') ? '' : ' without a reload'} and ends as stored`, async () => {
    const context = await browser.newContext();
    const id = randomUUID();
    const page = await open(context, id, 'chatd');
    await send(page, `break me: ${name}`);
    const runId = await streamingAnswer(page, 60);
    const before = await lastAnswer(page);
    await page.evaluate(() => { window.__sameDocument = true; });
    const t0 = Date.now();
    const restored = await fault(page);
    const t1 = await waitAnswerLonger(page, before.length, 3 * WAIT);
    timings.push(
      `ChatdChatTransport, ${name}: ${t1 - t0} ms from the fault to the resumed text` +
        (restored ? ` (${t1 - restored} ms from the restore)` : ''),
    );
    if (!name.includes('reload')) assert.equal(await page.evaluate(() => window.__sameDocument), true, 'recovered without a reload');
    const early = await done(page, id);
    if (early) console.log(`# ${name}: ${early} render(s) of the loaded, partial answer as ready before the resume`);
    assert.equal(await runStatus(srv, runId), 'done');
    // The continued answer is one text part, as an uninterrupted run's.
    const [, answer] = await stored(srv, id);
    assert.equal(answer.parts.filter((p) => p.type === 'text').length, 1, JSON.stringify(answer.parts.map((p) => p.type)));
    await context.close();
  });
}
