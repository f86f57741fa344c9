package queries

// HotStatements are the statements on a run's path to its first token and its writes:
// a run's start (and its owner's lock), a message's insert and update, a run's update.
// They are prepared when a connection opens (store.PrepareHot), so a connection's first
// run start costs one round trip, not two. (Written by hand: sqlc leaves this file.)
var HotStatements = []string{runStart, runOwnerLock, messageInsert, messageUpdate, runUpdate}
