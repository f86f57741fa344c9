// Where a ChatClient keeps what makes a reload cheap: per session, ONE item holding the
// applied state together with the epoch and lastSeq it corresponds to, so a stored state
// is only ever used with its own position in the event sequence.
import type { ChatState } from './state.js';
import type { Message, Run } from './protocol.js';

/** The subset of the Web Storage API the client uses (sessionStorage and localStorage fit). */
export interface StorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

/** A StorageLike in memory. */
export class MemoryStorage implements StorageLike {
  private items = new Map<string, string>();
  getItem(key: string): string | null {
    return this.items.get(key) ?? null;
  }
  setItem(key: string, value: string): void {
    this.items.set(key, String(value));
  }
  removeItem(key: string): void {
    this.items.delete(key);
  }
  clear(): void {
    this.items.clear();
  }
}

/** The page's in-memory fallback, shared by the clients of this page (this module). */
const pageMemory = new MemoryStorage();

/**
 * The storage a client uses: the one given; a private MemoryStorage for null (nothing
 * outlives the client); else sessionStorage when it is there and works, else memory
 * shared by this page's clients.
 */
export function resolveStorage(storage: StorageLike | null | undefined): StorageLike {
  if (storage) return storage;
  if (storage === null) return new MemoryStorage();
  try {
    const s = (globalThis as { sessionStorage?: StorageLike }).sessionStorage;
    if (s) {
      const probe = 'chatd.v1.probe';
      s.setItem(probe, '1');
      s.removeItem(probe);
      return s;
    }
  } catch {
    // Access denied (a sandboxed frame, storage disabled): use memory.
  }
  return pageMemory;
}

export const KEY_PREFIX = 'chatd.v1.';
/** The key of a session's stored state. */
export function sessionKey(sessionId: string): string {
  return `${KEY_PREFIX}session.${sessionId}`;
}
/** The key naming the session this storage followed last. */
export const LAST_SESSION_KEY = `${KEY_PREFIX}lastSession`;
/** The key listing the sessions with a stored state, most recent first. */
export const INDEX_KEY = `${KEY_PREFIX}sessions`;
/** How many sessions keep a stored state; older ones are removed. */
export const MAX_STORED_SESSIONS = 20;

/** What is stored per session: the state as of (epoch, lastSeq). */
export interface StoredSession {
  v: 1;
  sessionId: string;
  epoch: string;
  lastSeq: number;
  messages: Message[];
  hasMore: boolean;
  activeRun: Run | null;
  lastRun: Run | null;
}

/** Reads a session's stored state; null when absent or unreadable (it is then removed). */
export function loadSession(storage: StorageLike, sessionId: string): StoredSession | null {
  let raw: string | null;
  try {
    raw = storage.getItem(sessionKey(sessionId));
  } catch {
    return null;
  }
  if (!raw) return null;
  try {
    const s = JSON.parse(raw) as StoredSession;
    if (
      s &&
      s.v === 1 &&
      s.sessionId === sessionId &&
      typeof s.epoch === 'string' &&
      s.epoch !== '' &&
      Number.isInteger(s.lastSeq) &&
      s.lastSeq >= 0 &&
      Array.isArray(s.messages) &&
      typeof s.hasMore === 'boolean'
    ) {
      return s;
    }
  } catch {
    // fall through
  }
  forgetSession(storage, sessionId);
  return null;
}

/**
 * Stores a state (which must have an epoch). Returns false when the write failed (quota
 * exceeded, storage gone): the stale item is then removed, so the next load falls back
 * to a snapshot rather than trusting anything half-written.
 */
export function saveSession(storage: StorageLike, state: ChatState): boolean {
  if (!state.sessionId || !state.epoch) return false;
  const item: StoredSession = {
    v: 1,
    sessionId: state.sessionId,
    epoch: state.epoch,
    lastSeq: state.lastSeq,
    messages: state.messages,
    hasMore: state.hasMore,
    activeRun: state.activeRun,
    lastRun: state.lastRun,
  };
  const key = sessionKey(state.sessionId);
  try {
    storage.setItem(key, JSON.stringify(item));
  } catch {
    try {
      storage.removeItem(key);
    } catch {
      // nothing more to do
    }
    return false;
  }
  touchIndex(storage, state.sessionId);
  return true;
}

/** Removes a session's stored state. */
export function forgetSession(storage: StorageLike, sessionId: string): void {
  try {
    storage.removeItem(sessionKey(sessionId));
    const index = readIndex(storage).filter((id) => id !== sessionId);
    storage.setItem(INDEX_KEY, JSON.stringify(index));
    if (storage.getItem(LAST_SESSION_KEY) === sessionId) storage.removeItem(LAST_SESSION_KEY);
  } catch {
    // best effort
  }
}

export function rememberLastSession(storage: StorageLike, sessionId: string): void {
  try {
    storage.setItem(LAST_SESSION_KEY, sessionId);
  } catch {
    // best effort
  }
}

export function lastSession(storage: StorageLike): string | null {
  try {
    return storage.getItem(LAST_SESSION_KEY);
  } catch {
    return null;
  }
}

function readIndex(storage: StorageLike): string[] {
  try {
    const v = JSON.parse(storage.getItem(INDEX_KEY) ?? '[]');
    return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
  } catch {
    return [];
  }
}

/** Moves a session to the front of the index and drops the states of the oldest. */
function touchIndex(storage: StorageLike, sessionId: string): void {
  try {
    const index = readIndex(storage);
    if (index[0] === sessionId) return;
    const next = [sessionId, ...index.filter((id) => id !== sessionId)];
    for (const old of next.splice(MAX_STORED_SESSIONS)) storage.removeItem(sessionKey(old));
    storage.setItem(INDEX_KEY, JSON.stringify(next));
  } catch {
    // best effort: the index only bounds how much is kept
  }
}
