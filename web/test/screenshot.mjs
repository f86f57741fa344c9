// Writes docs/screenshot.png, the README's picture of the app: a real chatd with the demo
// agent, a conversation with streamed Markdown and a tool card, and a few others in the
// list. Run it after changing how the app looks (bin/chatd built, DATABASE_URL set):
//
//   make build && scripts/devdb.sh exec sh -c 'cd web && node test/screenshot.mjs'
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openApp, send, setup, waitLive, waitRunEnded, WAIT } from './browser.mjs';

const out = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'docs', 'screenshot.png');
const env = await setup({ CHATD_DEMO_WORDS: '70', CHATD_DEMO_DELAY: '2ms' });
try {
  const context = await env.browser.newContext({ viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 });
  const page = await openApp(context, env.srv);
  for (const text of ['What is chatd?', 'Reload me mid-reply']) {
    await send(page, text);
    await waitRunEnded(page);
    await page.click('[data-testid=new-conversation]');
    await page.waitForURL(env.srv.httpURL + '/', { timeout: WAIT });
    await waitLive(page);
  }
  await send(page, 'Show me a tool call, please');
  await page.waitForSelector('[data-testid=tool-card][data-tool-status=ok]', { timeout: WAIT });
  await waitRunEnded(page);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=session-item]').length === 3, null, {
    timeout: WAIT,
  }).catch(() => console.warn('screenshot: the conversation list is not complete (is the sessions API there?)'));
  await page.click('[data-testid=composer-input]');
  await page.keyboard.type('Approve a command in the sandbox');
  await page.screenshot({ path: out });
  console.log(`wrote ${out}`);
} finally {
  await env.teardown();
}
