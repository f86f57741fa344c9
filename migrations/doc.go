// Package migrations holds chatd's schema as golang-migrate SQL files, embedded in the
// binary, and applies them at start-up.
//
// Files are named 000001_name.up.sql / 000001_name.down.sql. sqlc reads the same files
// (the .up.sql ones) as the schema it generates queries against, so a migration is the
// only place a table is described. This package knows nothing of the queries.
package migrations
