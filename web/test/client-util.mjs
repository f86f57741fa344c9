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
