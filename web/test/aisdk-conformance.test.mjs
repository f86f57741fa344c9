// chatd's AI SDK stream encoder, fuzzed against the SDK's own parser: random runs (text
// and reasoning of any characters, tool calls ending every way, approvals, every end)
// encoded by chatd's Go encoder (transport/aisdk, via its corpus command) must each parse
// with `ai`'s parseJsonEventStream and uiMessageChunkSchema, and assemble with
// readUIMessageStream into exactly the text and reasoning their deltas carried.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema } from 'ai';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

function streamOf(text) {
  return new ReadableStream({
    start(c) {
      // Split at random points: a parser must not depend on how the bytes arrive.
      const bytes = new TextEncoder().encode(text);
      for (let i = 0; i < bytes.length; ) {
        const n = 1 + Math.floor(Math.random() * 64);
        c.enqueue(bytes.slice(i, i + n));
        i += n;
      }
      c.close();
    },
  });
}

test('every stream chatd encodes parses with the SDK and assembles to its deltas', async () => {
  const seed = String(Math.floor(Math.random() * 2 ** 31));
  const corpus = JSON.parse(
    execFileSync('go', ['run', './transport/aisdk/internal/gencorpus', '-n', '300', '-seed', seed], { cwd: root, maxBuffer: 64 << 20 }),
  );
  assert.equal(corpus.length, 300);
  for (const [i, item] of corpus.entries()) {
    const where = `seed ${seed}, stream ${i}`;
    const parsed = parseJsonEventStream({ stream: streamOf(item.stream), schema: uiMessageChunkSchema });
    const chunks = [];
    for await (const r of parsed) {
      assert.ok(r.success, `${where}: a chunk the SDK refuses: ${JSON.stringify(r.error?.message ?? r)}`);
      chunks.push(r.value);
    }
    assert.ok(chunks.length >= 3, where);
    assert.equal(chunks[0].type, 'start', where);
    assert.ok(['finish', 'abort', 'error'].includes(chunks.at(-1).type), `${where}: ends with ${chunks.at(-1).type}`);
    let last;
    const chunkStream = new ReadableStream({
      start(c) {
        for (const ch of chunks) c.enqueue(ch);
        c.close();
      },
    });
    try {
      for await (const m of readUIMessageStream({ stream: chunkStream, terminateOnError: false })) last = m;
    } catch (err) {
      // An 'error' chunk ends the stream with the run's error: expected for failed runs.
      assert.equal(chunks.at(-1).type, 'error', `${where}: ${err}`);
    }
    if (chunks.at(-1).type === 'error') continue;
    const texts = last.parts.filter((p) => p.type === 'text').map((p) => p.text);
    const reasoning = last.parts.filter((p) => p.type === 'reasoning').map((p) => p.text);
    assert.deepEqual(texts, item.text ?? [], `${where}: text`);
    assert.deepEqual(reasoning, item.reasoning ?? [], `${where}: reasoning`);
  }
});
