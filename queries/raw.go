package queries

// StreamLogSyncSQL is StreamLogSync's statement, for the store, which sends it with the
// parameters it encodes itself (store/streamlog.go says why). (Written by hand: sqlc
// leaves this file.)
const StreamLogSyncSQL = streamLogSync
