// Branches through chatd's AI SDK backend, driven by a stock AbstractChat (what useChat
// wraps): regenerate({ messageId }) of an earlier answer or question, sendMessage({ text,
// messageId }) editing an earlier question, the branch metadata of the transcript, and
// reading and switching branches (GET ...?through=, POST .../branch). Real `ai`, real
// bin/chatd (the demo agent answers `Demo reply to "<question>".`).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startChatd } from './chatd.mjs';
import {
  API,
  NodeChat,
  chatId,
  checkWire,
  consume,
  getJSON,
  plain,
  postJSON,
  recorder,
  textOf,
  transcript,
  transport,
  until,
  userMessage,
} from './aisdk-util.mjs';

const ENV = { CHATD_DEMO_DELAY: '1ms', CHATD_DEMO_WORDS: '8' };

const url = (srv, id, rest = '') => `${srv.httpURL}${API}/${encodeURIComponent(id)}${rest}`;
const branchOf = (m) => m.metadata?.chatd?.branch;
const replyTo = (q) => new RegExp(`^Demo reply to "${q}"\\.`);
const shape = (msgs) => msgs.map((m) => [m.role, m.role === 'user' ? textOf(m) : textOf(m).match(/"(.*)"/)?.[1]]);

async function through(srv, id, messageId) {
  const r = await getJSON(url(srv, id, `?through=${encodeURIComponent(messageId)}`));
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.messages;
}

async function ask(chat, ...questions) {
  for (const q of questions) {
    await chat.sendMessage({ text: q });
    assert.equal(chat.status, 'ready', String(chat.error));
  }
}

test('regenerate({ messageId }) of an earlier answer answers that question again as a branch; the old one stays reachable', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: ENV });
  try {
    const rec = recorder();
    const id = chatId();
    const chat = new NodeChat({ id, transport: transport(srv, rec) });
    await ask(chat, 'one', 'two', 'three');
    const [u1, a1, u2, a2, u3, a3] = chat.messages;
    const before = await transcript(srv, id);
    assert.deepEqual(before, plain(chat.messages));
    assert.ok(before.every((m) => m.metadata === undefined), 'no branch point yet: no metadata');

    // The second answer, regenerated: the SDK cuts the chat after "two" and appends the new answer.
    await chat.regenerate({ messageId: a2.id });
    assert.equal(chat.status, 'ready', String(chat.error));
    assert.equal(rec.requests.at(-1).body.trigger, 'regenerate-message');
    assert.equal(rec.requests.at(-1).body.messageId, a2.id);
    assert.deepEqual(shape(chat.messages), [['user', 'one'], ['assistant', 'one'], ['user', 'two'], ['assistant', 'two']]);
    const a2b = chat.lastMessage;
    assert.notEqual(a2b.id, a2.id, 'a new run');
    assert.match(textOf(a2b), replyTo('two'));
    // The stream told the SDK where the answer stands (message-metadata): the second of two.
    const b = branchOf(a2b);
    assert.equal(b?.index, 1, JSON.stringify(a2b.metadata));
    assert.equal(b.count, 2);
    assert.equal(b.siblings.length, 2);

    // The transcript is the new branch, equal to what the SDK holds, metadata included.
    const after = await transcript(srv, id);
    assert.deepEqual(after, plain(chat.messages));

    // The old branch, read without switching: the old answer and what followed it.
    const old = await through(srv, id, b.siblings[0]);
    assert.deepEqual(old.map((m) => m.id), [u1, a1, u2, a2, u3, a3].map((m) => m.id));
    assert.deepEqual(branchOf(old[3]), { index: 0, count: 2, siblings: b.siblings });
    assert.deepEqual(old[5], plain(a3));
    assert.deepEqual(await transcript(srv, id), after, 'reading a branch selects nothing');

    // Switching to it: the answer is the new transcript, and GET has it too.
    const sw = await postJSON(url(srv, id, '/branch'), { messageId: b.siblings[0] });
    assert.equal(sw.status, 200, JSON.stringify(sw.body));
    assert.deepEqual(sw.body.messages, old);
    assert.deepEqual(await transcript(srv, id), old);
    // And back.
    const back = await postJSON(url(srv, id, '/branch'), { messageId: b.siblings[1] });
    assert.deepEqual(back.body.messages, after);

    // regenerate({ messageId }) naming a user message: its answer again.
    await chat.regenerate({ messageId: u1.id });
    assert.equal(chat.status, 'ready', String(chat.error));
    assert.deepEqual(shape(chat.messages), [['user', 'one'], ['assistant', 'one']]);
    assert.notEqual(chat.lastMessage.id, a1.id);
    assert.deepEqual(branchOf(chat.lastMessage), { ...branchOf(chat.lastMessage), index: 1, count: 2 });
    assert.deepEqual(await transcript(srv, id), plain(chat.messages));

    // regenerate() without an id: the last answer again (a third to "one").
    await chat.regenerate();
    assert.equal(chat.status, 'ready', String(chat.error));
    assert.equal(rec.requests.at(-1).body.messageId, undefined, 'the SDK sends no messageId');
    assert.deepEqual(shape(chat.messages), [['user', 'one'], ['assistant', 'one']]);
    assert.deepEqual([branchOf(chat.lastMessage).index, branchOf(chat.lastMessage).count], [2, 3]);
    assert.deepEqual(await transcript(srv, id), plain(chat.messages));

    // Regenerating the old second answer again after switching back to it makes a third
    // answer to "two", not the second again.
    const old2 = await postJSON(url(srv, id, '/branch'), { messageId: b.siblings[0] });
    const reloaded = new NodeChat({ id, messages: old2.body.messages, transport: transport(srv, rec) });
    await reloaded.regenerate({ messageId: a2.id });
    assert.equal(reloaded.status, 'ready', String(reloaded.error));
    assert.notEqual(reloaded.lastMessage.id, a2b.id);
    assert.match(textOf(reloaded.lastMessage), replyTo('two'));
    assert.deepEqual([branchOf(reloaded.lastMessage).index, branchOf(reloaded.lastMessage).count], [2, 3]);

    // An id the chat does not have: 404 in chatd's error shape, nothing started.
    const unknown = await postJSON(`${srv.httpURL}${API}`, { id, messages: [], trigger: 'regenerate-message', messageId: 'no-such-message' });
    assert.equal(unknown.status, 404, JSON.stringify(unknown.body));
    assert.equal(unknown.body.error.code, 'not_found');
    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

test('sendMessage({ text, messageId }) edits an earlier question: a new branch with its answer; retried, it is one edit', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: ENV });
  try {
    const rec = recorder();
    const id = chatId();
    const chat = new NodeChat({ id, transport: transport(srv, rec) });
    await ask(chat, 'one', 'two', 'three');
    const [u1, a1, u2, a2, u3, a3] = chat.messages;

    await chat.sendMessage({ text: 'two, edited', messageId: u2.id });
    assert.equal(chat.status, 'ready', String(chat.error));
    const sent = rec.requests.at(-1).body;
    assert.equal(sent.trigger, 'submit-message');
    assert.equal(sent.messageId, u2.id);
    assert.deepEqual(shape(chat.messages), [['user', 'one'], ['assistant', 'one'], ['user', 'two, edited'], ['assistant', 'two, edited']]);
    assert.equal(chat.messages[2].id, u2.id, 'useChat keeps the id of the message it edited');
    const answer = chat.lastMessage;
    assert.match(textOf(answer), replyTo('two, edited'));

    // The transcript: the edited question is the second of two; its answer has no siblings.
    const after = await transcript(srv, id);
    assert.deepEqual(shape(after), shape(chat.messages));
    const eb = branchOf(after[2]);
    assert.deepEqual([eb?.index, eb?.count], [1, 2], JSON.stringify(after[2]));
    assert.equal(after[3].metadata, undefined);
    assert.deepEqual(after[3], plain(answer));
    assert.deepEqual(after.slice(0, 2), plain([u1, a1]));

    // The old question is reachable, with what followed it.
    const old = await through(srv, id, eb.siblings[0]);
    assert.deepEqual(old.map((m) => m.id), [u1, a1, u2, a2, u3, a3].map((m) => m.id));
    assert.equal(textOf(old[2]), 'two');
    assert.deepEqual(branchOf(old[2]), { index: 0, count: 2, siblings: eb.siblings });

    // The same POST again (a retry): the same run, no second edit.
    const retried = await consume(await transport(srv, rec).sendMessages({ chatId: id, messages: sent.messages, trigger: 'submit-message', messageId: u2.id })).result;
    assert.equal(retried.chunks[0].messageId, answer.id);
    // The same text once more through the chat: a duplicate too.
    await chat.sendMessage({ text: 'two, edited', messageId: u2.id });
    assert.equal(chat.status, 'ready', String(chat.error));
    assert.equal(chat.lastMessage.id, answer.id);
    assert.equal(branchOf((await transcript(srv, id))[2]).count, 2);

    // Edited again under the id useChat kept: a third version of the question, and
    // regenerate({ messageId }) with that id answers the version shown.
    await chat.sendMessage({ text: 'two, third take', messageId: u2.id });
    assert.equal(chat.status, 'ready', String(chat.error));
    assert.match(textOf(chat.lastMessage), replyTo('two, third take'));
    await chat.regenerate({ messageId: u2.id });
    assert.equal(chat.status, 'ready', String(chat.error));
    assert.match(textOf(chat.lastMessage), replyTo('two, third take'));
    const last = await transcript(srv, id);
    assert.deepEqual(shape(last), [['user', 'one'], ['assistant', 'one'], ['user', 'two, third take'], ['assistant', 'two, third take']]);
    assert.deepEqual([branchOf(last[2]).index, branchOf(last[2]).count], [2, 3]);
    assert.deepEqual([branchOf(last[3]).index, branchOf(last[3]).count], [1, 2]);
    assert.deepEqual(last[3], plain(chat.lastMessage));

    // Switching to the first version with the branch endpoint shows the old conversation.
    const sw = await postJSON(url(srv, id, '/branch'), { messageId: eb.siblings[0] });
    assert.equal(sw.status, 200);
    assert.deepEqual(sw.body.messages.map((m) => m.id), [u1, a1, u2, a2, u3, a3].map((m) => m.id));
    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});

test('branch endpoints: a bad message id is 400, an unknown one (chatd id or UIMessage id) 404, and nothing changes', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: ENV });
  try {
    const id = chatId();
    const chat = new NodeChat({ id, transport: transport(srv) });
    await ask(chat, 'one');
    const before = await transcript(srv, id);
    const unknown = crypto.randomUUID();
    for (const [name, r, status] of [
      ['POST branch, not an id', await postJSON(url(srv, id, '/branch'), { messageId: 'no\u0000pe' }), 400],
      ['POST branch, no UIMessage of the chat', await postJSON(url(srv, id, '/branch'), { messageId: 'nope' }), 404],
      ['POST branch, no body', await postJSON(url(srv, id, '/branch')), 400],
      ['POST branch, unknown', await postJSON(url(srv, id, '/branch'), { messageId: unknown }), 404],
      ['POST branch, unknown chat', await postJSON(url(srv, 'no-such-chat', '/branch'), { messageId: unknown }), 404],
      ['GET through, not a UUID', await getJSON(url(srv, id, '?through=nope')), 400],
      ['GET through, unknown', await getJSON(url(srv, id, `?through=${unknown}`)), 404],
      ['GET through, unknown chat', await getJSON(url(srv, 'no-such-chat', `?through=${unknown}`)), 404],
    ]) {
      assert.equal(r.status, status, `${name}: ${JSON.stringify(r.body)}`);
      assert.equal(typeof r.body.error?.code, 'string', name);
      assert.equal(typeof r.body.error?.message, 'string', name);
    }
    assert.deepEqual(await transcript(srv, id), before);
  } finally {
    await srv.stop();
  }
});

test('while a run is active an edit or a regenerate is 409 run_active; an edit with whileRunning "interrupt" cancels the run and answers the edit', { timeout: 60000 }, async () => {
  const srv = await startChatd({ env: ENV });
  try {
    const rec = recorder();
    const t = transport(srv, rec);
    const id = chatId();
    const u1 = userMessage('one');
    const first = await consume(await t.sendMessages({ chatId: id, messages: [u1], trigger: 'submit-message' })).result;
    const a1 = first.message;
    // The demo agent's sandbox call waits for an approval: the run stays active.
    const u2 = userMessage('please approve the sandbox call');
    const running = consume(await t.sendMessages({ chatId: id, messages: [u1, a1, u2], trigger: 'submit-message' }));
    await until(() => running.chunks.some((c) => c.type === 'tool-approval-request'), 20000, 'the second run waiting');

    const edited = { ...u1, parts: [{ type: 'text', text: 'one, edited' }] };
    const post = (body) => postJSON(`${srv.httpURL}${API}`, { id, ...body });
    for (const [name, r] of [
      ['edit', await post({ messages: [edited], trigger: 'submit-message', messageId: u1.id })],
      ['edit, queued', await post({ messages: [edited], trigger: 'submit-message', messageId: u1.id, whileRunning: 'queue' })],
      ['regenerate', await post({ messages: [u1], trigger: 'regenerate-message', messageId: a1.id })],
    ]) {
      assert.equal(r.status, 409, `${name}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, 'run_active', name);
    }

    const edit = await consume(await t.sendMessages({ chatId: id, messages: [edited], trigger: 'submit-message', messageId: u1.id, body: { whileRunning: 'interrupt' } })).result;
    assert.deepEqual(edit.errors, []);
    assert.equal(edit.chunks.at(-1).type, 'finish');
    assert.match(textOf(edit.message), replyTo('one, edited'));
    assert.equal((await running.result).chunks.at(-1).type, 'abort', 'the interrupted run\'s stream ends');

    const msgs = await transcript(srv, id);
    assert.deepEqual(shape(msgs), [['user', 'one, edited'], ['assistant', 'one, edited']]);
    assert.deepEqual([branchOf(msgs[0]).index, branchOf(msgs[0]).count], [1, 2]);
    assert.deepEqual(msgs[1], plain(edit.message));
    const old = await through(srv, id, branchOf(msgs[0]).siblings[0]);
    assert.deepEqual(old.map((m) => m.id), [u1.id, a1.id, u2.id, running.chunks[0].messageId]);
    await checkWire(rec);
  } finally {
    await srv.stop();
  }
});
