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
  lastAnswerId,
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
async function streamingAnswer(page, n = 40, notId = null) {
  await waitAnswerLonger(page, n, WAIT, notId);
  return page.$$eval('[data-testid=message][data-role=assistant]', (els) => els[els.length - 1].dataset.id);
}

async function done(page, id, opts = {}) {
  await waitEqualsStored(page, srv, id);
  const early = await assertNeverReadyTruncated(page, srv, id, opts);
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

  const prev = await lastAnswerId(page);
  await send(page, 'and reload me');
  const runId = await streamingAnswer(page, 40, prev);
  const before = await lastAnswer(page);
  const t0 = Date.now();
  await page.reload();
  const t1 = await waitAnswerLonger(page, before.length);
  timings.push(`DefaultChatTransport, reload mid-reply: ${t1 - t0} ms`);
  const early = await done(page, id);
  assert.equal(await runStatus(srv, runId), 'done');
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
        (typeof restored === 'number' ? ` (${t1 - restored} ms from the restore)` : ''),
    );
    if (!name.includes('reload')) assert.equal(await page.evaluate(() => window.__sameDocument), true, 'recovered without a reload');
    // loadChatdChat leaves the answer a run still writes out of the loaded transcript:
    // not even a reload shows it cut off and ready.
    const early = await done(page, id, { strict: true });
    assert.equal(await runStatus(srv, runId), 'done');
    // The continued answer is one text part, as an uninterrupted run's.
    const [, answer] = await stored(srv, id);
    assert.equal(answer.parts.filter((p) => p.type === 'text').length, 1, JSON.stringify(answer.parts.map((p) => p.type)));
    await context.close();
  });
}

/** branchesOf: each message's branch point, on the page and in a transcript. */
async function shownBranches(page) {
  return page.$$eval('[data-testid=message]', (els) =>
    els.map((el) => {
      const b = el.querySelector('[data-testid=branch]');
      return b ? { index: Number(b.dataset.index), count: Number(b.dataset.count) } : null;
    }),
  );
}
/**
 * sameAsWebSocketTab waits until chatd's own app (the WebSocket client, a tab on the same
 * session) shows the same messages with the same "n/m" branch positions as the page.
 */
async function sameAsWebSocketTab(ws, page) {
  const ours = (await shownBranches(page)).map((b) => (b ? `${b.index + 1}/${b.count}` : null));
  const theirs = () =>
    ws.$$eval('[data-testid=messages] > li', (els) =>
      els
        .filter((el) => ['message-user', 'message-assistant'].includes(el.getAttribute('data-testid')))
        .map((el) => el.querySelector('[data-testid=branch-position]')?.textContent ?? null),
    );
  let got;
  for (const end = Date.now() + WAIT; Date.now() < end; await new Promise((r) => setTimeout(r, 100))) {
    got = await theirs();
    if (JSON.stringify(got) === JSON.stringify(ours)) return;
  }
  assert.deepEqual(got, ours, "the WebSocket tab's branch positions are the page's");
}

function storedBranches(messages) {
  return messages.map((m) => {
    const b = m.metadata?.chatd?.branch;
    return b ? { index: b.index, count: b.count } : null;
  });
}

test('ChatdChatTransport, two tabs on one chat: a run started in one streams live in the other; after a reload the views are equal', async () => {
  const context = await browser.newContext();
  const id = randomUUID();
  const a = await open(context, id, 'chatd');
  await send(a, 'first, to create the chat');
  await waitEqualsStored(a, srv, id);
  const b = await open(context, id, 'chatd');
  await waitEqualsStored(b, srv, id);

  const prev = await lastAnswerId(a);
  await send(a, 'follow me from the other tab');
  await streamingAnswer(a, 200, prev);
  // b never sent anything: it follows the run live, while it streams.
  const t0 = Date.now();
  await waitStatus(b, 'streaming');
  await waitAnswerLonger(b, (await lastAnswer(b)).length + 10);
  const seen = Date.now();
  const [shownB, stillRunning] = [await shownTexts(b), await a.textContent('[data-testid=status]')];
  assert.equal(stillRunning, 'streaming', 'b saw it while it ran');
  assert.equal(shownB.at(-2).texts[0], 'follow me from the other tab');
  timings.push(`ChatdChatTransport, another tab's run shown live: ${seen - t0} ms after a streams`);
  await done(a, id);
  await done(b, id);
  await b.reload();
  await waitEqualsStored(b, srv, id);
  assert.deepEqual(await shownTexts(b), await shownTexts(a));
  await context.close();
});

test('ChatdChatTransport, two tabs: stop() in one stops the run for both, stored cancelled, and the next send works at once', async () => {
  const context = await browser.newContext();
  const id = randomUUID();
  const a = await open(context, id, 'chatd');
  await send(a, 'first, to create the chat');
  await waitEqualsStored(a, srv, id);
  const b = await open(context, id, 'chatd');
  const prev = await lastAnswerId(a);
  await send(a, 'stop me');
  const runId = await streamingAnswer(a, 100, prev);
  await waitStatus(b, 'streaming');
  await a.click('[data-testid=stop]');

  for (let end = Date.now() + WAIT; (await runStatus(srv, runId)) !== 'cancelled'; ) {
    assert.ok(Date.now() < end, `the run is stored cancelled, not ${await runStatus(srv, runId)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  await waitEqualsStored(a, srv, id);
  await done(b, id);
  await assertNeverReadyTruncated(a, srv, id, { stopped: runId });
  await a.evaluate(() => { window.__log = []; });
  // At once: no 409 run_active.
  await send(a, 'and now?');
  await waitAnswerLonger(a, 0, WAIT, runId);
  await done(a, id);
  await done(b, id);
  const msgs = await stored(srv, id);
  assert.deepEqual(msgs.filter((m) => m.role === 'user').map((m) => m.parts[0].text), ['first, to create the chat', 'stop me', 'and now?']);
  assert.equal(await a.$('[data-testid=error]'), null, 'no error shown');
  await context.close();
});

test('ChatdChatTransport, two tabs: a message sent while a reply streams is queued and answered after it', async () => {
  const context = await browser.newContext();
  const id = randomUUID();
  const a = await open(context, id, 'chatd');
  await send(a, 'first, to create the chat');
  await waitEqualsStored(a, srv, id);
  const b = await open(context, id, 'chatd');
  const prev = await lastAnswerId(a);
  await send(a, 'the long one');
  await streamingAnswer(a, 100, prev);
  await send(a, 'the queued one');
  await waitEqualsStored(a, srv, id, 3 * WAIT);
  await waitEqualsStored(b, srv, id, 3 * WAIT);
  const msgs = textsOf(await stored(srv, id));
  assert.deepEqual(msgs.map((m) => m.role), ['user', 'assistant', 'user', 'assistant', 'user', 'assistant']);
  assert.equal(msgs[2].texts[0], 'the long one');
  assert.equal(msgs[4].texts[0], 'the queued one');
  assert.match(msgs[5].texts[0], /the queued one/);
  await assertNeverReadyTruncated(a, srv, id);
  await assertNeverReadyTruncated(b, srv, id);
  assert.equal(await a.$('[data-testid=error]'), null, 'no error shown');
  await context.close();
});

test('ChatdChatTransport: regenerating an earlier answer and editing an earlier question through useChat make branches, shown as stored and as in a WebSocket tab', async () => {
  const context = await browser.newContext();
  const id = randomUUID();
  const a = await open(context, id, 'chatd');
  await send(a, 'question one');
  await waitEqualsStored(a, srv, id);
  await send(a, 'question two');
  const first = await waitEqualsStored(a, srv, id);
  assert.equal(first.length, 4);
  // chatd's own app on the same chat, over the WebSocket.
  const [{ id: sessionId }] = await srv.query(`SELECT id FROM sessions WHERE client_id = '${id}'`);
  const ws = await newPage(context);
  await ws.goto(`${srv.httpURL}/c/${sessionId}`);
  await ws.waitForSelector('[data-testid=connection][data-state=live]', { timeout: WAIT });
  await sameAsWebSocketTab(ws, a);
  const ids = await a.$$eval('[data-testid=message]', (els) => els.map((el) => el.dataset.id));

  // Regenerate the first answer (not the latest).
  await a.evaluate((m) => window.__chat.regenerate({ messageId: m }), ids[1]);
  await waitEqualsStored(a, srv, id);
  let msgs = await stored(srv, id);
  assert.equal(msgs.length, 2, 'the new answer is the active path: question one and its new answer');
  assert.deepEqual(storedBranches(msgs), [null, { index: 1, count: 2 }]);
  assert.deepEqual(await shownBranches(a), storedBranches(msgs));
  await sameAsWebSocketTab(ws, a);

  // Edit the first question.
  const q1 = await a.$$eval('[data-testid=message]', (els) => els[0].dataset.id);
  await a.evaluate((m) => window.__chat.sendMessage({ text: 'question one, edited', messageId: m }), q1);
  await waitEqualsStored(a, srv, id);
  msgs = await stored(srv, id);
  assert.deepEqual(textsOf(msgs).map((m) => m.texts[0].slice(0, 20)), ['question one, edited', 'Demo reply to "quest']);
  assert.deepEqual(storedBranches(msgs)[0], { index: 1, count: 2 });
  // The edited question's branch point comes with the transcript, after the answer.
  await a.waitForFunction(() => document.querySelector('[data-testid=message] [data-testid=branch]')?.dataset.count === '2', null, { timeout: WAIT });
  assert.deepEqual(await shownBranches(a), storedBranches(msgs));
  await sameAsWebSocketTab(ws, a);

  // Back to the first question's first version through the branch picker.
  await a.click('[data-testid=message] >> nth=0 >> [data-testid=branch-prev]');
  await a.waitForFunction(() => document.querySelector('[data-testid=message] [data-testid=text]')?.textContent === 'question one', null, { timeout: WAIT });
  await waitEqualsStored(a, srv, id);
  assert.deepEqual(await shownBranches(a), storedBranches(await stored(srv, id)));
  await sameAsWebSocketTab(ws, a);
  await a.reload();
  await waitEqualsStored(a, srv, id);
  assert.deepEqual(await shownBranches(a), storedBranches(await stored(srv, id)));
  await sameAsWebSocketTab(ws, a);
  await context.close();
});

test('@chatd/ai-sdk/react: leaving the chat mid-reply (the component unmounts) leaves the run going; it ends done, followed by the other tab', async () => {
  const context = await browser.newContext();
  const id = randomUUID();
  const a = await open(context, id, 'chatd');
  await send(a, 'first, to create the chat');
  await waitEqualsStored(a, srv, id);
  const b = await open(context, id, 'chatd');
  const prev = await lastAnswerId(a);
  await send(a, 'keep going without me');
  const runId = await streamingAnswer(a, 100, prev);
  // @ai-sdk/react's useChat stops its Chat when it unmounts; with ChatdChatTransport
  // alone that abort would be a stop() for everyone.
  await a.click('[data-testid=unmount]');
  await a.waitForSelector('[data-testid=unmounted]', { timeout: WAIT });
  for (let end = Date.now() + 3 * WAIT; (await runStatus(srv, runId)) !== 'done'; ) {
    const s = await runStatus(srv, runId);
    assert.ok(s === 'running' || s === 'done', `the run goes on, not ${s}`);
    assert.ok(Date.now() < end, `the run ends done, not ${s}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  await done(b, id);
  assert.equal(await a.$('[data-testid=error]'), null, 'no error shown');
  await context.close();
});
