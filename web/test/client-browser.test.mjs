// The client library in a real Chromium against a real chatd: the default storage
// (sessionStorage), a reload mid-reply (the state written on pagehide, hello{epoch,
// lastSeq} answered resumed), and the browser going offline and online.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startChatd } from './chatd.mjs';
import { dbMessages, clientMessages } from './client-util.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const chromiumPath = process.env.CHATD_CHROMIUM || (existsSync('/usr/bin/chromium') ? '/usr/bin/chromium' : '');

const page = (wsURL) => `<!doctype html>
<meta charset="utf-8">
<title>client test</title>
<script type="module">
import { ChatClient } from '/client.js';
window.trace = [];
window.seen = [];
window.start = (sessionId) => {
  const client = new ChatClient({ url: ${JSON.stringify(wsURL)}, sessionId, backoff: { initialMs: 50, maxMs: 500 },
    onTrace: (e) => window.trace.push(JSON.parse(JSON.stringify(e))) });
  window.client = client;
  window.initial = client.state;
  client.subscribe((s) => {
    window.seen.push(s.connection);
    // A new session's id is known once the server named it.
    if (s.sessionId && location.hash !== '#' + s.sessionId) location.hash = s.sessionId;
  });
  client.connect();
  return client.state.sessionId;
};
window.ready = true;
</script>`;

test('in Chromium: reload mid-reply resumes from sessionStorage; offline and back catches up; the state ends equal to the database', { skip: !chromiumPath && 'no Chromium (set CHATD_CHROMIUM)', timeout: 120000 }, async () => {
  const { chromium } = await import('playwright-core');
  const bundle = await readFile(join(here, '..', 'client', 'dist', 'index.js'));
  let html = '';
  const web = createServer((req, res) => {
    if (req.url === '/client.js') {
      res.writeHead(200, { 'Content-Type': 'text/javascript' });
      return res.end(bundle);
    }
    res.writeHead(200, { 'Content-Type': 'text/html' });
    res.end(html);
  });
  await new Promise((r) => web.listen(0, '127.0.0.1', r));
  const origin = `http://127.0.0.1:${web.address().port}`;
  const srv = await startChatd({ env: { CHATD_ALLOWED_ORIGINS: origin, CHATD_DEMO_DELAY: '15ms', CHATD_DEMO_WORDS: '400' } });
  html = page(srv.wsURL);
  const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
  try {
    const context = await browser.newContext();
    const tab = await context.newPage();
    await tab.goto(origin + '/');
    await tab.waitForFunction(() => window.ready);
    assert.equal(await tab.evaluate(() => window.start(null)), null, 'a new session has no id until the server names it');
    const runId = await tab.evaluate(async () => (await window.client.send('a long answer, please')).runId);
    const sessionId = await tab.evaluate(() => window.client.state.sessionId);
    assert.equal(await tab.evaluate(() => location.hash.slice(1)), sessionId);
    await tab.waitForFunction(() => window.client.state.messages.some((m) => m.role === 'assistant' && m.content.length > 80));

    // Reload mid-reply: the new page renders the stored state at once and resumes.
    await tab.reload();
    await tab.waitForFunction(() => window.ready);
    const id2 = await tab.evaluate(() => window.start(location.hash.slice(1)));
    assert.equal(id2, sessionId);
    const initial = await tab.evaluate(() => ({ lastSeq: window.initial.lastSeq, epoch: window.initial.epoch, text: window.initial.messages.find((m) => m.role === 'assistant')?.content ?? '' }));
    assert.ok(initial.lastSeq > 0, 'the stored state was loaded');
    assert.ok(initial.text.length > 80, 'and rendered before connecting');
    await tab.waitForFunction(() => window.client.state.connection === 'live');
    const answer = await tab.evaluate(() => window.trace.find((e) => e.type === 'frame' && (e.frame.type === 'resumed' || e.frame.type === 'snapshot')));
    assert.equal(answer.frame.type, 'resumed');
    assert.equal(answer.frame.lastSeq, initial.lastSeq);

    // Offline mid-reply: the indicator says so; back online, the text is caught up.
    await context.setOffline(true);
    await tab.waitForFunction(() => window.client.state.connection === 'offline');
    const offlineText = await tab.evaluate(() => window.client.state.messages.filter((m) => m.role === 'assistant').map((m) => m.content).join(''));
    await context.setOffline(false);
    await tab.waitForFunction(() => window.client.state.connection === 'live');
    await tab.waitForFunction((runId) => window.client.state.lastRun?.runId === runId, runId, { timeout: 60000 });
    const state = await tab.evaluate(() => window.client.state);
    assert.equal(state.lastRun.status, 'done');
    const db = await dbMessages(srv, sessionId);
    assert.deepEqual(clientMessages(state), db);
    const finalText = db.filter((m) => m.role === 'assistant').map((m) => m.content).join('');
    assert.ok(finalText.startsWith(offlineText) && finalText.length > offlineText.length, 'went on from where it was');
    const seen = await tab.evaluate(() => window.seen);
    assert.ok(seen.includes('offline') && seen.includes('live'));
    await context.close();
  } finally {
    await browser.close();
    await srv.stop();
    await new Promise((r) => web.close(r));
  }
});
