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
import { ChatdChatTransport } from '../ai-sdk/dist/index.js';
class State {
  constructor() { this._status = 'ready'; this.error = undefined; this.messages = []; this.statuses = []; }
  get status() { return this._status; }
  set status(s) { this._status = s; this.statuses.push(s); }
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
};
window.shown = () => {
  const m = window.t.chat.memory.messages.at(-1);
  return m && m.role === 'assistant' ? m.parts.filter((p) => p.type === 'text').map((p) => p.text).join('') : '';
};
`;

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
