// chatd's AI SDK backend: stopping a run from another client, tool calls, and tool
// approvals decided with POST /v1/aisdk/chat/{id}/approve, read through the real `ai`
// package's DefaultChatTransport and readUIMessageStream. Needs transport/aisdk.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startChatd } from './chatd.mjs';
import {
  API,
  NodeChat,
  approve,
  chatId,
  checkWire,
  consume,
  plain,
  postJSON,
  recorder,
  runRow,
  stop,
  stored,
  textOf,
  transcript,
  transport,
  until,
  userMessage,
} from './aisdk-util.mjs';

test('stop from a second client ends the run for both: the first stream ends with abort, the run is stored cancelled', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '300' } });
  try {
    const rec = recorder();
    const id = chatId();
    const a = consume(await transport(srv, rec).sendMessages({ chatId: id, messages: [userMessage('a long answer please')], trigger: 'submit-message' }));
    await until(() => a.chunks.filter((c) => c.type === 'text-delta').length >= 5, 20000, 'some text on A');
    const runId = a.chunks[0].messageId;

    // Another tab (a second client of the same user) reads along, then stops it.
    const b = consume(await transport(srv, rec).reconnectToStream({ chatId: id }));
    await until(() => b.chunks.some((c) => c.type === 'text-delta'), 20000, 'some text on B');
    const stopped = await stop(srv, id);
    assert.equal(stopped.status, 200);
    assert.deepEqual(stopped.body, { stopped: true });

    const [ra, rb] = await Promise.all([a.result, b.result]);
    for (const r of [ra, rb]) {
      assert.deepEqual(r.errors, []);
      assert.equal(r.chunks.at(-1).type, 'abort', `the stream ends with abort: ${JSON.stringify(r.chunks.slice(-3))}`);
      assert.ok(!r.chunks.some((c) => c.type === 'finish'));
    }
    assert.deepEqual(plain(rb.message), plain(ra.message));
    assert.ok(textOf(ra.message).length > 0);
    assert.equal((await runRow(srv, runId)).status, 'cancelled');
    // What was said before the stop is kept, as streamed.
    const msgs = await transcript(srv, id);
    assert.deepEqual(msgs.map((m) => m.role), ['user', 'assistant']);
    assert.ok(textOf(stored(msgs, runId)).length > 0);
    // chatd sends any held text before the run's end, so the streamed text is the stored text.
    assert.equal(textOf(stored(msgs, runId)), textOf(ra.message));

    // Nothing is active any more.
    assert.deepEqual((await stop(srv, id)).body, { stopped: false });
    assert.equal(await transport(srv, rec).reconnectToStream({ chatId: id }), null);
    // Stopping a chat that never was: nothing to stop.
    const none = await stop(srv, chatId());
    assert.ok(none.status === 200 ? none.body.stopped === false : none.status === 404, JSON.stringify(none));

    // The chat goes on with a new run.
    const next = await consume(await transport(srv, rec).sendMessages({ chatId: id, messages: [userMessage('again')], trigger: 'submit-message' })).result;
    assert.equal(next.chunks.at(-1).type, 'finish');
    assert.deepEqual(stored(await transcript(srv, id), next.message.id), plain(next.message));

    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

test('a tool call is a tool part with its input and output, as stored', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '2ms', CHATD_DEMO_WORDS: '30' } });
  try {
    const rec = recorder();
    const id = chatId();
    const { message, chunks, errors } = await consume(
      await transport(srv, rec).sendMessages({ chatId: id, messages: [userMessage('what time is it? use the tool')], trigger: 'submit-message' }),
    ).result;
    assert.deepEqual(errors, []);
    assert.equal(chunks.at(-1).type, 'finish');
    const tools = message.parts.filter((p) => p.type.startsWith('tool-'));
    assert.equal(tools.length, 1, JSON.stringify(message.parts));
    const [tool] = tools;
    assert.equal(tool.type, 'tool-current_time');
    assert.equal(tool.state, 'output-available');
    assert.equal(typeof tool.toolCallId, 'string');
    assert.deepEqual(tool.input, {});
    assert.equal(typeof tool.output, 'string', 'the output is the tool\'s text');
    assert.ok(tool.output.length > 0);
    // The chunks that made it: start, then the input, then the output.
    const order = chunks.filter((c) => c.toolCallId === tool.toolCallId && !c.preliminary).map((c) => c.type);
    assert.deepEqual(order, ['tool-input-start', 'tool-input-available', 'tool-output-available']);
    assert.equal(chunks.find((c) => c.type === 'tool-input-start').toolName, 'current_time');
    // Text before the call and after it (the demo says what the tool said).
    const kinds = message.parts.map((p) => p.type).filter((t) => t !== 'step-start');
    assert.equal(kinds[0], 'text');
    assert.equal(kinds.at(-1), 'text');
    assert.match(textOf(message), /current_time said:/);

    assert.deepEqual(stored(await transcript(srv, id), message.id), plain(message));
    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

test('an approval round trip: the stream shows the approval request, POST approve, the stream goes on to the end', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '2ms', CHATD_DEMO_WORDS: '30' } });
  try {
    const rec = recorder();
    const id = chatId();
    const run = consume(
      await transport(srv, rec).sendMessages({ chatId: id, messages: [userMessage('please approve the sandbox call')], trigger: 'submit-message' }),
    );
    const request = await until(() => run.chunks.find((c) => c.type === 'tool-approval-request'), 20000, 'the approval request');
    const { toolCallId } = request;
    assert.equal(request.approvalId, toolCallId, 'the approval id is the tool call id');
    const input = run.chunks.find((c) => c.type === 'tool-input-available' && c.toolCallId === toolCallId);
    assert.equal(input.toolName, 'demo_sandbox');
    assert.equal(typeof input.input.reason, 'string');

    // While it waits: the run is waiting, the stream is open, a reconnect shows the request too.
    const runId = run.chunks[0].messageId;
    assert.equal((await runRow(srv, runId)).status, 'awaiting_approval');
    const late = consume(await transport(srv, rec).reconnectToStream({ chatId: id }));
    await until(() => late.chunks.some((c) => c.type === 'tool-approval-request' && c.toolCallId === toolCallId), 10000, 'the request on a reconnect');
    // The transcript shows the call waiting.
    const waiting = stored(await transcript(srv, id), runId).parts.find((p) => p.toolCallId === toolCallId);
    assert.equal(waiting.type, 'tool-demo_sandbox');
    assert.equal(waiting.state, 'approval-requested');
    assert.equal(waiting.approval?.id, toolCallId);

    // Unknown calls and bad bodies are refused with JSON errors.
    const unknown = await approve(srv, id, 'no-such-call');
    assert.equal(unknown.status, 404);
    assert.equal(typeof unknown.body.error.code, 'string');
    assert.equal(typeof unknown.body.error.message, 'string');

    // A decision names the input it was shown: another input's hash is refused and the
    // call waits on; the hash as docs/protocol.md says to compute it is taken.
    const post = (body) => postJSON(`${srv.httpURL}${API}/${encodeURIComponent(id)}/approve`, body);
    const wrong = await post({ toolCallId, approved: true, inputHash: inputHash({ ...input.input, reason: 'something else' }) });
    assert.equal(wrong.status, 409, JSON.stringify(wrong.body));
    assert.equal(wrong.body.error.code, 'conflict');
    assert.equal((await runRow(srv, runId)).status, 'awaiting_approval', 'the call still waits');
    assert.equal((await post({ toolCallId, approved: false, scope: 'session' })).status, 400);

    const ok = await post({ toolCallId, approved: true, inputHash: inputHash(input.input) });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.deepEqual(ok.body, { ok: true });
    const again = await approve(srv, id, toolCallId, true);
    assert.ok([404, 409].includes(again.status), `a second decision is refused: ${again.status}`);
    assert.equal(typeof again.body.error.code, 'string');

    const [r, rl] = await Promise.all([run.result, late.result]);
    assert.deepEqual(r.errors, []);
    assert.equal(r.chunks.at(-1).type, 'finish');
    const tool = r.message.parts.find((p) => p.toolCallId === toolCallId);
    assert.equal(tool.type, 'tool-demo_sandbox');
    assert.equal(tool.state, 'output-available', JSON.stringify(tool));
    assert.match(tool.output, /hello from your sandbox/);
    assert.equal(tool.approval?.id, toolCallId);
    if ('approved' in tool.approval) assert.equal(tool.approval.approved, true);
    assert.match(textOf(r.message), /demo_sandbox said: hello from your sandbox/);
    assert.deepEqual(plain(rl.message), plain(r.message));
    assert.deepEqual(stored(await transcript(srv, id), runId), plain(r.message));
    assert.equal((await runRow(srv, runId)).status, 'done');
    assert.deepEqual(await decisionVias(srv, runId), ['http']);

    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

/** The input hash of docs/protocol.md: SHA-256, hex, of JSON.stringify with keys sorted. */
function inputHash(v) {
  const canon = (x) =>
    Array.isArray(x)
      ? x.map(canon)
      : x && typeof x === 'object'
        ? Object.fromEntries(Object.keys(x).sort().map((k) => [k, canon(x[k])]))
        : x;
  return createHash('sha256').update(JSON.stringify(canon(v))).digest('hex');
}

/** How each decided tool call of a run was decided, in order. */
async function decisionVias(srv, runId) {
  const rows = await srv.query(
    `SELECT tool_decision->>'via' AS via FROM messages WHERE run_id = '${runId}' AND tool_decision IS NOT NULL ORDER BY position`,
  );
  return rows.map((r) => r.via);
}

test('a denied approval: the call does not run, the model carries on, the stream ends equal to the transcript', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '2ms', CHATD_DEMO_WORDS: '30' } });
  try {
    const rec = recorder();
    const id = chatId();
    const run = consume(
      await transport(srv, rec).sendMessages({ chatId: id, messages: [userMessage('approve it or not')], trigger: 'submit-message' }),
    );
    const { toolCallId } = await until(() => run.chunks.find((c) => c.type === 'tool-approval-request'), 20000, 'the approval request');
    const no = await approve(srv, id, toolCallId, false);
    assert.equal(no.status, 200, JSON.stringify(no.body));
    const r = await run.result;
    assert.equal(r.chunks.at(-1).type, 'finish');
    const tool = r.message.parts.find((p) => p.toolCallId === toolCallId);
    assert.ok(['output-denied', 'output-error'].includes(tool.state), JSON.stringify(tool));
    assert.ok(!JSON.stringify(tool).includes('hello from your sandbox'), 'the call did not run');
    assert.deepEqual(stored(await transcript(srv, id), r.message.id), plain(r.message));
    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

test('stop while a call waits for approval: the stream ends with abort, the run is cancelled', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '2ms', CHATD_DEMO_WORDS: '30' } });
  try {
    const rec = recorder();
    const id = chatId();
    const run = consume(
      await transport(srv, rec).sendMessages({ chatId: id, messages: [userMessage('approve this please')], trigger: 'submit-message' }),
    );
    const { toolCallId } = await until(() => run.chunks.find((c) => c.type === 'tool-approval-request'), 20000, 'the approval request');
    assert.deepEqual((await stop(srv, id)).body, { stopped: true });
    const r = await run.result;
    assert.equal(r.chunks.at(-1).type, 'abort');
    assert.equal((await runRow(srv, r.message.id)).status, 'cancelled');
    const late = await approve(srv, id, toolCallId, true);
    assert.ok([404, 409].includes(late.status), `an approval after the stop is refused: ${late.status}`);
    assert.deepEqual(stored(await transcript(srv, id), r.message.id).parts.filter((p) => p.type !== 'tool-demo_sandbox'), plain(r.message).parts.filter((p) => p.type !== 'tool-demo_sandbox'));
    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

test('the SDK\'s own approval flow: addToolApprovalResponse then sendMessage() decides the call, and the chat\'s message ends equal to the transcript, nothing twice', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '2ms', CHATD_DEMO_WORDS: '30' } });
  try {
    const rec = recorder();
    const id = chatId();
    const chat = new NodeChat({ id, transport: transport(srv, rec) });
    const sent = chat.sendMessage({ text: 'approve the sandbox call, the SDK way' });
    const isWaiting = (p) => p.type === 'tool-demo_sandbox' && p.state === 'approval-requested';
    await chat.waitFor((c) => c.lastMessage?.parts.some(isWaiting), 20000, 'the approval request in the chat');
    const part = chat.lastMessage.parts.find(isWaiting);
    const runId = chat.lastMessage.id;
    assert.equal(part.approval.id, part.toolCallId);
    // chatd's stream stays open while the call waits; the SDK's flow sends once the chat
    // is not streaming: here after this client stopped reading (the run still waits).
    await chat.stop();
    await sent;
    assert.equal((await runRow(srv, runId)).status, 'awaiting_approval');

    await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
    await chat.sendMessage();
    assert.equal(chat.status, 'ready', String(chat.error));

    // What the SDK sent: the conversation, its last message the assistant's with the answer.
    const body = rec.requests.filter((r) => r.method === 'POST' && r.url === srv.httpURL + API).at(-1).body;
    assert.equal(body.trigger, 'submit-message');
    assert.equal(body.messageId, runId);
    const last = body.messages.at(-1);
    assert.equal(last.role, 'assistant');
    assert.equal(last.id, runId);
    const answered = last.parts.find((p) => p.toolCallId === part.toolCallId);
    assert.equal(answered.state, 'approval-responded');
    assert.deepEqual(answered.approval, { id: part.toolCallId, approved: true });

    const msg = chat.messages.at(-1);
    assert.equal(msg.id, runId);
    assert.equal(chat.messages.length, 2);
    assert.equal(msg.parts.filter((p) => p.type === 'step-start').length, 1, JSON.stringify(plain(msg.parts)));
    assert.equal(msg.parts.filter((p) => p.toolCallId === part.toolCallId).length, 1, 'the call once');
    const tool = msg.parts.find((p) => p.toolCallId === part.toolCallId);
    assert.equal(tool.state, 'output-available');
    assert.match(tool.output, /hello from your sandbox/);
    assert.deepEqual(plain(msg), stored(await transcript(srv, id), runId));
    assert.equal((await runRow(srv, runId)).status, 'done');
    assert.deepEqual(await decisionVias(srv, runId), ['aisdk']);
    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

test('a reader that joins after the approval was given (a reload) assembles the message as stored, the decision included', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: { CHATD_DEMO_DELAY: '10ms', CHATD_DEMO_WORDS: '200' } });
  try {
    const rec = recorder();
    const id = chatId();
    const run = consume(
      await transport(srv, rec).sendMessages({ chatId: id, messages: [userMessage('approve and keep talking')], trigger: 'submit-message' }),
    );
    const { toolCallId } = await until(() => run.chunks.find((c) => c.type === 'tool-approval-request'), 30000, 'the approval request');
    assert.equal((await approve(srv, id, toolCallId, true)).status, 200);
    await until(() => run.chunks.some((c) => c.type === 'tool-output-available' && !c.preliminary), 20000, 'the tool output');
    // The run still streams the rest of its answer: a reload now resumes it from the start.
    const late = consume(await transport(srv, rec).reconnectToStream({ chatId: id }));
    const [r, rl] = await Promise.all([run.result, late.result]);
    assert.equal(rl.chunks.at(-1).type, 'finish');
    const msgs = await transcript(srv, id);
    assert.deepEqual(plain(r.message), stored(msgs, r.message.id));
    assert.deepEqual(plain(rl.message), stored(msgs, r.message.id), 'the late reader\'s message (approval included) is the stored one');
    // And a retry of the POST after the run ended streams the same stored message.
    const again = await consume(
      await transport(srv, rec).sendMessages({ chatId: id, messages: [{ ...msgs[0] }], trigger: 'submit-message' }),
    ).result;
    assert.deepEqual(plain(again.message), stored(msgs, r.message.id));
    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});
