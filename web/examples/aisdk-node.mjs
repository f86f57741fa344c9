#!/usr/bin/env node
// chatd as a Vercel AI SDK backend, from Node: the `ai` package's DefaultChatTransport
// sends a message to chatd's /v1/aisdk/chat and readUIMessageStream assembles the answer,
// printed as it streams. No React, no Next.js. See docs/ai-sdk.md.
//
//   make run                                   # chatd on 127.0.0.1:8080, demo agent
//   (cd web && npm ci)                         # once: installs `ai`
//   node web/examples/aisdk-node.mjs "hello"
//   node web/examples/aisdk-node.mjs "use the tool"
//   node web/examples/aisdk-node.mjs --approve "approve the sandbox call"
//
// Environment: CHATD_URL (default http://127.0.0.1:8080), CHATD_TOKEN (sent as
// `Authorization: Bearer`, for CHATD_AUTH=jwt), CHAT_ID (continue a chat: the id this
// script printed; default a new one). Ctrl+C stops the run on chatd (POST .../stop).
import { DefaultChatTransport, readUIMessageStream } from 'ai';

const args = process.argv.slice(2);
const autoApprove = args.includes('--approve');
const text = args.filter((a) => a !== '--approve').join(' ');
if (!text) {
  console.error('usage: node web/examples/aisdk-node.mjs [--approve] "your message"');
  process.exit(2);
}
const base = (process.env.CHATD_URL ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
const api = `${base}/v1/aisdk/chat`;
const headers = process.env.CHATD_TOKEN ? { Authorization: `Bearer ${process.env.CHATD_TOKEN}` } : {};
const chatId = process.env.CHAT_ID ?? `node-${crypto.randomUUID()}`;

async function post(path, body) {
  const res = await fetch(`${api}/${encodeURIComponent(chatId)}/${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return res.json();
}

// The chat so far (chatd keeps it; a useChat app loads it the same way on page load).
const prior = await fetch(`${api}/${encodeURIComponent(chatId)}`, { headers })
  .then((r) => (r.ok ? r.json() : { messages: [] }))
  .then((b) => b.messages)
  .catch((err) => {
    console.error(`cannot reach chatd at ${base}: ${err.cause?.code ?? err.cause?.errors?.[0]?.code ?? err.message} (is \`make run\` running?)`);
    process.exit(1);
  });

const transport = new DefaultChatTransport({ api, headers });
const user = { id: crypto.randomUUID(), role: 'user', parts: [{ type: 'text', text }] };
const stream = await transport.sendMessages({
  chatId,
  messages: [...prior, user],
  trigger: 'submit-message',
  messageId: undefined,
  abortSignal: undefined,
});

// Ctrl+C: closing the request would only stop reading (the run goes on, resumable with
// GET .../stream); stopping the run is POST .../stop. The stream then ends with `abort`.
process.once('SIGINT', () => {
  post('stop').catch(() => process.exit(130));
});

console.error(`chat ${chatId} (CHAT_ID=${chatId} to continue it)\n`);
const printed = new Map(); // part index -> characters of it printed
const announced = new Set();
let message;
for await (message of readUIMessageStream({ stream, onError: (e) => console.error(`\n[error] ${e.message}`) })) {
  message.parts.forEach((part, i) => {
    if (part.type === 'text' || part.type === 'reasoning') {
      const done = printed.get(i) ?? 0;
      if (part.text.length > done) {
        process.stdout.write(part.text.slice(done));
        printed.set(i, part.text.length);
      }
    } else if (part.type.startsWith('tool-') && !part.preliminary) {
      // (preliminary: a running tool's output so far; the final one follows)
      const key = `${part.toolCallId}:${part.state}`;
      if (announced.has(key)) return;
      announced.add(key);
      const name = part.type.slice('tool-'.length);
      if (part.state === 'approval-requested') {
        console.log(`\n[${name} waits for approval: ${JSON.stringify(part.input)}]`);
        if (autoApprove) {
          post('approve', { toolCallId: part.toolCallId, approved: true }).then((r) => console.log(`[approved: ${JSON.stringify(r)}]`));
        } else {
          console.log(`[approve it: curl -X POST ${api}/${encodeURIComponent(chatId)}/approve -H 'content-type: application/json' -d '{"toolCallId":"${part.toolCallId}","approved":true}']`);
        }
      } else if (part.state === 'output-available') {
        console.log(`\n[${name} -> ${String(part.output).trim().split('\n').join(' | ')}]`);
      } else if (part.state === 'output-error' || part.state === 'output-denied') {
        console.log(`\n[${name} failed: ${part.errorText ?? 'denied'}]`);
      }
    }
  });
}
console.log(`\n\n(message ${message?.id}, ${message?.parts.length ?? 0} parts)`);
