// The chat app against chatd's real OpenAI-compatible provider (CHATD_AGENT=openai), fed
// by a scripted fake model written here: what the demo agent cannot produce. Markdown
// with a highlighted code block streamed in pieces that split its tokens, hostile HTML
// from the model, reasoning, a model that refuses the request (and the resume card that
// follows: Retry, Dismiss), an answer cut off half way (Continue), and the shell tool's
// approval, paused while it waited.
//
// The fake speaks Chat Completions streaming as agent/openai reads it (see its tests):
// `data: {chat.completion.chunk}` lines with choices[0].delta (content,
// reasoning_content, tool_calls), a chunk with finish_reason, a chunk with usage and no
// choices (stream_options.include_usage), then `data: [DONE]`. A stream may hold at a
// gate until the test opens it, so a half-written answer can be looked at without
// guessing at timing.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  assertNoPageErrors,
  openApp,
  screenshot,
  send,
  setup,
  waitFor,
  waitRunEnded,
  WAIT,
} from './browser.mjs';

const markedUMD = join(dirname(fileURLToPath(import.meta.url)), '..', 'node_modules', 'marked', 'lib', 'marked.umd.js');

// --- The fake model -----------------------------------------------------------------------

/** gate is a point a scripted stream stops at until the test calls open(). */
function gate() {
  const g = {};
  g.reached = new Promise((resolve) => (g.arrive = resolve));
  g.opened = new Promise((resolve) => (g.open = resolve));
  return g;
}

function completionChunk(choices, extra = {}) {
  return { id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 1700000000, model: 'fake', choices, ...extra };
}

function deltaChunk(delta, finish = null) {
  return completionChunk([{ index: 0, delta, logprobs: null, finish_reason: finish }]);
}

const content = (s) => ({ content: s });
const thinking = (s) => ({ reasoning_content: s });

/** pieces splits text into pieces of at most n characters: a model's small chunks. */
function pieces(text, n) {
  const out = [];
  for (let i = 0; i < text.length; i += n) out.push(text.slice(i, i + n));
  return out;
}

/**
 * stream answers 200 with parts streamed as chunks: deltas (content(), thinking(),
 * a tool_calls delta), or gates, where it waits for the test.
 */
function stream(parts, { finish = 'stop', usage = { prompt_tokens: 1200, completion_tokens: 80 } } = {}) {
  return async (req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const write = (payload) => res.write(`data: ${typeof payload === 'string' ? payload : JSON.stringify(payload)}\n\n`);
    write(deltaChunk({ role: 'assistant', content: '' }));
    for (const p of parts) {
      if (p.opened) {
        p.arrive();
        await p.opened;
        continue;
      }
      write(deltaChunk(p));
      // Each piece its own write, as a model's tokens come.
      await new Promise((r) => setImmediate(r));
    }
    write(deltaChunk({}, finish));
    write(completionChunk([], { usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens } }));
    write('[DONE]');
    res.end();
  };
}

/** cut streams parts, then breaks the connection off: no finish_reason, no [DONE]. */
function cut(parts) {
  return async (req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.write(`data: ${JSON.stringify(deltaChunk({ role: 'assistant', content: '' }))}\n\n`);
    for (const p of parts) {
      res.write(`data: ${JSON.stringify(deltaChunk(p))}\n\n`);
      await new Promise((r) => setImmediate(r));
    }
    res.destroy();
  };
}

/** failure answers with an HTTP error and an OpenAI-style error body. */
function failure(status, message, type = 'invalid_request_error', code = null) {
  return (req, res) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message, type, param: null, code } }));
  };
}

/**
 * FakeModel is an OpenAI-compatible server whose answers are scripted per prompt: each
 * request is answered with the next answer queued for the latest user message in it
 * that has a script (so a tool result's follow-up, a retry, and a Continue, which adds
 * chatd's own "continue" user message, find theirs). A request with nothing queued is
 * refused with a 400 naming the prompt, which fails the test visibly.
 */
class FakeModel {
  constructor() {
    this.scripts = new Map();
    this.requests = [];
  }

  script(prompt, ...answers) {
    if (!this.scripts.has(prompt)) this.scripts.set(prompt, []);
    this.scripts.get(prompt).push(...answers);
  }

  /** requestsFor is the request bodies made for prompt, in order. */
  requestsFor(prompt) {
    return this.requests.filter((r) => r.prompt === prompt).map((r) => r.body);
  }

  async start() {
    this.server = http.createServer((req, res) => {
      this.handle(req, res).catch((err) => {
        res.destroy(err);
      });
    });
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${this.server.address().port}/v1`;
  }

  async handle(req, res) {
    let raw = '';
    for await (const c of req) raw += c;
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
      return failure(404, `fake model: no ${req.method} ${req.url}`)(req, res);
    }
    const body = JSON.parse(raw);
    const users = body.messages.filter((m) => m.role === 'user').map((m) => m.content);
    const prompt = users.findLast((c) => this.scripts.has(c)) ?? users.at(-1);
    this.requests.push({ prompt, body, authorization: req.headers.authorization });
    const answer = this.scripts.get(prompt)?.shift();
    if (!answer) return failure(400, `fake model: nothing scripted for ${JSON.stringify(prompt)}`)(req, res);
    return answer(req, res);
  }

  async close() {
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

// --- Set-up ---------------------------------------------------------------------------------

const fake = new FakeModel();
let env, mcpDir;
before(async () => {
  await fake.start();
  // An MCP server, @modelcontextprotocol/server-everything, as chatd's stdio child.
  const everything = join(dirname(fileURLToPath(import.meta.url)), '..', 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
  mcpDir = await mkdtemp(join(tmpdir(), 'chatd-mcp-'));
  const mcpConfig = join(mcpDir, 'mcp.json');
  await writeFile(mcpConfig, JSON.stringify({ mcpServers: { everything: { command: process.execPath, args: [everything, 'stdio'] } } }));
  env = await setup({
    CHATD_MCP_CONFIG: mcpConfig,
    CHATD_AGENT: 'openai',
    OPENAI_BASE_URL: fake.url,
    OPENAI_API_KEY: 'x',
    CHATD_MODEL: 'fake',
    CHATD_SHELL_TOOL: 'on',
    // The approval test's wait pauses the sandbox after this; no other test waits.
    CHATD_APPROVAL_TIMEOUT: '1s',
  });
});
after(async () => {
  await env?.teardown();
  await fake.close();
  if (mcpDir) await rm(mcpDir, { recursive: true, force: true });
});

async function newContext(viewport = { width: 1280, height: 900 }) {
  return env.browser.newContext({ viewport });
}

/** rows of the session's messages in the database, in order. */
function storedMessages(sessionId) {
  return env.srv.query(
    `SELECT id::text AS id, role, kind, status, content, tool_status, tool_output, run_id::text AS run_id
     FROM messages WHERE session_id = '${sessionId}' ORDER BY position`,
  );
}

function storedRuns(sessionId) {
  return env.srv.query(
    `SELECT id::text AS id, status, error_code, error_message, retry_of::text AS retry_of, dismissed_at
     FROM runs WHERE session_id = '${sessionId}' ORDER BY started_at`,
  );
}

/** testids of the transcript's items, in order. */
function transcriptOrder(page) {
  return page.$$eval('[data-testid=messages] > li', (els) => els.map((e) => e.getAttribute('data-testid')));
}

const collapse = (s) => s.replace(/\s+/g, ' ').trim();

/**
 * markdownText is what marked makes of source, as text: the words a correct rendering
 * of the stored Markdown shows (highlighting and sanitizing change no text of benign
 * Markdown). It renders in a blank page of the browser, away from the app.
 */
async function markdownText(context, source) {
  const page = await context.newPage();
  try {
    await page.addScriptTag({ path: markedUMD });
    return await page.evaluate((src) => {
      const div = document.createElement('div');
      div.innerHTML = window.marked.parse(src, { gfm: true, breaks: false });
      return div.textContent.replace(/\s+/g, ' ').trim();
    }, source);
  } finally {
    await page.close();
  }
}

// --- Markdown -------------------------------------------------------------------------------

// Written to be split where it hurts: inside the ``` fences, inside **bold**, between a
// table's rows, inside a link's URL. GATE is where the stream holds, half way into the
// code block, for a look at the half-written answer.
const GATE = Symbol('gate');
const MD_SCRIPT = [
  '# Sum', 'mary\n\nThis is **bo', 'ld** and *ita', 'lic*, with `inl', 'ine` code.\n\n',
  '- first', ' item\n- sec', 'ond item\n\n',
  '| Lang | Ye', 'ar |\n|---', '---|------|\n| Go | 2009 |\n| C', ' | 1972 |\n\n',
  'See [the docs](https://go.dev/d', 'oc/) for more.\n\n',
  '``', '`go\npackage main\n\nimport "fmt"\n\nfunc main() {\n\tfor i := 0; i < 3; i++ {\n\t\tfmt.Println(i)\n',
  GATE,
  '\t}\n}\n`', '``\n\nThat is ', 'all.',
];
const MD_TEXT = MD_SCRIPT.filter((p) => p !== GATE).join('');

test('Markdown streamed in pieces renders in one bubble: heading, bold, list, table, link, highlighted Go', async (t) => {
  const hold = gate();
  t.after(() => hold.open()); // a failed test must not leave the run streaming
  const parts = MD_SCRIPT.flatMap((p) => (p === GATE ? [hold] : pieces(p, 4).map(content)));
  fake.script('show me markdown', stream(parts));

  const context = await newContext();
  const page = await openApp(context, env.srv);
  // Counts the assistant bubbles the transcript ever held at once: one, all along.
  await page.evaluate(() => {
    window.__maxBubbles = 0;
    const list = document.querySelector('[data-testid=messages]');
    new MutationObserver(() => {
      const n = list.querySelectorAll('[data-testid=message-assistant]').length;
      window.__maxBubbles = Math.max(window.__maxBubbles, n);
    }).observe(list, { childList: true, subtree: true });
  });
  const sessionId = await send(page, 'show me markdown');
  await hold.reached;

  // Half way into the code block: the open fence is already a code block, never text.
  const streaming = '[data-testid=message-assistant][data-status=streaming] [data-testid=bubble]';
  await page.waitForFunction(
    (sel) => document.querySelector(`${sel} pre code`)?.textContent.includes('fmt.Println(i)'),
    streaming,
    { timeout: WAIT },
  );
  await page.$eval('[data-testid=message-assistant]', (el) => {
    el.dataset.watched = 'yes';
  });
  const half = await page.$eval(streaming, (b) => ({
    text: b.textContent,
    h1: b.querySelector('h1')?.textContent,
    strong: b.querySelector('strong')?.textContent,
    rows: b.querySelectorAll('table tr').length,
    codeClass: b.querySelector('pre code')?.className,
  }));
  assert.ok(!half.text.includes('```') && !half.text.includes('**'), `no Markdown syntax shows half way: ${half.text}`);
  assert.deepEqual(
    { h1: half.h1, strong: half.strong, rows: half.rows, codeClass: half.codeClass },
    { h1: 'Summary', strong: 'bold', rows: 3, codeClass: 'hljs language-go' },
  );
  hold.open();

  await waitRunEnded(page);
  await page.waitForSelector('[data-testid=message-assistant][data-status=complete]', { timeout: WAIT });
  assert.deepEqual(await transcriptOrder(page), ['message-user', 'message-assistant']);
  assert.equal(await page.evaluate(() => window.__maxBubbles), 1, 'one bubble for the segment, all along');
  assert.equal(await page.getAttribute('[data-testid=message-assistant]', 'data-watched'), 'yes', 'the same node, re-rendered in place');

  const bubble = '[data-testid=message-assistant] [data-testid=bubble]';
  const got = await page.$eval(bubble, (b) => ({
    h1: [...b.querySelectorAll('h1')].map((e) => e.textContent),
    strong: [...b.querySelectorAll('strong')].map((e) => e.textContent),
    em: [...b.querySelectorAll('em')].map((e) => e.textContent),
    inlineCode: [...b.querySelectorAll(':not(pre) > code')].map((e) => e.textContent),
    li: [...b.querySelectorAll('ul > li')].map((e) => e.textContent),
    bullet: getComputedStyle(b.querySelector('ul')).listStyleType,
    th: [...b.querySelectorAll('table thead th')].map((e) => e.textContent),
    td: [...b.querySelectorAll('table tbody tr')].map((tr) => [...tr.querySelectorAll('td')].map((e) => e.textContent)),
    links: [...b.querySelectorAll('a')].map((a) => ({ text: a.textContent, href: a.getAttribute('href'), target: a.target, rel: a.rel })),
    pre: b.querySelectorAll('pre').length,
    codeClass: b.querySelector('pre code')?.className,
    code: b.querySelector('pre code')?.textContent,
    keywords: [...b.querySelectorAll('pre code .hljs-keyword')].map((e) => e.textContent),
    strings: [...b.querySelectorAll('pre code .hljs-string')].map((e) => e.textContent),
    numbers: [...b.querySelectorAll('pre code .hljs-number')].map((e) => e.textContent),
    keywordColour: getComputedStyle(b.querySelector('pre code .hljs-keyword')).color,
    codeColour: getComputedStyle(b.querySelector('pre code')).color,
  }));
  assert.deepEqual(got.h1, ['Summary']);
  assert.deepEqual(got.strong, ['bold']);
  assert.deepEqual(got.em, ['italic']);
  assert.deepEqual(got.inlineCode, ['inline']);
  assert.deepEqual(got.li, ['first item', 'second item']);
  // A top-level list, though the bubble sits in the transcript's <ol>: the browser's
  // own style would give it a nested list's circles.
  assert.equal(got.bullet, 'disc');
  assert.deepEqual(got.th, ['Lang', 'Year']);
  assert.deepEqual(got.td, [['Go', '2009'], ['C', '1972']]);
  assert.deepEqual(got.links, [{ text: 'the docs', href: 'https://go.dev/doc/', target: '_blank', rel: 'noopener noreferrer nofollow' }]);
  assert.equal(got.pre, 1, 'one code block');
  assert.equal(got.codeClass, 'hljs language-go');
  assert.equal(got.code, 'package main\n\nimport "fmt"\n\nfunc main() {\n\tfor i := 0; i < 3; i++ {\n\t\tfmt.Println(i)\n\t}\n}');
  for (const kw of ['package', 'import', 'func', 'for']) assert.ok(got.keywords.includes(kw), `${kw} is highlighted: ${got.keywords}`);
  assert.deepEqual(got.strings, ['"fmt"']);
  assert.ok(got.numbers.includes('0') && got.numbers.includes('3'), `numbers highlighted: ${got.numbers}`);
  assert.notEqual(got.keywordColour, got.codeColour, 'the highlighting is styled');

  // The database has exactly what the model sent, and the bubble shows its rendering.
  const rows = (await storedMessages(sessionId)).filter((m) => m.role === 'assistant');
  assert.equal(rows.length, 1);
  assert.equal(rows[0].status, 'complete');
  assert.equal(rows[0].kind, 'text');
  assert.equal(rows[0].content, MD_TEXT);
  assert.equal(await page.getAttribute('[data-testid=message-assistant]', 'data-message-id'), rows[0].id);
  assert.equal(collapse(await page.textContent(bubble)), await markdownText(context, rows[0].content));
  await screenshot(page, 'markdown');

  // Loaded from history, the stored text renders to the very same HTML.
  const streamedHTML = await page.innerHTML(bubble);
  const fresh = await openApp(context, env.srv, `/c/${sessionId}`);
  await fresh.waitForSelector('[data-testid=message-assistant][data-status=complete]', { timeout: WAIT });
  assert.equal(await fresh.innerHTML(bubble), streamedHTML);

  // The usage the model reported (its last chunk) is the run's, and fills the meter.
  const [usage] = await env.srv.query(`SELECT input_tokens, output_tokens FROM runs WHERE session_id = '${sessionId}'`);
  assert.deepEqual(usage, { input_tokens: 1200, output_tokens: 80 });
  await page.waitForSelector('[data-testid=context-meter]:not([hidden])', { timeout: WAIT });
  const requests = fake.requests.filter((r) => r.prompt === 'show me markdown');
  assert.deepEqual(requests.map((r) => [r.authorization, r.body.model, r.body.stream]), [['Bearer x', 'fake', true]]);
  assertNoPageErrors(page, fresh);
  await context.close();
});

// --- Sanitizer ------------------------------------------------------------------------------

const XSS_TEXT = [
  'Here is a picture: <img src=x onerror="window.__xss=1"> and a script <script>window.__xss=2</script>.',
  '',
  'A [markdown link](javascript:window.__xss=3) and <a href="javascript:window.__xss=4">an HTML link</a>,',
  'an <a href="JaVaScRiPt:window.__xss=5">odd-case one</a>, <iframe src="javascript:window.__xss=6"></iframe>',
  '<svg onload="window.__xss=7"><circle r="1"></circle></svg> <b onmouseover="window.__xss=8">hover me</b>',
  '',
  '[a safe link](https://example.com/ok) stays.',
].join('\n');

test("the model's raw HTML, scripts and javascript: links are made harmless", async () => {
  fake.script('be hostile', stream(pieces(XSS_TEXT, 5).map(content)));
  const context = await newContext();
  const page = await openApp(context, env.srv);
  const dialogs = [];
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
  const sessionId = await send(page, 'be hostile');
  await waitRunEnded(page);
  await page.waitForSelector('[data-testid=message-assistant][data-status=complete]', { timeout: WAIT });

  const bubble = page.locator('[data-testid=message-assistant] [data-testid=bubble]');
  // Touch what a person would: hover the bold text, click every link.
  await bubble.locator('b').hover();
  for (const a of await bubble.locator('a').all()) {
    if ((await a.getAttribute('href'))?.startsWith('https:')) continue; // a real link opens a tab: nothing to prove
    await a.click();
  }

  // chatd's Content-Security-Policy (web.go) blocks inline scripts and handlers even if
  // one got through, so window.__xss alone proves little: the DOM is checked for
  // everything the sanitizer must take out.
  const found = await page.evaluate(() => {
    const b = document.querySelector('[data-testid=message-assistant] [data-testid=bubble]');
    const handlers = [...b.querySelectorAll('*')].flatMap((el) =>
      [...el.attributes].filter((a) => a.name.startsWith('on')).map((a) => `${el.tagName}[${a.name}]`),
    );
    const badURLs = [...b.querySelectorAll('[href], [src], [action], [formaction], [xlink\\:href]')]
      .flatMap((el) => ['href', 'src', 'action', 'formaction', 'xlink:href'].map((n) => el.getAttribute(n)))
      .filter((v) => v !== null && /^\s*javascript:/i.test(v));
    return {
      xss: window.__xss,
      scripts: document.querySelectorAll('#messages script').length,
      iframes: b.querySelectorAll('iframe, object, embed').length,
      handlers,
      badURLs,
      links: [...b.querySelectorAll('a')].map((a) => ({ text: a.textContent, href: a.getAttribute('href') })),
      imgs: [...b.querySelectorAll('img')].map((i) => i.getAttribute('src')),
      text: b.textContent.replace(/\s+/g, ' ').trim(),
    };
  });
  assert.equal(found.xss, undefined, 'no script of the model ran');
  assert.deepEqual(dialogs, []);
  assert.equal(found.scripts, 0, 'no <script> in the transcript');
  assert.equal(found.iframes, 0, 'no frames');
  assert.deepEqual(found.handlers, [], 'no event handler attributes');
  assert.deepEqual(found.badURLs, [], 'no javascript: URLs');
  assert.deepEqual(found.imgs, ['x'], 'the image stays, without its handler');
  // The words are kept; only what could run is gone.
  assert.ok(found.text.startsWith('Here is a picture:'), found.text);
  for (const words of ['markdown link', 'an HTML link', 'odd-case one', 'hover me', 'a safe link']) {
    assert.ok(found.text.includes(words), `"${words}" is shown: ${found.text}`);
  }
  assert.ok(!found.text.includes('window.__xss'), `no script source shows as text: ${found.text}`);
  assert.deepEqual(found.links.find((l) => l.text === 'a safe link'), { text: 'a safe link', href: 'https://example.com/ok' });

  const [row] = (await storedMessages(sessionId)).filter((m) => m.role === 'assistant');
  assert.equal(row.content, XSS_TEXT, 'stored as the model sent it: sanitizing is the page’s job');
  assertNoPageErrors(page);
  await context.close();
});

// --- Reasoning ------------------------------------------------------------------------------

const REASONING = ['The user wants', ' a haiku', ' about autumn. ', 'Keep it **short**', ' and concrete.'];
const ANSWER = ['Autumn moon', 'light—\na worm digs', ' silently\ninto the chest', 'nut.'];

test('reasoning streams as a collapsed block, expandable, before the answer', async (t) => {
  const hold = gate();
  t.after(() => hold.open());
  fake.script('a haiku please', stream([...REASONING.slice(0, 2).map(thinking), hold, ...REASONING.slice(2).map(thinking), ...ANSWER.map(content)]));
  const context = await newContext();
  const page = await openApp(context, env.srv);
  const sessionId = await send(page, 'a haiku please');
  await hold.reached;

  // While the model thinks: a closed block that says so, and no answer yet.
  const reasoning = '[data-testid=message-reasoning]';
  await page.waitForSelector(`${reasoning}[data-status=streaming]`, { timeout: WAIT });
  assert.equal(await page.textContent(`${reasoning} summary`), 'Thinking…');
  assert.equal(await page.$eval(`${reasoning} details`, (d) => d.open), false, 'collapsed while it streams');
  assert.equal(await page.locator('[data-testid=message-assistant]').count(), 0);
  hold.open();

  await waitRunEnded(page);
  await page.waitForSelector('[data-testid=message-assistant][data-status=complete]', { timeout: WAIT });
  assert.deepEqual(await transcriptOrder(page), ['message-user', 'message-reasoning', 'message-assistant']);
  await page.waitForSelector(`${reasoning}[data-status=complete]`, { timeout: WAIT });
  assert.equal(await page.textContent(`${reasoning} summary`), 'Reasoning');
  assert.equal(await page.$eval(`${reasoning} details`, (d) => d.open), false, 'collapsed by default');
  assert.equal(await page.isVisible(`${reasoning} .md`), false, 'its text is hidden');
  assert.equal(
    collapse(await page.textContent('[data-testid=message-assistant] [data-testid=bubble]')),
    collapse(ANSWER.join('')),
  );

  // Expanded, it shows the reasoning, as Markdown.
  await page.click(`${reasoning} summary`);
  await page.waitForFunction((sel) => document.querySelector(`${sel} details`).open, reasoning, { timeout: WAIT });
  await page.waitForSelector(`${reasoning} .md strong`, { state: 'visible', timeout: WAIT });
  assert.equal(await page.textContent(`${reasoning} .md strong`), 'short');
  const rows = (await storedMessages(sessionId)).filter((m) => m.role === 'assistant');
  assert.deepEqual(
    rows.map((r) => [r.kind, r.status, r.content]),
    [['reasoning', 'complete', REASONING.join('')], ['text', 'complete', ANSWER.join('')]],
  );
  assert.equal(collapse(await page.textContent(`${reasoning} .md`)), await markdownText(context, rows[0].content));
  await screenshot(page, 'reasoning');

  // And collapses again.
  await page.click(`${reasoning} summary`);
  await page.waitForFunction((sel) => !document.querySelector(`${sel} details`).open, reasoning, { timeout: WAIT });
  assert.equal(await page.isVisible(`${reasoning} .md`), false);
  assertNoPageErrors(page);
  await context.close();
});

// --- A model failure ------------------------------------------------------------------------

test('a refused model call ends the run in error: the resume card says why, and Retry answers', async () => {
  fake.script('fail first', failure(401, 'Incorrect API key provided: x.', 'invalid_request_error', 'invalid_api_key'));
  const context = await newContext();
  const page = await openApp(context, env.srv);
  const sessionId = await send(page, 'fail first');
  await waitRunEnded(page);

  // Runs that end in error are resumable (docs/protocol.md): the card offers to go on.
  const card = page.locator('[data-testid=resume-card]');
  await card.waitFor({ timeout: WAIT });
  assert.equal(await card.getAttribute('data-run-status'), 'error');
  assert.equal(
    collapse(await card.locator('p').textContent()),
    'This reply failed: the model provider refused the credentials: check the API key: Incorrect API key provided: x.',
  );
  for (const b of ['resume-continue', 'resume-retry', 'resume-dismiss']) {
    assert.equal(await page.isEnabled(`[data-testid=${b}]`), true, `${b} is offered`);
  }
  assert.equal(await page.locator('[data-testid=run-error]').count(), 0, 'the card says it; no second panel');
  let [run] = await storedRuns(sessionId);
  assert.deepEqual([run.status, run.error_code], ['error', 'model_auth']);
  assert.equal(fake.requestsFor('fail first').length, 1, 'a refused call is not retried');

  // The model is fixed; Retry answers the same message as a new run.
  fake.script('fail first', stream(pieces('Now it **works**.', 3).map(content)));
  await page.click('[data-testid=resume-retry]');
  await page.waitForSelector('[data-testid=message-assistant][data-status=complete] strong', { timeout: WAIT });
  await waitRunEnded(page);
  await card.waitFor({ state: 'detached', timeout: WAIT });
  assert.equal(await page.textContent('[data-testid=message-assistant] strong'), 'works');
  assert.equal(await page.locator('[data-testid=message-user]').count(), 1, 'the message is answered again, not repeated');
  assert.equal(await page.locator('[data-testid=run-error]').count(), 0);
  const runs = await storedRuns(sessionId);
  assert.equal(runs.length, 2);
  assert.deepEqual(
    runs.map((r) => [r.status, r.retry_of]),
    [['error', null], ['done', runs[0].id]],
  );
  assert.equal(fake.requestsFor('fail first').length, 2);

  // A second failure, dismissed: the run stays failed, and the page says so without
  // offering to resume it.
  fake.script('fail again', failure(400, "Invalid value for 'tools': not supported by this model."));
  await send(page, 'fail again');
  await waitRunEnded(page);
  await card.waitFor({ timeout: WAIT });
  assert.match(collapse(await card.locator('p').textContent()), /^This reply failed: the model provider rejected the request \(HTTP 400\): Invalid value for 'tools'/);
  await page.click('[data-testid=resume-dismiss]');
  await card.waitFor({ state: 'detached', timeout: WAIT });
  const error = page.locator('[data-testid=run-error]');
  await error.waitFor({ timeout: WAIT });
  assert.equal(await error.getAttribute('role'), 'alert');
  assert.match(collapse(await error.textContent()), /^This reply failed: the model provider rejected the request \(HTTP 400\): Invalid value for 'tools'/);
  await waitFor('the dismissal stored', async () => (await storedRuns(sessionId))[2]?.dismissed_at != null);
  [, , run] = await storedRuns(sessionId);
  assert.deepEqual([run.status, run.error_code], ['error', 'model_rejected']);
  // The composer works on: the next message is answered.
  fake.script('and now?', stream([content('Fine again.')]));
  await send(page, 'and now?');
  await waitRunEnded(page);
  await page.waitForSelector('[data-testid=message-assistant] >> text=Fine again.', { timeout: WAIT });
  await error.waitFor({ state: 'detached', timeout: WAIT });
  assertNoPageErrors(page);
  await context.close();
});

test('an answer cut off mid-stream keeps its text, and Continue finishes it', async () => {
  const CONTINUE = 'Your previous message was cut off.'; // how agent.ContinueInstruction begins
  fake.script(
    'cut me off',
    cut(pieces('The first half of the **answer**', 4).map(content)),
    stream(pieces(' and the rest.', 4).map(content)),
  );
  const context = await newContext();
  const page = await openApp(context, env.srv);
  const sessionId = await send(page, 'cut me off');
  await waitRunEnded(page);

  // The text that came is kept, marked failed, and the run can go on from it.
  const card = page.locator('[data-testid=resume-card]');
  await card.waitFor({ timeout: WAIT });
  assert.equal(await card.getAttribute('data-run-status'), 'error');
  assert.equal(collapse(await card.locator('p').textContent()), 'This reply failed: the connection to the model provider broke off.');
  const first = page.locator('[data-testid=message-assistant]').first();
  assert.equal(await first.getAttribute('data-status'), 'error');
  assert.equal(await first.locator('[data-testid=bubble] strong').textContent(), 'answer');
  const note = first.locator('[data-testid=message-status]');
  assert.equal(await note.textContent(), 'Error: the connection to the model provider broke off');
  assert.equal(await note.getAttribute('data-kind'), 'error');
  let [run] = await storedRuns(sessionId);
  assert.deepEqual([run.status, run.error_code], ['error', 'model_stream_cut']);
  let [partial] = (await storedMessages(sessionId)).filter((m) => m.role === 'assistant');
  assert.deepEqual([partial.status, partial.content], ['error', 'The first half of the **answer**']);
  assert.equal(await first.getAttribute('data-message-id'), partial.id);

  // Continue: the same run goes on, the model is given what it wrote, and the rest
  // streams as the run's next segment.
  await page.click('[data-testid=resume-continue]');
  await card.waitFor({ state: 'detached', timeout: WAIT });
  await page.waitForSelector('[data-testid=message-assistant][data-status=complete]', { timeout: WAIT });
  await waitRunEnded(page);
  const runs = await storedRuns(sessionId);
  assert.deepEqual(runs.map((r) => [r.id, r.status]), [[run.id, 'done']]);
  const texts = (await storedMessages(sessionId)).filter((m) => m.role === 'assistant');
  assert.deepEqual(texts.map((m) => [m.status, m.content]), [['error', 'The first half of the **answer**'], ['complete', ' and the rest.']]);
  // The page shows each segment as stored.
  assert.deepEqual(
    await page.$$eval('[data-testid=message-assistant]', (els) =>
      els.map((e) => [e.getAttribute('data-message-id'), e.getAttribute('data-status'), e.querySelector('[data-testid=bubble]').textContent.trim()]),
    ),
    [[texts[0].id, 'error', 'The first half of the answer'], [texts[1].id, 'complete', 'and the rest.']],
  );
  assert.equal(await page.locator('[data-testid=resume-card], [data-testid=run-error]').count(), 0);
  const [, again] = fake.requestsFor('cut me off');
  assert.deepEqual(again.messages.slice(0, 2), [
    { role: 'user', content: 'cut me off' },
    { role: 'assistant', content: 'The first half of the **answer**' },
  ]);
  assert.ok(again.messages[2].role === 'user' && again.messages[2].content.startsWith(CONTINUE), 'asked to continue');
  assertNoPageErrors(page);
  await context.close();
});

// --- Approval, paused -----------------------------------------------------------------------

test('the shell tool waits for approval, pauses, and runs once approved', async () => {
  // Two calls in one run: the first makes the session's sandbox (there is none to pause
  // while it waits), the second waits with that sandbox paused and reads what the
  // first left in it.
  const shell = (id, command) => {
    const args = JSON.stringify({ command });
    const cut = Math.floor(args.length / 2);
    return [
      { tool_calls: [{ index: 0, id, type: 'function', function: { name: 'shell', arguments: '' } }] },
      { tool_calls: [{ index: 0, function: { arguments: args.slice(0, cut) } }] },
      { tool_calls: [{ index: 0, function: { arguments: args.slice(cut) } }] },
    ];
  };
  fake.script(
    'run echo hi',
    stream([content("I'll run it."), ...shell('call_1', 'echo hi | tee note.txt')], { finish: 'tool_calls' }),
    stream(shell('call_2', 'cat note.txt'), { finish: 'tool_calls' }),
    stream(pieces('The file says **hi**.', 4).map(content)),
  );
  const context = await newContext();
  let page = await openApp(context, env.srv);
  // Records every state the approval panel shows, however briefly.
  await page.evaluate(() => {
    window.__approvalStates = [];
    const note = () => {
      const s = document.querySelector('[data-testid=approval]')?.getAttribute('data-state');
      if (s && window.__approvalStates.at(-1) !== s) window.__approvalStates.push(s);
    };
    new MutationObserver(note).observe(document.getElementById('panels'), { childList: true, subtree: true, attributes: true });
  });
  const sessionId = await send(page, 'run echo hi');

  // The first call waits: the approval prompt, then (after CHATD_APPROVAL_TIMEOUT) paused.
  await page.waitForSelector('[data-testid=approval][data-state=paused]', { timeout: WAIT });
  assert.deepEqual(await page.evaluate(() => window.__approvalStates), ['awaiting_approval', 'paused']);
  const approval = page.locator('[data-testid=approval]');
  assert.equal(await approval.locator('[data-testid=approval-tool]').textContent(), 'shell');
  assert.deepEqual(JSON.parse(await approval.locator('[data-testid=approval-input]').textContent()), { command: 'echo hi | tee note.txt' });
  assert.equal(
    await approval.locator('[data-testid=approval-paused]').textContent(),
    'Its sandbox was paused while it waited; approving resumes it.',
  );
  let status = page.locator('[data-testid=run-status]');
  assert.equal(await status.getAttribute('data-status'), 'paused');
  assert.equal(collapse(await status.textContent()), 'Paused, waiting for your approval');
  const card = page.locator('[data-testid=tool-card]');
  assert.equal(await card.getAttribute('data-tool-status'), 'awaiting_approval');
  assert.equal(await card.locator('[data-testid=tool-status]').textContent(), 'awaiting approval');
  assert.equal(await card.locator('[data-testid=tool-name]').textContent(), 'shell');
  assert.equal(await page.isVisible('[data-testid=stop]'), true, 'a waiting run can be stopped');
  assert.equal((await storedRuns(sessionId))[0].status, 'paused');
  await screenshot(page, 'paused');
  // The model was offered the shell tool, and nothing ran yet.
  const [first] = fake.requestsFor('run echo hi');
  assert.ok(first.tools.some((t) => t.function.name === 'shell'), 'shell is offered');
  assert.equal(fake.requestsFor('run echo hi').length, 1);

  await page.click('[data-testid=approve]');
  await page.waitForSelector('[data-testid=tool-card][data-tool-status=ok]', { timeout: WAIT });
  assert.match(await card.first().locator('[data-testid=tool-output]').textContent(), /^hi\n/);

  // The second call waits with the sandbox the first made, and it is paused for real.
  await page.waitForFunction(
    () => {
      const a = document.querySelector('[data-testid=approval][data-state=paused]');
      return a !== null && a.querySelector('[data-testid=approval-input]').textContent.includes('cat note.txt');
    },
    null,
    { timeout: WAIT },
  );
  await waitFor('the sandbox paused', async () => {
    const [row] = await env.srv.query(`SELECT sandbox_paused_at FROM sessions WHERE id = '${sessionId}'`);
    return row.sandbox_paused_at !== null;
  });

  // A tab opened now is shown the same: the paused run, its prompt, the waiting card.
  await page.close();
  page = await openApp(context, env.srv, `/c/${sessionId}`);
  await page.waitForSelector('[data-testid=approval][data-state=paused] [data-testid=approval-paused]', { timeout: WAIT });
  status = page.locator('[data-testid=run-status]');
  assert.equal(await status.getAttribute('data-status'), 'paused');
  assert.deepEqual(JSON.parse(await page.textContent('[data-testid=approval-input]')), { command: 'cat note.txt' });
  assert.deepEqual(
    await page.$$eval('[data-testid=tool-card]', (els) => els.map((e) => e.getAttribute('data-tool-status'))),
    ['ok', 'awaiting_approval'],
  );

  await page.click('[data-testid=approve]');
  await page.waitForSelector('[data-testid=message-assistant]:last-child[data-status=complete] strong', { timeout: WAIT });
  await waitRunEnded(page);
  await page.waitForSelector('[data-testid=approval]', { state: 'detached', timeout: WAIT });

  assert.deepEqual(await transcriptOrder(page), [
    'message-user', 'message-assistant', 'message-tool', 'message-tool', 'message-assistant',
  ]);
  const outputs = await page.$$eval('[data-testid=tool-card]', (els) =>
    els.map((e) => [e.getAttribute('data-tool-status'), e.querySelector('[data-testid=tool-output]').textContent]),
  );
  const rows = await storedMessages(sessionId);
  assert.deepEqual(outputs, rows.filter((m) => m.role === 'tool').map((m) => [m.tool_status, m.tool_output]));
  assert.match(outputs[1][1], /^hi\n/, 'the resumed sandbox still has the first call’s file');
  assert.deepEqual(
    rows.filter((m) => m.role === 'assistant').map((m) => m.content),
    ["I'll run it.", 'The file says **hi**.'],
  );
  assert.equal(await page.textContent('[data-testid=message-assistant]:last-child strong'), 'hi');
  assert.equal((await storedRuns(sessionId))[0].status, 'done');
  const [row] = await env.srv.query(`SELECT sandbox_paused_at FROM sessions WHERE id = '${sessionId}'`);
  assert.equal(row.sandbox_paused_at, null, 'approving resumed the sandbox');

  // The model got each command's output back as the call's result.
  const [, second, third] = fake.requestsFor('run echo hi');
  assert.deepEqual(
    third.messages.filter((m) => m.role === 'tool').map((m) => [m.tool_call_id, /^hi\n/.test(m.content)]),
    [['call_1', true], ['call_2', true]],
  );
  assert.equal(second.messages.filter((m) => m.role === 'tool').length, 1);
  assertNoPageErrors(page);
  await context.close();
});

test('allow for this conversation: the next matching shell call runs without asking, each card says who approved it and when, and a revoke makes calls ask again', async () => {
  const shell = (id, command) => [
    { tool_calls: [{ index: 0, id, type: 'function', function: { name: 'shell', arguments: JSON.stringify({ command }) } }] },
  ];
  fake.script(
    'allow ls',
    stream(shell('call_1', 'ls -a'), { finish: 'tool_calls' }),
    stream(shell('call_2', 'ls -la'), { finish: 'tool_calls' }),
    stream(shell('call_3', 'ls; echo no'), { finish: 'tool_calls' }),
    stream([content('Done.')]),
  );
  const context = await newContext();
  const page = await openApp(context, env.srv);
  const sessionId = await send(page, 'allow ls');

  await page.waitForSelector('[data-testid=approval] [data-testid=approve-session]', { timeout: WAIT });
  assert.equal(await page.textContent('[data-testid=approve-session]'), 'Allow “ls” for this conversation');
  await page.click('[data-testid=approve-session]');
  await page.waitForSelector('[data-testid=approval-rule]', { timeout: WAIT });
  assert.equal(collapse(await page.textContent('[data-testid=approval-rule] code')), 'shell: ls …');

  // call_2 ran without a prompt; call_3 chains a second command, so it asks.
  await page.waitForFunction(
    () => document.querySelector('[data-testid=approval-input]')?.textContent.includes('echo no'),
    null,
    { timeout: WAIT },
  );
  const decisions = () => page.$$eval('[data-testid=tool-decision]', (els) => els.map((e) => [e.getAttribute('data-via'), e.textContent]));
  let said = await decisions();
  assert.equal(said[0][0], 'ws');
  assert.match(said[0][1], /^approved by you, \d\d.\d\d$/);
  assert.equal(said[1][0], 'rule');
  assert.match(said[1][1], /^approved by the rule for ls \(allowed for this conversation\), \d\d.\d\d$/);

  // Revoked: the list goes; the waiting call is denied.
  await page.click('[data-testid=revoke-rule]');
  await page.waitForSelector('[data-testid=approval-rules]', { state: 'detached', timeout: WAIT });
  await page.click('[data-testid=deny]');
  await waitRunEnded(page);
  said = await decisions();
  assert.match(said[2][1], /^denied by you, \d\d.\d\d$/);
  const [{ n }] = await env.srv.query(`SELECT count(*)::int AS n FROM approval_rules WHERE session_id = '${sessionId}'`);
  assert.equal(n, 0);
  const vias = await env.srv.query(
    `SELECT tool_decision->>'via' AS via FROM messages WHERE session_id = '${sessionId}' AND role = 'tool' ORDER BY position`,
  );
  assert.deepEqual(vias.map((r) => r.via), ['ws', 'rule', 'ws']);
  assertNoPageErrors(page);
  await context.close();
});

// --- An MCP server's tool -------------------------------------------------------------------

test("an MCP server's tool: its card and its approval name the server and the tool, with the exact arguments", async () => {
  const call = (id, name, args) => [
    { tool_calls: [{ index: 0, id, type: 'function', function: { name, arguments: '' } }] },
    { tool_calls: [{ index: 0, function: { arguments: JSON.stringify(args) } }] },
  ];
  fake.script(
    'use the mcp tools',
    stream([content('Echo first.'), ...call('call_m1', 'everything__echo', { message: 'hello mcp' })], { finish: 'tool_calls' }),
    stream(call('call_m2', 'everything__toggle-simulated-logging', {}), { finish: 'tool_calls' }),
    stream([content('Both ran.')]),
  );
  const context = await newContext();
  const page = await openApp(context, env.srv);
  const sessionId = await send(page, 'use the mcp tools');
  // echo is read-only (readOnlyHint): it runs at once. The other waits for a person.
  await page.waitForSelector('[data-testid=approval]', { timeout: WAIT });
  const approval = page.locator('[data-testid=approval]');
  assert.equal(await approval.locator('[data-testid=approval-tool]').textContent(), 'toggle-simulated-logging');
  assert.equal(await approval.locator('[data-testid=approval-server]').textContent(), 'everything');
  assert.deepEqual(JSON.parse(await approval.locator('[data-testid=approval-input]').textContent()), {});
  const [offered] = fake.requestsFor('use the mcp tools');
  assert.ok(offered.tools.some((t) => t.function.name === 'everything__echo'), 'the MCP tools are offered');
  const echo = page.locator('[data-testid=tool-card]').first();
  assert.equal(await echo.locator('[data-testid=tool-server]').textContent(), 'everything');
  assert.equal(await echo.locator('[data-testid=tool-name]').textContent(), 'echo');
  assert.equal(await echo.getAttribute('data-tool-status'), 'ok');
  assert.equal(await echo.locator('[data-testid=tool-output]').textContent(), 'Echo: hello mcp');
  await page.click('[data-testid=approve]');
  await waitRunEnded(page);
  const cards = page.locator('[data-testid=tool-card]');
  assert.equal(await cards.nth(1).locator('[data-testid=tool-server]').textContent(), 'everything');
  assert.equal(await cards.nth(1).getAttribute('data-tool-status'), 'ok');
  const rows = await storedMessages(sessionId);
  assert.deepEqual(rows.filter((r) => r.role === 'tool').map((r) => r.tool_status), ['ok', 'ok']);
  // chatd's own tools have no server badge.
  assert.equal(await page.locator('[data-testid=tool-server]:visible').count(), 2);
  assertNoPageErrors(page);
  await context.close();
});
