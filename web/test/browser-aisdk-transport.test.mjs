// @chatd/ai-sdk in Chromium: the committed build and the real `ai` package bundled by
// esbuild into a page served on chatd's origin, AbstractChat (what useChat wraps) over
// ChatdChatTransport. The network goes offline mid-reply and comes back: the chat never
// shows `error`, and ends equal to the stored transcript, word for word.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';
import { setup, WAIT } from './browser.mjs';
import { API, chatId, plain, textOf, transcript } from './aisdk-util.mjs';

const here = dirname(fileURLToPath(import.meta.url));

const entry = `
import { AbstractChat } from 'ai';
import { ChatdChatTransport, followChatdChat, loadChatdChat } from '../ai-sdk/dist/index.js';
class State {
  constructor() { this._status = 'ready'; this.error = undefined; this.messages = []; this.statuses = []; }
  get status() { return this._status; }
  set status(s) { this._status = s; this.statuses.push(s); }
  set error(e) { this._error = e; if (e && !this.firstError) this.firstError = String(e) + ' ' + (e.stack || ''); }
  get error() { return this._error; }
  pushMessage = (m) => { this.messages = this.messages.concat(m); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = [...this.messages.slice(0, i), structuredClone(m), ...this.messages.slice(i + 1)]; };
  snapshot = (x) => structuredClone(x);
}
class Chat extends AbstractChat {
  constructor(o) { const state = new State(); super({ ...o, state }); this.memory = state; }
}
window.startChat = (api, id, text) => {
  const reconnects = [];
  const transport = new ChatdChatTransport({ api, onReconnect: (r) => reconnects.push({ attempt: r.attempt, at: performance.now(), error: String(r.error) }) });
  const chat = new Chat({ id, transport });
  window.t = { chat, reconnects, errors: [] };
  window.t.done = chat.sendMessage({ text }).then(() => 'sent', (e) => 'threw ' + e);
  window.t.unfollow = followChatdChat(transport, id, { resumeStream: () => chat.resumeStream(), setMessages: (m) => (chat.messages = m) });
};
// A tab on chat id: its transcript loaded, resume on mount, following runs started elsewhere.
window.openChat = async (api, id) => {
  const reconnects = [];
  const transport = new ChatdChatTransport({ api, onReconnect: (r) => reconnects.push({ attempt: r.attempt, at: performance.now(), error: String(r.error) }) });
  const loaded = await loadChatdChat(api, id);
  const chat = new Chat({ id, transport });
  chat.messages = loaded.ok ? loaded.messages : [];
  window.t = { chat, reconnects, errors: [] };
  window.t.unfollow = followChatdChat(transport, id, { resumeStream: () => chat.resumeStream(), setMessages: (m) => (chat.messages = m) });
  await chat.resumeStream();
};
window.send = (text) => {
  window.t.done = window.t.chat.sendMessage({ text }).then(() => 'sent', (e) => 'threw ' + e);
};
window.shown = () => {
  const m = window.t.chat.memory.messages.at(-1);
  return m && m.role === 'assistant' ? m.parts.filter((p) => p.type === 'text').map((p) => p.text).join('') : '';
};
`;

async function bundleJS() {
  const bundle = await esbuild.build({
    stdin: { contents: entry, resolveDir: here, loader: 'js' },
    bundle: true,
    format: 'iife',
    platform: 'browser',
    write: false,
    logLevel: 'silent',
  });
  return bundle.outputFiles[0].text;
}

/** A page on chatd's origin with the bundle loaded; its errors collected in page.errors. */
async function openPage(context, origin, js) {
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e));
  await page.route(`${origin}/aisdk-transport-test.html`, (r) =>
    r.fulfill({ status: 200, contentType: 'text/html', body: '<!doctype html><meta charset="utf-8"><script src="/aisdk-transport-test.js"></script>' }),
  );
  await page.route(`${origin}/aisdk-transport-test.js`, (r) => r.fulfill({ status: 200, contentType: 'text/javascript', body: js }));
  await page.goto(`${origin}/aisdk-transport-test.html`);
  return page;
}

const chatState = (page) =>
  page.evaluate(() => ({ status: window.t.chat.memory.status, statuses: window.t.chat.memory.statuses, messages: window.t.chat.memory.messages, reconnects: window.t.reconnects }));

test('Chromium: offline mid-reply and back: the transport resumes on online, nothing twice, never error', { timeout: 90000 }, async () => {
  const env = await setup({ CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '250' });
  try {
    const bundle = await esbuild.build({
      stdin: { contents: entry, resolveDir: here, loader: 'js' },
      bundle: true,
      format: 'iife',
      platform: 'browser',
      write: false,
      logLevel: 'silent',
    });
    const js = bundle.outputFiles[0].text;
    const context = await env.browser.newContext();
    const page = await context.newPage();
    const pageErrors = [];
    page.on('pageerror', (e) => pageErrors.push(e));
    const origin = env.srv.httpURL;
    await page.route(`${origin}/aisdk-transport-test.html`, (r) =>
      r.fulfill({ status: 200, contentType: 'text/html', body: '<!doctype html><meta charset="utf-8"><script src="/aisdk-transport-test.js"></script>' }),
    );
    await page.route(`${origin}/aisdk-transport-test.js`, (r) => r.fulfill({ status: 200, contentType: 'text/javascript', body: js }));
    await page.goto(`${origin}/aisdk-transport-test.html`);

    const id = chatId();
    await page.evaluate(([api, id]) => window.startChat(api, id, 'a long one in a browser'), [origin + API, id]);
    await page.waitForFunction(() => window.shown().length > 300, null, { timeout: WAIT });
    const before = await page.evaluate(() => window.shown().length);
    const t0 = Date.now();
    await context.setOffline(true);
    await new Promise((r) => setTimeout(r, 600));
    await context.setOffline(false);
    const backAt = Date.now();
    await page.waitForFunction((n) => window.shown().length > n, before + 5, { timeout: WAIT });
    const recovered = Date.now();
    assert.equal(await page.evaluate(() => window.t.done), 'sent');
    const state = await page.evaluate(() => ({
      status: window.t.chat.memory.status,
      statuses: window.t.chat.memory.statuses,
      messages: window.t.chat.memory.messages,
      reconnects: window.t.reconnects,
    }));
    assert.equal(state.status, 'ready');
    assert.ok(!state.statuses.includes('error'), `never error: ${state.statuses}`);
    const msgs = await transcript(env.srv, id);
    assert.equal(textOf(state.messages.at(-1)), textOf(msgs.at(-1)), 'word for word, nothing twice');
    assert.deepEqual(plain(state.messages), msgs);
    assert.deepEqual(pageErrors, []);
    console.log(
      `# Chromium offline 600 ms: ${state.reconnects.length} reconnects (${state.reconnects.map((r) => r.error.slice(0, 40)).join(' | ')}); text again ${recovered - backAt} ms after online (${recovered - t0} ms after going offline)`,
    );
    await context.close();
  } finally {
    await env.teardown();
  }
});

test('Chromium: chatd restarted (SIGTERM) mid-reply: the aborted response is resumed, never error, word for word', { timeout: 90000 }, async () => {
  const env = await setup({ CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '250' });
  try {
    const js = await bundleJS();
    const context = await env.browser.newContext();
    const origin = env.srv.httpURL;
    const page = await openPage(context, origin, js);
    const id = chatId();
    await page.evaluate(([api, id]) => window.startChat(api, id, 'survive a restart in a browser'), [origin + API, id]);
    await page.waitForFunction(() => window.shown().length > 300, null, { timeout: WAIT });
    const before = await page.evaluate(() => window.shown().length);
    const t0 = Date.now();
    await env.srv.terminate();
    await env.srv.start(env.srv.addr);
    const up = Date.now();
    await page.waitForFunction((n) => window.shown().length > n, before, { timeout: WAIT });
    const recovered = Date.now();
    assert.equal(await page.evaluate(() => window.t.done), 'sent');
    const state = await chatState(page);
    assert.equal(state.status, 'ready');
    assert.ok(!state.statuses.includes('error'), `never error: ${state.statuses}`);
    const msgs = await transcript(env.srv, id);
    assert.equal(textOf(state.messages.at(-1)), textOf(msgs.at(-1)), 'word for word, nothing twice');
    assert.deepEqual(plain(state.messages), msgs);
    assert.deepEqual(page.errors, []);
    console.log(`# Chromium SIGTERM: chatd back after ${up - t0} ms, text again ${recovered - t0} ms after SIGTERM (${state.reconnects.map((r) => r.error.slice(0, 40)).join(' | ')})`);
    await context.close();
  } finally {
    await env.teardown();
  }
});

test('Chromium, two tabs: a run started in one streams live in the other; stop() in one stops both; the next send works', { timeout: 90000 }, async () => {
  const env = await setup({ CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '300' });
  try {
    const js = await bundleJS();
    const origin = env.srv.httpURL;
    const api = origin + API;
    const id = chatId();
    const ca = await env.browser.newContext();
    const cb = await env.browser.newContext();
    const a = await openPage(ca, origin, js);
    const b = await openPage(cb, origin, js);
    await a.evaluate(([api, id]) => window.startChat(api, id, 'the first, to make the chat'), [api, id]);
    await a.waitForFunction(() => window.t.chat.memory.status === 'ready' && window.shown().length > 0, null, { timeout: WAIT });
    await b.evaluate(([api, id]) => window.openChat(api, id), [api, id]);
    await new Promise((r) => setTimeout(r, 300)); // b's feed is open

    const sentAt = Date.now();
    await a.evaluate(() => window.send('from tab a'));
    await b.waitForFunction(() => window.t.chat.memory.status === 'streaming' && window.shown().length > 0, null, { timeout: WAIT });
    const liveMs = Date.now() - sentAt;
    await b.waitForFunction(() => window.shown().length > 200, null, { timeout: WAIT });

    // stop() in b, the tab that did not send: the run is cancelled for both.
    const stopAt = Date.now();
    await b.evaluate(() => window.t.chat.stop());
    await a.waitForFunction(() => window.t.chat.memory.status === 'ready', null, { timeout: WAIT });
    const stoppedMs = Date.now() - stopAt;
    const runs = await env.srv.query(`SELECT status FROM runs ORDER BY started_at`);
    assert.deepEqual(runs.map((r) => r.status), ['done', 'cancelled']);

    // The next send, from b, works at once, and a follows it.
    await b.evaluate(() => window.send('from tab b, after the stop'));
    await b.waitForFunction(() => window.t.chat.memory.status === 'ready' && /after the stop/.test(window.shown()), null, { timeout: WAIT });
    assert.equal(await b.evaluate(() => window.t.done), 'sent');
    const msgs = await transcript(env.srv, id);
    await a.waitForFunction((n) => window.t.chat.memory.status === 'ready' && window.t.chat.memory.messages.length === n && /after the stop/.test(window.shown()), msgs.length, { timeout: WAIT });
    for (const page of [a, b]) {
      const st = await chatState(page);
      assert.deepEqual(plain(st.messages), msgs, 'each tab equal to the transcript');
      assert.ok(!st.statuses.includes("error"), `never error: ${st.statuses} ${await page.evaluate(() => String(window.t.chat.memory.firstError ?? window.t.chat.error))}`);
      assert.deepEqual(page.errors, []);
    }
    console.log(`# Chromium two tabs: b streams a's run ${liveMs} ms after a's send; b's stop() ends a's stream in ${stoppedMs} ms`);
    await ca.close();
    await cb.close();
  } finally {
    await env.teardown();
  }
});
