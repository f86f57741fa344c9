// assistant-ui's recipe for chatd (web/examples/assistant-ui/ChatdAssistant.tsx, bundled as
// it is) in Chromium against a real chatd, on another origin, with ChatdChatTransport:
// a send, a reload mid-reply, Stop, an approval and a regenerated answer's branch, each
// ending equal, word for word, to the stored transcript.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
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
  srv = await startChatd({
    env: { CHATD_DEMO_WORDS: '250', CHATD_DEMO_DELAY: '15ms', CHATD_ALLOWED_ORIGINS: '127.0.0.1:*' },
  });
  proxy = await cutProxy(srv.addr);
  app = await bundle(join(here, 'react', 'assistant-ui-app.jsx'));
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

test('the recipe type-checks (strict) against the pinned React, AI SDK, assistant-ui and @chatd/ai-sdk types', async () => {
  const web = join(here, '..');
  await promisify(execFile)(process.execPath, [join(web, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(web, 'examples', 'assistant-ui')]).catch((err) => {
    assert.fail(`tsc: ${err.stdout}${err.stderr}`);
  });
});

async function open(context, id) {
  const page = await newPage(context);
  const api = `${proxy.url}/v1/aisdk/chat`;
  await page.goto(`${site.url}/?api=${encodeURIComponent(api)}&id=${encodeURIComponent(id)}`);
  await page.waitForSelector('[data-testid=status]', { timeout: WAIT });
  return page;
}

async function send(page, text) {
  await page.fill('[data-testid=input]', text);
  await page.click('[data-testid=send]');
}

async function done(page, id, opts) {
  await waitEqualsStored(page, srv, id);
  await assertNeverReadyTruncated(page, srv, id, opts);
  assert.deepEqual(page.errors, [], 'no uncaught errors');
}

test('assistant-ui with ChatdChatTransport: a send streams and ends as stored; a reload mid-reply keeps the chat and resumes it', async () => {
  const context = await browser.newContext();
  const id = randomUUID();
  const page = await open(context, id);
  await send(page, 'hello assistant-ui');
  await waitAnswerLonger(page, 40);
  await waitStatus(page, 'streaming');
  await done(page, id);
  assert.equal(textsOf(await stored(srv, id))[0].texts[0], 'hello assistant-ui', "chatd stored the chat under the page's id");

  const prev = await lastAnswerId(page);
  await send(page, 'and reload me');
  await waitAnswerLonger(page, 60, WAIT, prev);
  const before = await lastAnswer(page);
  const t0 = Date.now();
  await page.reload();
  const t1 = await waitAnswerLonger(page, before.length);
  timings.push(`assistant-ui, reload mid-reply: ${t1 - t0} ms`);
  await done(page, id);
  await context.close();
});

test('assistant-ui with ChatdChatTransport: Stop stops the run for every tab, stored cancelled, and the next send works', async () => {
  const context = await browser.newContext();
  const id = randomUUID();
  const a = await open(context, id);
  await send(a, 'first');
  await waitEqualsStored(a, srv, id);
  const b = await open(context, id);
  const prev = await lastAnswerId(a);
  await send(a, 'stop me');
  await waitAnswerLonger(a, 100, WAIT, prev);
  const runId = await lastAnswerId(a);
  assert.match(runId, /^[0-9a-f-]{36}$/, "the answer's id is its run's");
  await waitStatus(b, 'streaming');
  await a.click('[data-testid=stop]');
  for (let end = Date.now() + WAIT; (await runStatus(srv, runId)) !== 'cancelled'; ) {
    assert.ok(Date.now() < end, `the run is stored cancelled, not ${await runStatus(srv, runId)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  await done(a, id, { stopped: runId });
  await done(b, id);
  await send(a, 'and now?');
  await waitAnswerLonger(a, 0, WAIT, runId);
  await done(a, id, { stopped: runId });
  await done(b, id);
  assert.equal(await a.$('[data-testid=error]'), null, 'no error shown');
  await context.close();
});

test('assistant-ui with ChatdChatTransport: an approval renders, is decided on the server, and the run goes on', async () => {
  const context = await browser.newContext();
  const id = randomUUID();
  const a = await open(context, id);
  await send(a, 'Please approve a command.');
  await a.waitForSelector('[data-testid=tool][data-waiting=yes] [data-testid=approve]', { timeout: WAIT });
  // A reload while it waits shows the request again.
  await a.reload();
  await a.waitForSelector('[data-testid=tool][data-waiting=yes] [data-testid=approve]', { timeout: WAIT });
  await a.click('[data-testid=approve]');
  await a.waitForSelector('[data-testid=tool][data-waiting=no]', { timeout: WAIT });
  await done(a, id);
  const [, answer] = await stored(srv, id);
  const tool = answer.parts.find((p) => p.type.startsWith('tool-'));
  assert.equal(tool.state, 'output-available', JSON.stringify(tool));
  assert.equal(tool.approval?.approved ?? true, true);
  await context.close();
});

test('assistant-ui with ChatdChatTransport: Regenerate on an earlier answer and Edit of an earlier question make branches, shown and switched as chatd stores them', async () => {
  const context = await browser.newContext();
  const id = randomUUID();
  const a = await open(context, id);
  await send(a, 'question one');
  await waitEqualsStored(a, srv, id);
  await send(a, 'question two');
  await waitEqualsStored(a, srv, id);
  await a.click('[data-testid=message][data-role=assistant] >> nth=0 >> [data-testid=regenerate]');
  await a.waitForSelector('[data-testid=branch][data-count="2"]', { timeout: WAIT });
  await waitEqualsStored(a, srv, id);
  let msgs = await stored(srv, id);
  assert.equal(msgs.length, 2);
  assert.deepEqual(msgs[1].metadata.chatd.branch.index, 1);
  await a.click('[data-testid=branch-prev]');
  await a.waitForSelector('[data-testid=branch][data-index="0"]', { timeout: WAIT });
  await waitEqualsStored(a, srv, id);
  msgs = await stored(srv, id);
  assert.equal(msgs.length, 4, 'the first branch again: both questions');

  // Edit the first question (not the latest).
  await a.click('[data-testid=message][data-role=user] >> nth=0 >> [data-testid=edit]');
  await a.fill('[data-testid=edit-input]', 'question one, edited');
  await a.click('[data-testid=edit-send]');
  await a.waitForSelector('[data-testid=message][data-role=user] [data-testid=branch][data-count="2"]', { timeout: WAIT });
  await waitEqualsStored(a, srv, id);
  msgs = await stored(srv, id);
  assert.deepEqual(textsOf(msgs).map((m) => m.texts[0].slice(0, 20)), ['question one, edited', 'Demo reply to "quest']);
  assert.deepEqual(msgs[0].metadata.chatd.branch.index, 1);
  assert.deepEqual(msgs[0].metadata.chatd.branch.count, 2);
  await a.reload();
  await waitEqualsStored(a, srv, id);
  assert.equal(await a.getAttribute('[data-testid=message][data-role=user] [data-testid=branch]', 'data-count'), '2');

  // After the reload every branch is in assistant-ui's tree (?tree=1): back to the first
  // question, whose answer still has its two alternatives; a second tab follows.
  const b = await open(context, id);
  await waitEqualsStored(b, srv, id);
  await a.click('[data-testid=message][data-role=user] >> nth=0 >> [data-testid=branch-prev]');
  await a.waitForSelector('[data-testid=message][data-role=user] [data-testid=branch][data-index="0"]', { timeout: WAIT });
  await waitEqualsStored(a, srv, id);
  msgs = await stored(srv, id);
  assert.equal(textsOf(msgs)[0].texts[0], 'question one');
  assert.deepEqual(msgs[1].metadata.chatd.branch.count, 2);
  assert.equal(await a.getAttribute('[data-testid=message][data-role=assistant] [data-testid=branch]', 'data-count'), '2');
  await waitEqualsStored(b, srv, id);
  // The other answer, from the tree (one of them has the second question below it).
  const shownAnswers = async () => (await stored(srv, id)).length;
  for (const n of [0, 1]) {
    const was = await a.getAttribute('[data-testid=message][data-role=assistant] >> nth=0 >> [data-testid=branch]', 'data-index');
    const before = await shownAnswers();
    await a.click(`[data-testid=message][data-role=assistant] >> nth=0 >> [data-testid=${was === '0' ? 'branch-next' : 'branch-prev'}]`);
    await a.waitForSelector(`[data-testid=message][data-role=assistant] >> nth=0 >> [data-testid=branch][data-index="${was === '0' ? 1 : 0}"]`, { timeout: WAIT });
    await waitEqualsStored(a, srv, id);
    await waitEqualsStored(b, srv, id);
    const after = await shownAnswers();
    assert.deepEqual([before, after].sort(), [2, 4], `switch ${n}: one answer ends the chat, the other has the second question below it`);
  }
  await context.close();
});
