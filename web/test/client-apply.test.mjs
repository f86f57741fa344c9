// applyFrame alone: every frame kind of docs/protocol.md, with no network.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyFrame, applyHistory, initialState, eventOrder, pendingApprovals, contextUsage, runProgress, branchOf, EVENT_TYPES } from '../client/dist/index.js';

const S = '0193a000-0000-7000-8000-000000000001';
const R1 = '0193a000-0000-7000-8000-0000000000r1'.replace('r1', 'a1');
const R2 = '0193a000-0000-7000-8000-0000000000b2';
const T = '2026-11-20T22:47:24.319304Z';

let ids = 0;
const mid = () => `0193b000-0000-7000-8000-${String(++ids).padStart(12, '0')}`;

function msg(position, fields = {}) {
  return { id: mid(), position, role: 'assistant', content: '', status: 'complete', runId: R1, requestId: 'r1', createdAt: T, ...fields };
}
/** Messages that follow one another on one branch: each one's parentId is the one before. */
function chain(...ms) {
  return ms.map((m, i) => (i === 0 ? m : { ...m, parentId: ms[i - 1].id }));
}
function run(fields = {}) {
  return { runId: R1, requestId: 'r1', status: 'running', startedAt: T, lastActivityAt: T, ...fields };
}
function ended(status, fields = {}) {
  return run({ status, endedAt: T, ...fields });
}
function snapshot(fields = {}) {
  return { type: 'snapshot', sessionId: S, epoch: 'e1', lastSeq: 0, messages: [], hasMore: false, activeRun: null, ...fields };
}
function ev(seq, type, fields) {
  return { type, seq, runId: R1, requestId: 'r1', ...fields };
}
/** A state that followed a snapshot, then the events. */
function follow(snap, ...events) {
  let s = applyFrame(initialState(), snapshot(snap));
  for (const e of events) s = applyFrame(s, e);
  return s;
}

test('initialState', () => {
  const s = initialState();
  assert.deepEqual(s, {
    sessionId: null, epoch: null, lastSeq: 0, messages: [], hasMore: false,
    activeRun: null, lastRun: null, approvalRules: [], queued: [], connection: 'connecting', closed: null,
  });
  assert.equal(initialState(S).sessionId, S);
});

test('approval rules: the snapshot lists them, approval.rules replaces them', () => {
  const rule = { ruleId: 'r-1', tool: 'shell', command: 'ls', createdBy: 'u1', createdVia: 'ws', toolCallId: 'c1', createdAt: '2026-11-26T14:02:00Z' };
  let s = applyFrame(initialState(), snapshot({ epoch: 'e1', lastSeq: 3, approvalRules: [rule] }));
  assert.deepEqual(s.approvalRules, [rule]);
  s = applyFrame(s, { type: 'approval.rules', seq: 4, requestId: '', rules: [] });
  assert.deepEqual(s.approvalRules, []);
  assert.equal(s.lastSeq, 4);
  s = applyFrame(s, snapshot({ epoch: 'e2', lastSeq: 1 }));
  assert.deepEqual(s.approvalRules, [], 'a snapshot without the field has none');
});

test('snapshot replaces the state, keeps connection and closed', () => {
  const old = { ...follow({ messages: [msg(1)] }), connection: 'live' };
  const m = [msg(5, { role: 'user' }), msg(6, { status: 'streaming', content: 'so far' })];
  const last = ended('done');
  const s = applyFrame(old, snapshot({ epoch: 'e2', lastSeq: 40, messages: m, hasMore: true, lastRun: last }));
  assert.equal(s.epoch, 'e2');
  assert.equal(s.lastSeq, 40);
  assert.deepEqual(s.messages, m);
  assert.equal(s.hasMore, true);
  assert.equal(s.activeRun, null);
  assert.deepEqual(s.lastRun, last);
  assert.equal(s.connection, 'live');
  assert.equal(s.closed, null);
  // lastRun absent: null; an active run.
  const s2 = applyFrame(s, snapshot({ epoch: 'e3', activeRun: run() }));
  assert.equal(s2.lastRun, null);
  assert.deepEqual(s2.activeRun, run());
  assert.deepEqual(s2.messages, []);
});

test('snapshot messages come out in position order, unique by id', () => {
  const a = msg(2), b = msg(1);
  const s = follow({ messages: [a, b, a] });
  assert.deepEqual(s.messages.map((m) => m.position), [1, 2]);
});

test('resumed keeps the state', () => {
  const before = follow({ lastSeq: 7, messages: [msg(1)] });
  const s = applyFrame(before, { type: 'resumed', sessionId: S, epoch: 'e1', lastSeq: 7 });
  assert.equal(s, before);
});

test('events apply only in seq order: old ones are ignored, a gap applies nothing', () => {
  const u = msg(1, { role: 'user', content: 'hi' });
  const a = msg(2, { status: 'streaming', parentId: u.id });
  let s = follow({ lastSeq: 0 },
    ev(1, 'chat.started', { run: run(), userMessage: u }),
    ev(2, 'assistant.segment.started', { message: a }),
    ev(3, 'chat.delta', { messageId: a.id, text: 'Hel' }));
  assert.equal(s.lastSeq, 3);
  assert.equal(s.messages[1].content, 'Hel');
  // A duplicate (seq <= lastSeq) is ignored.
  for (const dup of [ev(3, 'chat.delta', { messageId: a.id, text: 'Hel' }), ev(1, 'chat.started', { run: run(), userMessage: u })]) {
    assert.equal(eventOrder(s, dup), 'old');
    assert.equal(applyFrame(s, dup), s);
  }
  // A gap is not applied (and not skipped: lastSeq stays).
  const gap = ev(5, 'chat.delta', { messageId: a.id, text: 'XX' });
  assert.equal(eventOrder(s, gap), 'gap');
  assert.equal(applyFrame(s, gap), s);
  s = applyFrame(s, ev(4, 'chat.delta', { messageId: a.id, text: 'lo' }));
  assert.equal(s.messages[1].content, 'Hello');
  assert.equal(s.lastSeq, 4);
  assert.equal(eventOrder(s, gap), 'next');
});

test('chat.started adds the user message; its run is active; lastRun clears', () => {
  const held = chain(msg(1, { role: 'user' }), msg(2));
  const u = msg(3, { role: 'user', content: 'hi', parentId: held[1].id });
  const s = follow({ lastSeq: 9, messages: held, lastRun: ended('done') },
    ev(10, 'chat.started', { run: run({ runId: R2 }), userMessage: u }));
  assert.deepEqual(s.messages.at(-1), u);
  assert.equal(s.activeRun.runId, R2);
  assert.equal(s.lastRun, null);
});

test('a regeneration: branch.selected ends the path at the question, chat.started replaces it, the new answer appends', () => {
  const [u, a, t] = chain(
    msg(1, { role: 'user', runId: R1, content: 'q' }),
    msg(2, { runId: R1, content: 'first answer', status: 'error' }),
    msg(3, { role: 'tool', runId: R1, tool: { callId: 'c', name: 'x', input: {}, status: 'ok', output: 'o' } }),
  );
  let s = follow({ lastSeq: 1, messages: [u, a, t], lastRun: ended('error', { resumable: true }) });
  s = applyFrame(s, { type: 'branch.selected', seq: 2, requestId: '', leafId: u.id, messages: [u], hasMore: false });
  assert.deepEqual(s.messages, [u], 'the path up to the question answered again');
  const u2 = { ...u, status: 'complete' };
  s = applyFrame(s, ev(3, 'chat.started', { runId: R2, run: run({ runId: R2, requestId: 'r2', retryOf: R1 }), userMessage: u2 }));
  assert.equal(s.messages.length, 1, 'the user message is held: replaced, not added twice');
  assert.equal(s.messages[0], u2);
  assert.equal(s.activeRun.retryOf, R1);
  assert.equal(s.lastRun, null);
  const b = msg(4, { runId: R2, status: 'streaming', parentId: u.id, branch: { siblings: [a.id, mid()], index: 1 } });
  s = applyFrame(s, ev(4, 'assistant.segment.started', { runId: R2, message: b }));
  s = applyFrame(s, ev(5, 'chat.delta', { runId: R2, messageId: b.id, text: 'again' }));
  assert.deepEqual(s.messages.map((m) => m.id), [u.id, b.id]);
  assert.equal(s.messages[1].content, 'again');
  assert.deepEqual(branchOf(s.messages[1]), { index: 1, count: 2, prev: a.id });
});

test('a regeneration without branch.selected first (an older server order): the question is replaced in place', () => {
  const [u, a] = chain(msg(1, { role: 'user', runId: R1 }), msg(2, { runId: R1 }));
  const s = follow({ lastSeq: 1, messages: [u, a] },
    ev(2, 'chat.started', { runId: R2, run: run({ runId: R2, requestId: 'r2', retryOf: R1 }), userMessage: u }));
  assert.deepEqual(s.messages, [u, a], 'held: replaced where it is; nothing marked');
  assert.equal(s.messages[1], a, 'untouched messages keep their identity');
  assert.equal('superseded' in s.messages[1], false);
});

test('an added message is appended only when its parent is the last message held', () => {
  const [u, a] = chain(msg(1, { role: 'user' }), msg(2));
  const base = follow({ lastSeq: 0, messages: [u, a], activeRun: run() });
  // Its parent is the last: appended.
  const next = msg(3, { role: 'system', parentId: a.id });
  assert.deepEqual(applyFrame(base, ev(1, 'message.added', { message: next })).messages, [u, a, next]);
  // Its parent is held but not last, or not held, or it is a root while messages are held:
  // it is on another branch. Only lastSeq moves.
  for (const parentId of [u.id, mid(), undefined]) {
    for (const type of ['message.added', 'assistant.segment.started', 'tool.start']) {
      const m = msg(3, { parentId });
      const s = applyFrame(base, ev(1, type, { message: m }));
      assert.equal(s.messages, base.messages, `${type} with parent ${parentId}`);
      assert.equal(s.lastSeq, 1);
    }
    const s = applyFrame(base, ev(1, 'chat.started', { runId: R2, run: run({ runId: R2 }), userMessage: msg(3, { role: 'user', parentId }) }));
    assert.equal(s.messages, base.messages, 'a user message on another branch is not shown');
    assert.equal(s.activeRun.runId, R2, 'its run is the session\'s run all the same');
  }
  // With nothing held, a root message (no parentId) starts the path; a child does not.
  const empty = follow({ lastSeq: 0 });
  const root = msg(1, { role: 'user' });
  assert.deepEqual(applyFrame(empty, ev(1, 'chat.started', { run: run(), userMessage: root })).messages, [root]);
  assert.deepEqual(applyFrame(empty, ev(1, 'chat.started', { run: run(), userMessage: { ...root, parentId: mid() } })).messages, []);
  // A held message is replaced wherever it is, whatever its parentId says.
  const edited = { ...u, content: 'replaced', branch: { siblings: [u.id, mid()], index: 0 } };
  const r = applyFrame(base, ev(1, 'message.added', { message: edited }));
  assert.deepEqual(r.messages, [edited, a]);
  assert.equal(r.messages[1], a);
});

test('a held message replaced by one without branch keeps its branch; one with a branch brings its own', () => {
  const siblings = [mid(), mid()];
  const u = msg(1, { role: 'user', branch: { siblings: [...siblings], index: 1 } });
  let s = follow({ lastSeq: 0, messages: [u] });
  // A regeneration's chat.started carries the question without its alternatives.
  const plain = { ...u, branch: undefined };
  delete plain.branch;
  s = applyFrame(s, ev(1, 'chat.started', { runId: R2, run: run({ runId: R2, retryOf: R1 }), userMessage: plain }));
  assert.deepEqual(s.messages, [u]);
  const t = msg(2, { role: 'tool', parentId: u.id, status: 'streaming', branch: { siblings: [mid(), mid()], index: 1 }, tool: { callId: 'c', name: 'x', input: {}, status: 'running' } });
  s = applyFrame(s, ev(2, 'tool.start', { runId: R2, message: t }));
  const ended = { ...t, status: 'complete', tool: { ...t.tool, status: 'ok' } };
  delete ended.branch;
  s = applyFrame(s, ev(3, 'tool.end', { runId: R2, message: ended }));
  assert.deepEqual(s.messages[1], { ...ended, branch: t.branch });
  const other = { siblings: [...siblings, mid()], index: 2 };
  s = applyFrame(s, ev(4, 'message.added', { message: { ...u, branch: other } }));
  assert.deepEqual(s.messages[0].branch, other);
});

test('events about a message not held (another branch\'s) are ignored', () => {
  const [u, a, t] = chain(
    msg(1, { role: 'user' }),
    msg(2, { status: 'streaming' }),
    msg(3, { role: 'tool', status: 'streaming', tool: { callId: 'c', name: 'x', input: {}, status: 'running' } }),
  );
  const base = follow({ lastSeq: 0, messages: [u, a, t], activeRun: run() });
  const other = mid();
  const otherTool = { ...t, id: other, tool: { ...t.tool, status: 'ok' } };
  for (const e of [
    ev(1, 'chat.delta', { messageId: other, text: 'x' }),
    ev(1, 'assistant.segment.ended', { messageId: other, status: 'complete' }),
    ev(1, 'tool.output', { messageId: other, text: 'x' }),
    ev(1, 'tool.update', { message: otherTool }),
    ev(1, 'tool.end', { message: otherTool }),
  ]) {
    const s = applyFrame(base, e);
    assert.equal(s.messages, base.messages, e.type);
    assert.equal(s.lastSeq, 1, e.type);
  }
});

test('branch.selected replaces the messages and hasMore; run state stays', () => {
  const [u, a] = chain(msg(1, { role: 'user' }), msg(2));
  const active = run({ runId: R2 });
  const base = follow({ lastSeq: 4, messages: [u, a], hasMore: false, activeRun: active, queued: [{ requestId: 'q', content: 'n', status: 'queued', createdAt: T }] });
  const [v, b, c] = chain(msg(1, { role: 'user', branch: { siblings: [u.id, mid()], index: 1 } }), msg(5), msg(6, { status: 'streaming', content: 'so far' }));
  // Given out of order and with a duplicate: held in position order, once.
  let s = applyFrame(base, { type: 'branch.selected', seq: 5, requestId: '', leafId: c.id, messages: [v, c, b, c], hasMore: true });
  assert.deepEqual(s.messages, [v, b, c]);
  assert.equal(s.hasMore, true);
  assert.equal(s.lastSeq, 5);
  assert.equal(s.activeRun, base.activeRun);
  assert.equal(s.queued, base.queued);
  // The streaming message's deltas now apply.
  s = applyFrame(s, ev(6, 'chat.delta', { runId: R2, messageId: c.id, text: ', more' }));
  assert.equal(s.messages[2].content, 'so far, more');
  // An empty path (right before an edited first question), then the edit's chat.started.
  s = applyFrame(s, { type: 'branch.selected', seq: 7, requestId: '', messages: [], hasMore: false });
  assert.deepEqual(s.messages, []);
  assert.equal(s.hasMore, false);
  const w = msg(7, { role: 'user', content: 'edited', branch: { siblings: [u.id, v.id, mid()], index: 2 } });
  s = applyFrame(s, ev(8, 'chat.started', { run: run(), userMessage: w }));
  assert.deepEqual(s.messages, [w]);
});

test('branchOf: index, count, prev and next among the alternatives; null without any', () => {
  const [x, y, z] = [mid(), mid(), mid()];
  assert.equal(branchOf(msg(1)), null);
  assert.equal(branchOf(msg(1, { branch: { siblings: [x], index: 0 } })), null);
  assert.deepEqual(branchOf(msg(1, { branch: { siblings: [x, y, z], index: 0 } })), { index: 0, count: 3, next: y });
  assert.deepEqual(branchOf(msg(1, { branch: { siblings: [x, y, z], index: 1 } })), { index: 1, count: 3, prev: x, next: z });
  assert.deepEqual(branchOf(msg(1, { branch: { siblings: [x, y, z], index: 2 } })), { index: 2, count: 3, prev: y });
});

test('assistant segments: started, deltas, ended (with error)', () => {
  const [u, r, a] = chain(msg(1, { role: 'user' }), msg(2, { status: 'streaming', content: '', kind: 'reasoning' }), msg(3, { status: 'streaming', content: '' }));
  const s = follow({ lastSeq: 0, messages: [u], activeRun: run() },
    ev(1, 'assistant.segment.started', { message: r }),
    ev(2, 'chat.delta', { messageId: r.id, text: 'think' }),
    ev(3, 'assistant.segment.ended', { messageId: r.id, status: 'complete' }),
    ev(4, 'assistant.segment.started', { message: a }),
    ev(5, 'chat.delta', { messageId: a.id, text: 'Part' }),
    ev(6, 'chat.delta', { messageId: a.id, text: 'ial' }),
    ev(7, 'assistant.segment.ended', { messageId: a.id, status: 'error', error: { code: 'model_stream_cut', message: 'cut' } }));
  assert.deepEqual(s.messages[1], { ...r, content: 'think', status: 'complete' });
  assert.deepEqual(s.messages[2], { ...a, content: 'Partial', status: 'error', error: { code: 'model_stream_cut', message: 'cut' } });
  assert.equal(s.lastSeq, 7);
});

test('a delta for an unknown message changes nothing but lastSeq', () => {
  const before = follow({ lastSeq: 0, messages: [msg(1)] });
  const s = applyFrame(before, ev(1, 'chat.delta', { messageId: mid(), text: 'x' }));
  assert.equal(s.messages, before.messages);
  assert.equal(s.lastSeq, 1);
});

test('tools: start, output (appended), end; approval: start awaiting, update, run.status', () => {
  const tool = (status, extra = {}) => ({ callId: 'demo-approval', name: 'demo_sandbox', input: { reason: 'x' }, status, ...extra });
  const [u, t] = chain(msg(1, { role: 'user' }), msg(2, { role: 'tool', status: 'streaming', tool: tool('awaiting_approval') }));
  let s = follow({ lastSeq: 0, messages: [u], activeRun: run() },
    ev(1, 'tool.start', { message: t }),
    ev(2, 'run.status', { run: run({ status: 'awaiting_approval', pendingApproval: { toolCallId: 'demo-approval', name: 'demo_sandbox', input: {} } }) }));
  assert.equal(s.activeRun.status, 'awaiting_approval');
  assert.deepEqual(pendingApprovals(s).map((m) => m.id), [t.id]);
  s = [
    ev(3, 'tool.update', { message: { ...t, tool: tool('running') } }),
    ev(4, 'run.status', { run: run() }),
    ev(5, 'tool.output', { messageId: t.id, text: 'line 1\n' }),
    ev(6, 'tool.output', { messageId: t.id, text: 'line 2\n' }),
  ].reduce(applyFrame, s);
  assert.equal(s.messages[1].tool.status, 'running');
  assert.equal(s.messages[1].tool.output, 'line 1\nline 2\n');
  assert.equal(s.activeRun.status, 'running');
  assert.deepEqual(pendingApprovals(s), []);
  const endMsg = { ...t, status: 'complete', tool: tool('ok', { output: 'line 1\nline 2\ndone' }) };
  s = applyFrame(s, ev(7, 'tool.end', { message: endMsg }));
  assert.deepEqual(s.messages[1], endMsg);
  assert.equal(s.messages.length, 2);
});

test('message.added adds a system notice', () => {
  const [u, n] = chain(msg(1, { role: 'user' }), msg(2, { role: 'system', content: 'the previous sandbox was stopped' }));
  const s = follow({ lastSeq: 0, messages: [u], activeRun: run() }, ev(1, 'message.added', { message: n }));
  assert.deepEqual(s.messages[1], n);
});

test('run.status: an active run replaces activeRun (usage too); an ended one (dismissed) becomes lastRun', () => {
  const usage = { inputTokens: 10, outputTokens: 2, contextTokens: 12, contextWindow: 64000 };
  let s = follow({ lastSeq: 0, activeRun: run() }, ev(1, 'run.status', { run: run({ usage }) }));
  assert.deepEqual(s.activeRun.usage, usage);
  assert.deepEqual(contextUsage(s), usage);
  // A resumed run is active again: lastRun clears.
  s = follow({ lastSeq: 0, lastRun: ended('interrupted', { resumable: true }) }, ev(1, 'run.status', { run: run() }));
  assert.equal(s.lastRun, null);
  assert.equal(s.activeRun.status, 'running');
  // Dismissed: the ended run, no longer resumable, stays ended.
  s = follow({ lastSeq: 0, lastRun: ended('error', { resumable: true, usage }) }, ev(1, 'run.status', { run: ended('error', { usage }) }));
  assert.equal(s.activeRun, null);
  assert.equal(s.lastRun.resumable, undefined);
  assert.equal(s.lastRun.status, 'error');
  assert.deepEqual(contextUsage(s), usage);
});

test('run.status with progress: runProgress is the active run\'s; an ended run keeps it on lastRun', () => {
  const progress = { step: 3, of: 7, label: 'pages' };
  assert.equal(runProgress(follow({ lastSeq: 0, activeRun: run() })), null);
  let s = follow({ lastSeq: 0, activeRun: run() }, ev(1, 'run.status', { run: run({ progress }) }));
  assert.deepEqual(runProgress(s), progress);
  s = follow({ lastSeq: 0, activeRun: run({ progress }) }, ev(1, 'run.status', { run: run({ progress: { step: 4, of: 7 } }) }));
  assert.deepEqual(runProgress(s), { step: 4, of: 7 });
  s = follow({ lastSeq: 0, activeRun: run({ progress }) }, ev(1, 'chat.done', { run: ended('done', { progress }) }));
  assert.equal(runProgress(s), null, 'no active run');
  assert.deepEqual(s.lastRun.progress, progress);
});

for (const [type, status] of [['chat.done', 'done'], ['chat.error', 'error'], ['chat.error', 'interrupted'], ['chat.cancelled', 'cancelled']]) {
  test(`${type} (${status}) ends the run: activeRun null, lastRun the run`, () => {
    const r = ended(status, status === 'cancelled' ? { cancelReason: 'user', resumable: true } : status === 'done' ? {} : { error: { code: 'x', message: 'y' } });
    const s = follow({ lastSeq: 0, activeRun: run() }, ev(1, type, { run: r }));
    assert.equal(s.activeRun, null);
    assert.deepEqual(s.lastRun, r);
    assert.equal(s.lastSeq, 1);
  });
}

test('replies leave the state alone', () => {
  const s = follow({ lastSeq: 3 });
  assert.equal(applyFrame(s, { type: 'ack', requestId: 'a', runId: R1, duplicate: false, status: 'running' }), s);
  assert.equal(applyFrame(s, { type: 'error', requestId: 'a', code: 'no_run', message: 'no' }), s);
  assert.equal(applyFrame(s, { type: 'history', requestId: 'a', messages: [msg(1)], hasMore: false }), s);
});

test('an unknown event type counts its seq and changes nothing else', () => {
  const s0 = follow({ lastSeq: 0, messages: [msg(1)] });
  const s = applyFrame(s0, ev(1, 'something.new', { x: 1 }));
  assert.equal(s.lastSeq, 1);
  assert.equal(s.messages, s0.messages);
});

test('applyHistory prepends older messages, dedups by id, takes hasMore from the reply', () => {
  const held = [msg(51), msg(52)];
  const older = Array.from({ length: 50 }, (_, i) => msg(i + 1));
  let s = follow({ messages: held, hasMore: true });
  s = applyHistory(s, { type: 'history', messages: [...older.slice(10), held[0]], hasMore: true });
  assert.deepEqual(s.messages.map((m) => m.position), Array.from({ length: 42 }, (_, i) => i + 11));
  assert.equal(s.hasMore, true);
  s = applyHistory(s, { type: 'history', messages: older.slice(0, 12), hasMore: false });
  assert.deepEqual(s.messages.map((m) => m.position), Array.from({ length: 52 }, (_, i) => i + 1));
  assert.equal(new Set(s.messages.map((m) => m.id)).size, 52);
  assert.equal(s.hasMore, false);
});

test('applyHistory takes only the older messages of the path held: a page of another branch changes nothing', () => {
  const path = chain(...Array.from({ length: 6 }, (_, i) => msg(i + 1)));
  let s = follow({ messages: path.slice(3), hasMore: true });
  // A reply read before a branch.selected: it ends at another message than the parent.
  const other = chain(msg(1), msg(2), msg(3, { id: mid() }));
  assert.equal(applyHistory(s, { type: 'history', messages: other, hasMore: false }), s);
  s = applyHistory(s, { type: 'history', messages: path.slice(0, 3), hasMore: false });
  assert.deepEqual(s.messages, path);
  assert.equal(s.hasMore, false);
});

test('applyFrame never modifies its input', () => {
  const a = msg(2, { status: 'streaming' });
  const t = msg(3, { role: 'tool', status: 'streaming', tool: { callId: 'c', name: 'n', input: {}, status: 'running' } });
  const s = follow({ lastSeq: 0, messages: [msg(1, { role: 'user' }), a, t], activeRun: run() });
  const frozen = JSON.stringify(s);
  deepFreeze(s);
  const events = [
    ev(1, 'chat.delta', { messageId: a.id, text: 'x' }),
    ev(2, 'assistant.segment.ended', { messageId: a.id, status: 'complete' }),
    ev(3, 'tool.output', { messageId: t.id, text: 'o' }),
    ev(4, 'tool.end', { message: { ...t, status: 'complete', tool: { ...t.tool, status: 'ok', output: 'o' } } }),
    ev(5, 'chat.done', { run: ended('done') }),
  ];
  let cur = s;
  for (const e of events) cur = applyFrame(cur, e);
  assert.equal(JSON.stringify(s), frozen);
  assert.equal(cur.messages[0], s.messages[0], 'an untouched message keeps its identity');
});

test('every event type of the protocol is handled', () => {
  assert.deepEqual([...EVENT_TYPES].sort(), [
    'approval.rules', 'assistant.segment.ended', 'assistant.segment.started', 'branch.selected', 'chat.cancelled', 'chat.delta', 'chat.done', 'chat.error',
    'chat.started', 'message.added', 'queue.updated', 'run.status', 'tool.end', 'tool.output', 'tool.start', 'tool.update',
  ]);
});

test('queued messages: the snapshot lists them, queue.updated replaces them', () => {
  const q = { requestId: 'q1', content: 'next', status: 'queued', createdAt: '2026-11-26T14:02:00Z' };
  let s = applyFrame(initialState(), snapshot({ epoch: 'e1', lastSeq: 3, queued: [q] }));
  assert.deepEqual(s.queued, [q]);
  s = applyFrame(s, { type: 'queue.updated', seq: 4, requestId: '', queued: [] });
  assert.deepEqual(s.queued, []);
  assert.equal(s.lastSeq, 4);
  s = applyFrame(s, snapshot({ epoch: 'e2', lastSeq: 1 }));
  assert.deepEqual(s.queued, [], 'a snapshot without the field has none');
});

function deepFreeze(o) {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}
