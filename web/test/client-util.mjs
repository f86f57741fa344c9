// Helpers of the client library's tests.

/** Resolves with the client's state once pred(state) holds (checked now and on every
 * notification); rejects after timeoutMs, a guard only: nothing here sleeps. */
export function waitFor(client, pred, timeoutMs = 10000, what = 'a condition') {
  return new Promise((resolve, reject) => {
    if (pred(client.state)) return resolve(client.state);
    const timer = setTimeout(() => {
      off();
      reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; state: ${JSON.stringify(summary(client.state))}`));
    }, timeoutMs);
    const off = client.subscribe((s) => {
      if (!pred(s)) return;
      clearTimeout(timer);
      off();
      resolve(s);
    });
  });
}

/** Rejects after ms with a message: a guard for promises that should settle. */
export function within(promise, ms, what) {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    }),
  ]);
}

export function summary(s) {
  return {
    sessionId: s.sessionId, epoch: s.epoch, lastSeq: s.lastSeq, connection: s.connection, closed: s.closed,
    messages: s.messages.length, activeRun: s.activeRun && s.activeRun.status, lastRun: s.lastRun && s.lastRun.status,
  };
}

/** A seeded PRNG (mulberry32): the same seed, the same choices. */
export function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Node 20 has WebSocket only with --experimental-websocket (npm test passes it). */
export function nodeWebSocket() {
  if (typeof globalThis.WebSocket !== 'function') {
    throw new Error('no WebSocket in this Node: run with --experimental-websocket (npm test does), or Node 22+');
  }
  return globalThis.WebSocket;
}

/**
 * A TCP proxy in front of chatd that can cut its connections: all at once (cut), after a
 * number of server-to-client bytes (budget, per connection), or stall them (stall: from
 * then on nothing more reaches the client; cut them after).
 */
export async function startProxy(targetPort, { budget = () => Infinity } = {}) {
  const net = await import('node:net');
  const pairs = new Set();
  const proxy = {
    budget,
    connections: 0,
    cuts: 0,
    cutAll(rst = false) {
      let n = 0;
      for (const p of [...pairs]) {
        kill(p, rst);
        n++;
      }
      if (n) proxy.cuts++;
      return n;
    },
    stall() {
      for (const p of pairs) p.stalled = true;
    },
    get open() {
      return pairs.size;
    },
    port: 0,
    close() {
      proxy.cutAll();
      return new Promise((r) => server.close(r));
    },
  };
  function kill(p, rst) {
    if (!pairs.delete(p)) return;
    if (rst && typeof p.client.resetAndDestroy === 'function') p.client.resetAndDestroy();
    else p.client.destroy();
    p.upstream.destroy();
  }
  // While held, new connections wait before reaching chatd (a slow network): the session
  // goes on without the client, so it may fall out of the server's replay ring.
  let held = null;
  proxy.hold = (ms) => {
    if (held) return;
    held = [];
    setTimeout(() => {
      const waiting = held;
      held = null;
      for (const start of waiting) start();
    }, ms);
  };
  const server = net.createServer((client) => {
    if (held) {
      client.pause();
      held.push(() => {
        if (client.destroyed) return;
        client.resume();
        accept(client);
      });
      return;
    }
    accept(client);
  });
  function accept(client) {
    proxy.connections++;
    const upstream = net.connect(targetPort, '127.0.0.1');
    const p = { client, upstream, stalled: false, down: 0, budget: proxy.budget() };
    pairs.add(p);
    client.on('data', (d) => upstream.write(d));
    upstream.on('data', (d) => {
      if (p.stalled || !pairs.has(p)) return;
      if (p.down + d.length > p.budget) {
        const part = d.subarray(0, Math.max(0, p.budget - p.down));
        if (part.length) client.write(part);
        proxy.cuts++;
        kill(p, false);
        return;
      }
      p.down += d.length;
      client.write(d);
    });
    const end = () => kill(p, false);
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  }
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  proxy.port = server.address().port;
  return proxy;
}

/** A session's messages as the database has them, in the shape of clientMessages. */
export async function dbMessages(srv, sessionId) {
  const rows = await srv.query(
    `SELECT id::text, position, role, kind, content, status, tool_output, tool_status, error_code
       FROM messages WHERE session_id = '${sessionId}' ORDER BY position`,
  );
  return rows.map((r) => ({ ...r, position: Number(r.position) }));
}

/** A client's messages, for comparing with dbMessages. */
export function clientMessages(state) {
  return state.messages.map((m) => ({
    id: m.id,
    position: m.position,
    role: m.role,
    kind: m.kind ?? 'text',
    content: m.content,
    status: m.status,
    tool_output: m.tool?.output ?? null,
    tool_status: m.tool?.status ?? null,
    error_code: m.error?.code ?? null,
  }));
}

/**
 * Watches every state a client shows: a message's content (and tool output) may only grow
 * (never shrink or change what was shown), and a message never disappears. Returns
 * {problems, states, check(final)}: check compares everything seen with the final
 * messages (each text seen must be a prefix of the final text: nothing shown twice,
 * nothing skipped).
 */
export function watchContent(client) {
  const seen = new Map(); // id -> [contents seen]
  const problems = [];
  let states = 0;
  const look = (s) => {
    states++;
    const ids = new Set();
    for (const m of s.messages) {
      ids.add(m.id);
      const text = `${m.content}\u0000${m.tool?.output ?? ''}`;
      const prev = seen.get(m.id);
      if (!prev) {
        seen.set(m.id, [text]);
        continue;
      }
      const last = prev[prev.length - 1];
      if (text === last) continue;
      const [c0, o0] = last.split('\u0000');
      if (!m.content.startsWith(c0) || !(m.tool?.output ?? '').startsWith(o0)) {
        problems.push(`message ${m.id}: shown ${JSON.stringify(last)}, then ${JSON.stringify(text)}`);
      }
      prev.push(text);
    }
    for (const id of seen.keys()) {
      if (!ids.has(id) && s.messages.length && s.messages[0].position <= (seenPos.get(id) ?? Infinity)) {
        problems.push(`message ${id} disappeared`);
      }
    }
    for (const m of s.messages) seenPos.set(m.id, m.position);
  };
  const seenPos = new Map();
  look(client.state);
  const off = client.subscribe(look);
  return {
    problems,
    get states() {
      return states;
    },
    stop: off,
    /** Every text seen of a message is a prefix of its final text. */
    check(finalMessages) {
      const finals = new Map(finalMessages.map((m) => [m.id, `${m.content}\u0000${m.tool_output ?? ''}`]));
      for (const [id, texts] of seen) {
        const f = finals.get(id);
        if (f === undefined) continue;
        const [fc, fo] = f.split('\u0000');
        for (const t of texts) {
          const [c, o] = t.split('\u0000');
          if (!fc.startsWith(c) || !fo.startsWith(o)) problems.push(`message ${id}: shown ${JSON.stringify(t)}, not a prefix of the stored ${JSON.stringify(f)}`);
        }
      }
      return problems;
    },
  };
}

/**
 * Checks a client's trace: every event applied has the seq after the one before (from the
 * last snapshot or resumed), so none was applied twice or skipped. Returns counts.
 */
export function checkTrace(trace) {
  let epoch = null;
  let cur = null;
  const applied = new Set();
  const counts = { snapshots: 0, resumed: 0, events: 0, deltas: 0, old: 0, gaps: 0, opens: 0 };
  for (const e of trace) {
    if (e.type === 'open') counts.opens++;
    if (e.type !== 'frame') continue;
    const f = e.frame;
    if (e.outcome === 'old') counts.old++;
    if (e.outcome === 'gap') counts.gaps++;
    if (e.outcome !== 'applied') continue;
    if (f.type === 'snapshot') {
      counts.snapshots++;
      epoch = f.epoch;
      cur = f.lastSeq;
    } else if (f.type === 'resumed') {
      counts.resumed++;
      if (cur === null) {
        // Resumed from a stored state: the trace starts here.
        epoch = f.epoch;
        cur = f.lastSeq;
      }
      if (f.epoch !== epoch || f.lastSeq !== cur) throw new Error(`resumed at ${f.epoch}/${f.lastSeq}, state at ${epoch}/${cur}`);
    } else {
      if (f.seq !== cur + 1) throw new Error(`applied seq ${f.seq} after ${cur}`);
      const key = `${epoch}/${f.seq}`;
      if (applied.has(key)) throw new Error(`applied ${key} twice`);
      applied.add(key);
      cur = f.seq;
      counts.events++;
      if (f.type === 'chat.delta') counts.deltas++;
    }
  }
  return counts;
}
