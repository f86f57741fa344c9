// Package store is chatd's PostgreSQL layer: sessions, runs and messages, and the
// conversation list (one user's sessions by keyset; a deleted session's tombstone, which
// every run start refuses); the sessions' leases among several nodes (a row per session,
// expiring by the database's clock, whose token fences every write of an actor); and the
// grouping of many sessions' writes into one batch (group.go).
//
// It is the only package that imports queries (the sqlc-generated code). It converts rows
// to the domain types of package chat (chat.Session, chat.Run, chat.Message), maps
// pgx.ErrNoRows to ErrNotFound and unique violations to ErrConflict, and offers InTx for
// work that must be atomic. Updates name the statuses they expect the row in and return
// ErrStale when it has moved on, so a late writer cannot undo a later one. Metrics is a
// pgx tracer that times every statement on a pool by its sqlc name. It knows nothing of
// actors, sockets or the wire protocol; callers (the conversation's journal) decide when
// to write.
package store
