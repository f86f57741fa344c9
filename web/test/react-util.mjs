// What the React browser tests share (react-aisdk.test.mjs, assistant-ui.test.mjs): a
// React app bundled with esbuild at test time into a temp dir, served by a tiny static
// server on its own origin (so every call to chatd is cross-origin, as from a team's dev
// server), a TCP proxy in front of chatd that a test can cut and restore, and checks of
// the page against chatd's stored transcript.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import * as esbuild from 'esbuild';
import { WAIT } from './browser.mjs';

const web = join(dirname(fileURLToPath(import.meta.url)), '..');

/** @chatd/ai-sdk as published: web/ai-sdk's built module (make web builds it). */
const aiSdkEntry = join(web, 'ai-sdk', 'dist', 'index.js');
const aiSdkReact = join(web, 'ai-sdk', 'dist', 'react.js');

/**
 * bundle builds entry (a .jsx/.tsx file) into a temp dir with an index.html and returns
 * {dir, close}. '@chatd/ai-sdk' is web/ai-sdk's built module; every other package (ai,
 * react) is web/node_modules', one copy.
 */
export async function bundle(entry) {
  const dir = await mkdtemp(join(tmpdir(), 'chatd-react-'));
  const onePackageCopy = {
    name: 'chatd',
    setup(build) {
      build.onResolve({ filter: /^@chatd\/ai-sdk$/ }, () => ({ path: aiSdkEntry }));
      build.onResolve({ filter: /^@chatd\/ai-sdk\/react$/ }, () => ({ path: aiSdkReact }));
      // Bare imports from outside web/ (the SDK's source elsewhere) resolve from web/.
      build.onResolve({ filter: /^[^./]/ }, async (args) => {
        if (args.pluginData === 'again' || args.resolveDir.startsWith(web)) return undefined;
        return build.resolve(args.path, { kind: args.kind, resolveDir: web, pluginData: 'again' });
      });
    },
  };
  await esbuild.build({
    entryPoints: { app: entry },
    bundle: true,
    format: 'esm',
    outdir: dir,
    jsx: 'automatic',
    target: 'chrome120',
    define: { 'process.env.NODE_ENV': '"development"' },
    plugins: [onePackageCopy],
    logLevel: 'error',
    sourcemap: 'inline',
  });
  await writeFile(
    join(dir, 'index.html'),
    '<!doctype html><html><head><meta charset="utf-8"><title>chatd React test</title></head>' +
      '<body><div id="root"></div><script type="module" src="/app.js"></script></body></html>',
  );
  return { dir, close: () => rm(dir, { recursive: true, force: true }) };
}

/** serveStatic serves dir on 127.0.0.1 (another origin than chatd's); returns {url, close}. */
export async function serveStatic(dir) {
  const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css' };
  const server = createServer(async (req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    const file = path === '/' ? 'index.html' : path.slice(1);
    try {
      const body = await readFile(join(dir, file.replace(/\.\./g, '')));
      res.writeHead(200, { 'content-type': types[file.slice(file.lastIndexOf('.'))] || 'application/octet-stream', 'cache-control': 'no-store' });
      res.end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

/**
 * cutProxy: a TCP proxy in front of chatd (target host:port). down() resets every open
 * connection and refuses new ones until up(): the network cut and restored.
 */
export async function cutProxy(target) {
  const i = target.lastIndexOf(':');
  const host = target.slice(0, i);
  const port = Number(target.slice(i + 1));
  const open = new Set();
  let refusing = false;
  const server = net.createServer((client) => {
    if (refusing) return client.resetAndDestroy();
    const upstream = net.connect(port, host);
    const pair = { client, upstream };
    open.add(pair);
    const end = () => {
      open.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const cut = () => {
    for (const { client, upstream } of open) {
      client.resetAndDestroy();
      upstream.destroy();
    }
    open.clear();
  };
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    down() {
      refusing = true;
      cut();
    },
    up() {
      refusing = false;
    },
    close: () => new Promise((resolve) => { refusing = true; cut(); server.close(() => resolve()); }),
  };
}

/** The stored transcript, GET /v1/aisdk/chat/{id} (straight from chatd). */
export async function stored(srv, id) {
  const res = await fetch(`${srv.httpURL}/v1/aisdk/chat/${encodeURIComponent(id)}`);
  if (res.status === 404) return [];
  assert.equal(res.status, 200);
  return (await res.json()).messages;
}

/** What a transcript says, message by message: role and text parts, as the page shows them. */
export function textsOf(messages) {
  return messages.map((m) => ({ role: m.role, texts: m.parts.filter((p) => p.type === 'text').map((p) => p.text) }));
}

/** What the page shows, in the same shape (the apps mark messages and text parts). */
export async function shownTexts(page) {
  return page.$$eval('[data-testid=message]', (els) =>
    els.map((el) => ({ role: el.dataset.role, texts: [...el.querySelectorAll('[data-testid=text]')].map((p) => p.textContent) })),
  );
}

/** A run's stored status (its id is its answer's message id). */
export async function runStatus(srv, runId) {
  const [row] = await srv.query(`SELECT status FROM runs WHERE id = '${runId}'`);
  return row?.status;
}

/**
 * waitEqualsStored waits until the page is idle (status ready) and shows, word for word,
 * the stored transcript; it fails with both when they do not become equal.
 */
export async function waitEqualsStored(page, srv, id, timeout = 2 * WAIT) {
  const end = Date.now() + timeout;
  let want;
  let got;
  let status;
  for (;;) {
    status = await page.textContent('[data-testid=status]').catch(() => null);
    want = textsOf(await stored(srv, id));
    got = await shownTexts(page);
    if (status === 'ready' && JSON.stringify(want) === JSON.stringify(got)) return want;
    if (Date.now() > end) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(status, 'ready', 'the page is idle');
  assert.deepEqual(got, want, 'the page shows the stored transcript');
  return want;
}

/** How long a render may show `ready` with a cut-off answer before a user could see it. */
export const FLASH_MS = 100;

/**
 * assertNeverReadyTruncated checks the page's log of (status, last answer), kept since
 * the page was (re)loaded: once the page has been busy (submitted or streaming), it
 * never shows `ready` with an answer shorter than the stored one for longer than FLASH_MS
 * (for the answer the tab stopped, `stopped`, a prefix of it is fine: what the tab had
 * when its user stopped it). Before the page was first busy, a just-loaded transcript is
 * shown `ready` until the resume starts: those renders, and the shorter ones, are
 * returned as flashes ([{ms, shown, stored, mount}]) and printed, for the report. With
 * strict, there is none at all.
 */
export async function assertNeverReadyTruncated(page, srv, id, { stopped = null, strict = false } = {}) {
  const final = new Map((await stored(srv, id)).filter((m) => m.role === 'assistant').map((m) => [m.id, textsOf([m])[0].texts.join('\n')]));
  const log = await page.evaluate(() => window.__log);
  const flashes = [];
  let busy = false;
  log.forEach((e, i) => {
    if (e.status === 'submitted' || e.status === 'streaming') busy = true;
    if (e.status !== 'ready' || !e.id || !final.has(e.id) || e.text === final.get(e.id)) return;
    if (e.id === stopped && e.text.length > 0 && final.get(e.id).startsWith(e.text)) return;
    const ms = (log[i + 1]?.t ?? Date.now()) - e.t;
    const what = `status ready with a truncated answer for ${ms} ms (${e.text.length} of ${final.get(e.id).length} characters)`;
    const around = JSON.stringify(log.slice(Math.max(0, i - 2), i + 3).map((e) => [e.t, e.status, e.id, e.text.length]));
    // strict (loadChatdChat, which leaves out the answer a run still writes): never, not
    // even just after a load.
    assert.ok(!strict, `${what}, with strict; the log around it: ${around}`);
    if (busy) assert.ok(ms < FLASH_MS, `${what}; the log around it: ${around}`);
    flashes.push({ ms, shown: e.text.length, stored: final.get(e.id).length, ...(busy ? {} : { mount: true }) });
  });
  if (flashes.length) console.log(`# ready with a cut-off answer, briefly: ${JSON.stringify(flashes)}`);
  return flashes;
}

/** The last answer's text on the page. */
export async function lastAnswer(page) {
  return page.evaluate(() => {
    const els = document.querySelectorAll('[data-testid=message][data-role=assistant]');
    const el = els[els.length - 1];
    return el ? [...el.querySelectorAll('[data-testid=text]')].map((p) => p.textContent).join('\n') : '';
  });
}

/**
 * waitAnswerLonger waits until the last answer has more than n characters (and, with
 * notId, is another message than that one); returns when.
 */
export async function waitAnswerLonger(page, n, timeout = WAIT, notId = null) {
  await page.waitForFunction(
    ({ n, notId }) => {
      const els = document.querySelectorAll('[data-testid=message][data-role=assistant]');
      const el = els[els.length - 1];
      if (!el || el.dataset.id === notId) return false;
      return [...el.querySelectorAll('[data-testid=text]')].map((p) => p.textContent).join('\n').length > n;
    },
    { n, notId },
    { timeout, polling: 'raf' },
  );
  return Date.now();
}

/** The last answer's message id, or null. */
export async function lastAnswerId(page) {
  return page.$$eval('[data-testid=message][data-role=assistant]', (els) => els.at(-1)?.dataset.id ?? null);
}

export async function waitStatus(page, status, timeout = WAIT) {
  await page.waitForFunction((s) => document.querySelector('[data-testid=status]')?.textContent === s, status, { timeout });
}
