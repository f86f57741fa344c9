import type { ChatState } from './state.js';
import type { Message, Run } from './protocol.js';
/** The subset of the Web Storage API the client uses (sessionStorage and localStorage fit). */
export interface StorageLike {
    getItem(key: string): string | null;
    setItem(key: string, value: string): void;
    removeItem(key: string): void;
}
/** A StorageLike in memory. */
export declare class MemoryStorage implements StorageLike {
    private items;
    getItem(key: string): string | null;
    setItem(key: string, value: string): void;
    removeItem(key: string): void;
    clear(): void;
}
/**
 * The storage a client uses: the one given; a private MemoryStorage for null (nothing
 * outlives the client); else sessionStorage when it is there and works, else memory
 * shared by this page's clients.
 */
export declare function resolveStorage(storage: StorageLike | null | undefined): StorageLike;
export declare const KEY_PREFIX = "chatd.v1.";
/** The key of a session's stored state. */
export declare function sessionKey(sessionId: string): string;
/** The key naming the session this storage followed last. */
export declare const LAST_SESSION_KEY = "chatd.v1.lastSession";
/** The key listing the sessions with a stored state, most recent first. */
export declare const INDEX_KEY = "chatd.v1.sessions";
/** How many sessions keep a stored state; older ones are removed. */
export declare const MAX_STORED_SESSIONS = 20;
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
export declare function loadSession(storage: StorageLike, sessionId: string): StoredSession | null;
/**
 * Stores a state (which must have an epoch). Returns false when the write failed (quota
 * exceeded, storage gone): the stale item is then removed, so the next load falls back
 * to a snapshot rather than trusting anything half-written.
 */
export declare function saveSession(storage: StorageLike, state: ChatState): boolean;
/** Removes a session's stored state. */
export declare function forgetSession(storage: StorageLike, sessionId: string): void;
export declare function rememberLastSession(storage: StorageLike, sessionId: string): void;
export declare function lastSession(storage: StorageLike): string | null;
