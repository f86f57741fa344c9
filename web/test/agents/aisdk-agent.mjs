// aisdk-agent.mjs: a real Vercel AI SDK chat route, for chatd's
// CHATD_AGENT=http CHATD_AGENT_PROTOCOL=aisdk tests.
//
// The route (POST /api/chat) is written exactly as a team's Next.js route
// would be: it reads the body that the AI SDK's DefaultChatTransport sends
// ({id, messages: [UIMessage...], trigger}), converts the UI messages with
// convertToModelMessages, runs streamText with two tools and stopWhen:
// stepCountIs(5), and answers result.toUIMessageStreamResponse(). Only the
// model is fake: the ai package's own MockLanguageModelV3 (from 'ai/test'),
// scripted by the text of the last user message (and what follows it), so no
// network is needed. Everything between the model and the wire (the UI
// message stream, tool execution, tool approval, multi-step) is the real SDK.
//
// Usage: node test/agents/aisdk-agent.mjs [port]   (port 0 = any free port)
// It listens on 127.0.0.1 and prints one line "listening <port>" on stdout
// when ready.
//
// Endpoints:
//   POST /api/chat  the route.
//   GET  /requests  JSON array of every /api/chat request so far, in order:
//                   {method, url, headers, body} (body parsed as JSON when it
//                   is JSON, else the raw text).
//   GET  /aborts    JSON {count, texts, modelCancelled}: how many /api/chat
//                   responses the client went away from before the end, the
//                   last user text of each, and how many model streams the
//                   SDK cancelled before their end (the abort reached the
//                   model).
//   POST /reset     forgets requests, aborts and the fail-once state.
//
// Scripts (the text of the last user message):
//   hello     text "Hello from the AI SDK agent." in a few deltas.
//   tool      a call of lookup {query:"chatd"}; the SDK executes it and, in a
//             second step of the same request, the model says
//             "The lookup said: found: chatd."
//   approve   a call of transfer {amount:5}; transfer needs approval, so the
//             SDK ends the stream with a tool-approval-request. When a later
//             request carries the approval response (the assistant's
//             tool-transfer part in state approval-responded), the SDK runs
//             transfer if approved and the model says
//             "Transferred: transferred 5." or, if denied, "Not transferred."
//   long      "w1 w2 ... w200", one word per delta, about 15 ms apart;
//             continues a partial answer (see continuation below).
//   slow      like long but 12000 words at 50 ms each (10 minutes); a client
//             abort is recorded in /aborts.
//   fail-once the first such request gets HTTP 500 (JSON body); later ones
//             answer "Recovered."
//   garbage   200, content-type text/plain, "this is not a stream".
//   stall     200 text/event-stream headers, then nothing until the client
//             goes away.
//   otherwise "You said: <text>."

import http from 'node:http';
import {
  streamText,
  convertToModelMessages,
  stepCountIs,
  tool,
  jsonSchema,
  simulateReadableStream,
} from 'ai';
import { MockLanguageModelV3 } from 'ai/test';

// ---------------------------------------------------------------------------
// The tools.

const tools = {
  lookup: tool({
    description: 'Looks something up.',
    inputSchema: jsonSchema({
      type: 'object',
      properties: { query: { type: 'string' } },
      required: ['query'],
      additionalProperties: false,
    }),
    execute: async ({ query }) => `found: ${query}`,
  }),
  transfer: tool({
    description: 'Transfers an amount; needs the user\'s approval.',
    inputSchema: jsonSchema({
      type: 'object',
      properties: { amount: { type: 'number' } },
      required: ['amount'],
      additionalProperties: false,
    }),
    needsApproval: true,
    execute: async ({ amount }) => `transferred ${amount}`,
  }),
};

// ---------------------------------------------------------------------------
// The scripted model.

const LONG_WORDS = 200;
const LONG_DELAY_MS = 15;
const SLOW_WORDS = 12000; // 10 minutes at 50 ms
const SLOW_DELAY_MS = 50;

function words(n) {
  const out = [];
  for (let i = 1; i <= n; i++) out.push(`w${i}`);
  return out.join(' ');
}
const LONG_ANSWER = words(LONG_WORDS);

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 10, text: 10, reasoning: undefined },
};

function finish(unified) {
  return { type: 'finish', finishReason: { unified, raw: unified }, usage };
}

// Splits text into deltas of one word each, a word carrying the space
// before it ("w1", " w2", ...), so that the deltas concatenate to the text.
function wordDeltas(text) {
  return text.match(/\s*\S+\s*$|\s*\S+/g) ?? [];
}

let textCounter = 0;
function textParts(text, deltas) {
  // A fresh text id per model call, as a real provider would give.
  const id = `text-${++textCounter}`;
  return [
    { type: 'stream-start', warnings: [] },
    { type: 'response-metadata', id: 'resp-' + Math.random().toString(36).slice(2), modelId: 'mock-aisdk-agent', timestamp: new Date(0) },
    { type: 'text-start', id },
    ...(deltas ?? wordDeltas(text)).map((delta) => ({ type: 'text-delta', id, delta })),
    { type: 'text-end', id },
    finish('stop'),
  ];
}

let callCounter = 0;
function toolCallParts(toolName, input) {
  const toolCallId = `call-${toolName}-${++callCounter}`;
  const json = JSON.stringify(input);
  return [
    { type: 'stream-start', warnings: [] },
    { type: 'tool-input-start', id: toolCallId, toolName },
    { type: 'tool-input-delta', id: toolCallId, delta: json },
    { type: 'tool-input-end', id: toolCallId },
    { type: 'tool-call', toolCallId, toolName, input: json },
    finish('tool-calls'),
  ];
}

function textOf(message) {
  if (typeof message.content === 'string') return message.content;
  return message.content
    .filter((p) => p.type === 'text')
    .map((p) => p.text)
    .join('');
}

function toolResultsAfter(prompt, index) {
  const out = [];
  for (const m of prompt.slice(index + 1)) {
    if (m.role !== 'tool') continue;
    for (const p of m.content) if (p.type === 'tool-result') out.push(p);
  }
  return out;
}

function outputText(output) {
  if (output == null) return '';
  if (output.type === 'text' || output.type === 'error-text') return output.value;
  if (output.type === 'json' || output.type === 'error-json') {
    return typeof output.value === 'string' ? output.value : JSON.stringify(output.value);
  }
  return '';
}

// script decides what the model streams for one call, from the prompt the
// SDK gives it (the converted messages plus the steps of this request).
function script(prompt) {
  let ui = -1;
  for (let i = prompt.length - 1; i >= 0; i--) {
    if (prompt[i].role === 'user') { ui = i; break; }
  }
  const userText = ui >= 0 ? textOf(prompt[ui]).trim() : '';
  const results = toolResultsAfter(prompt, ui);

  switch (userText) {
    case 'hello':
      return { parts: textParts('Hello from the AI SDK agent.', ['Hello', ' from the', ' AI SDK', ' agent.']) };
    case 'tool': {
      const r = results.find((p) => p.toolName === 'lookup');
      if (!r) return { parts: toolCallParts('lookup', { query: 'chatd' }) };
      return { parts: textParts(`The lookup said: ${outputText(r.output)}.`) };
    }
    case 'approve': {
      const r = results.find((p) => p.toolName === 'transfer');
      if (!r) return { parts: toolCallParts('transfer', { amount: 5 }) };
      // A denial reaches the model as a tool result whose output is
      // {type: 'execution-denied'}; an approved, executed call as the
      // tool's output.
      if (r.output?.type === 'execution-denied') return { parts: textParts('Not transferred.') };
      return { parts: textParts(`Transferred: ${outputText(r.output)}.`) };
    }
    case 'long':
    case 'slow': {
      const full = userText === 'long' ? LONG_ANSWER : words(SLOW_WORDS);
      // CONTINUATION: if the messages end with an assistant message (after
      // the last user message) whose text already holds a prefix of the
      // answer (a partial answer sent back after a crash), the model streams
      // only the rest, so that partial + rest is the full answer. This is
      // what a real model does when it is given a partial assistant message
      // to continue (assistant prefill): it picks up where the text stops
      // instead of starting over.
      let partial = '';
      const last = prompt[prompt.length - 1];
      if (ui >= 0 && prompt.length - 1 > ui && last.role === 'assistant') {
        partial = textOf(last);
      }
      let rest = full;
      if (partial && full.startsWith(partial)) rest = full.slice(partial.length);
      return {
        parts: textParts(rest),
        delay: userText === 'long' ? LONG_DELAY_MS : SLOW_DELAY_MS,
      };
    }
    case 'fail-once':
      return { parts: textParts('Recovered.') };
    default:
      return { parts: textParts(`You said: ${userText}.`) };
  }
}

// watch passes a model stream through and counts, in aborts.modelCancelled,
// the model streams that were cancelled before their end: the proof that a
// client's abort reaches the model (the SDK cancels the provider stream).
function watch(stream) {
  const reader = stream.getReader();
  return new ReadableStream({
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    cancel(reason) {
      aborts.modelCancelled++;
      return reader.cancel(reason);
    },
  });
}

function makeModel() {
  return new MockLanguageModelV3({
    provider: 'chatd-test',
    modelId: 'mock-aisdk-agent',
    doStream: async (options) => {
      const { parts, delay = 1 } = script(options.prompt);
      return {
        stream: watch(simulateReadableStream({ chunks: parts, initialDelayInMs: 0, chunkDelayInMs: delay })),
      };
    },
  });
}

// ---------------------------------------------------------------------------
// The route, as a Next.js app/api/chat/route.js would have it.

async function POST(req) {
  const { messages } = await req.json();
  const result = streamText({
    model: makeModel(),
    messages: await convertToModelMessages(messages),
    tools,
    stopWhen: stepCountIs(5),
    abortSignal: req.signal,
  });
  return result.toUIMessageStreamResponse();
}

// ---------------------------------------------------------------------------
// The test server around the route.

let requests = [];
let aborts = { count: 0, texts: [], modelCancelled: 0 };
let failedOnce = new Set();

function lastUserText(body) {
  const msgs = Array.isArray(body?.messages) ? body.messages : [];
  for (let i = msgs.length - 1; i >= 0; i--) {
    if (msgs[i]?.role !== 'user') continue;
    return (msgs[i].parts ?? [])
      .filter((p) => p?.type === 'text')
      .map((p) => p.text)
      .join('')
      .trim();
  }
  return '';
}

function sendJSON(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
}

async function handleChat(req, res) {
  const raw = await readBody(req);
  let body;
  try { body = JSON.parse(raw); } catch { body = raw; }
  requests.push({ method: req.method, url: req.url, headers: req.headers, body });
  const text = typeof body === 'object' ? lastUserText(body) : '';

  // Record a client that goes away before the response is complete.
  const ac = new AbortController();
  let aborted = false;
  res.on('close', () => {
    if (!res.writableFinished) {
      aborted = true;
      aborts.count++;
      aborts.texts.push(text);
      ac.abort();
    }
  });

  if (text === 'fail-once' && !failedOnce.has(text)) {
    failedOnce.add(text);
    return sendJSON(res, 500, { error: 'fail-once: the first request fails' });
  }
  if (text === 'garbage') {
    res.writeHead(200, { 'content-type': 'text/plain' });
    return res.end('this is not a stream');
  }
  if (text === 'stall') {
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-vercel-ai-ui-message-stream': 'v1',
    });
    res.flushHeaders();
    return; // nothing, ever, until the client goes away
  }

  const request = new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url}`, {
    method: 'POST',
    headers: Object.entries(req.headers).filter(([, v]) => typeof v === 'string'),
    body: raw,
    signal: ac.signal,
  });
  let response;
  try {
    response = await POST(request);
  } catch (err) {
    return sendJSON(res, 500, { error: String(err?.message ?? err) });
  }
  const headers = {};
  response.headers.forEach((v, k) => { headers[k] = v; });
  res.writeHead(response.status, headers);
  res.flushHeaders();
  if (!response.body) return res.end();
  const reader = response.body.getReader();
  try {
    while (!aborted) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!res.write(value)) {
        await new Promise((resolve) => {
          res.once('drain', resolve);
          res.once('close', resolve);
        });
      }
    }
  } catch {
    // the stream failed or was cancelled; fall through
  }
  if (aborted) {
    reader.cancel().catch(() => {});
    return;
  }
  // The response ends a moment after its last chunk, as a route's does when its
  // onFinish saves the messages first: a client that stops reading at the finish chunk
  // aborts it (recorded in /aborts).
  await new Promise((resolve) => setTimeout(resolve, 50));
  if (!aborted) res.end();
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  if (req.method === 'POST' && url.pathname === '/api/chat') {
    handleChat(req, res).catch((err) => {
      if (!res.headersSent) sendJSON(res, 500, { error: String(err?.message ?? err) });
      else res.destroy();
    });
    return;
  }
  if (req.method === 'GET' && url.pathname === '/requests') return sendJSON(res, 200, requests);
  if (req.method === 'GET' && url.pathname === '/aborts') return sendJSON(res, 200, aborts);
  if (req.method === 'POST' && url.pathname === '/reset') {
    requests = [];
    aborts = { count: 0, texts: [], modelCancelled: 0 };
    failedOnce = new Set();
    return sendJSON(res, 200, { ok: true });
  }
  sendJSON(res, 404, { error: 'not found' });
});

const port = Number(process.argv[2] ?? 0);
server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
