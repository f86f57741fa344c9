// Builds the browser side: the client library into client/dist, @chatd/ai-sdk into
// ai-sdk/dist and the app into dist
// (which cmd/chatd embeds). Both outputs are committed, like sqlc's.
//
//   node build.mjs           build in place
//   node build.mjs --check   build into a temporary directory and fail when the committed
//                            output differs (make check-web; CI runs it)
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, dirname, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildClient } from './client/build.mjs';
import { buildApp } from './app/build.mjs';
import { buildAISDK } from './ai-sdk/build.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const outputs = { client: join(here, 'client', 'dist'), app: join(here, 'dist'), aisdk: join(here, 'ai-sdk', 'dist') };

async function files(dir) {
  const out = new Map();
  async function walk(d) {
    let entries;
    try {
      entries = await readdir(d, { withFileTypes: true });
    } catch (err) {
      if (err.code === 'ENOENT') return;
      throw err;
    }
    for (const e of entries) {
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else out.set(relative(dir, p), await readFile(p));
    }
  }
  await walk(dir);
  return out;
}

async function check() {
  const tmp = await mkdtemp(join(tmpdir(), 'chatd-web-check-'));
  try {
    const fresh = { client: join(tmp, 'client'), app: join(tmp, 'app'), aisdk: join(tmp, 'aisdk') };
    await buildClient(fresh.client);
    await buildAISDK(fresh.aisdk);
    await buildApp(fresh.app, fresh.client);
    const stale = [];
    for (const k of Object.keys(outputs)) {
      const want = await files(fresh[k]);
      const have = await files(outputs[k]);
      for (const [name, data] of want) {
        const got = have.get(name);
        if (!got || !got.equals(data)) stale.push(join(relative(here, outputs[k]), name));
      }
      for (const name of have.keys()) if (!want.has(name)) stale.push(join(relative(here, outputs[k]), name) + ' (not built any more)');
    }
    if (stale.length) {
      console.error('web: the committed build is stale; run make web and commit:\n  ' + stale.join('\n  '));
      process.exit(1);
    }
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

if (process.argv.includes('--check')) {
  await check();
} else {
  await buildClient(outputs.client);
  await buildAISDK(outputs.aisdk);
  await buildApp(outputs.app, outputs.client);
}
