package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// binaryFormats says that every parameter of an execParams statement is in the binary
// format.
var binaryFormats = [...]int16{1, 1, 1, 1, 1, 1, 1, 1}

// execParams runs sql with parameters the store encoded itself (in the binary format,
// of the types oids), on a connection of the pool or in the transaction, and traces it
// like every statement pgx runs (the statement metrics). The parameters go straight
// into the connection's message, without pgx's encoding. It always uses the extended
// protocol's unnamed statement (whatever the connection's default_query_exec_mode),
// which every pooler in front of PostgreSQL passes through.
func (s *Store) execParams(ctx context.Context, sql string, values [][]byte, oids []uint32) (err error) {
	if len(values) > len(binaryFormats) || len(oids) != len(values) {
		return fmt.Errorf("execParams: %d parameters, %d types", len(values), len(oids))
	}
	var conn *pgx.Conn
	switch db := s.db.(type) {
	case *pgxpool.Pool:
		c, err := db.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		conn = c.Conn()
	case pgx.Tx:
		conn = db.Conn()
	default:
		return fmt.Errorf("execParams: no connection in a %T", s.db)
	}
	if t := s.tracer; t != nil {
		ctx = t.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: sql})
		var tag pgconn.CommandTag
		defer func() { t.TraceQueryEnd(ctx, conn, pgx.TraceQueryEndData{CommandTag: tag, Err: err}) }()
		tag, err = conn.PgConn().ExecParams(ctx, sql, values, oids, binaryFormats[:len(values)], nil).Close()
		return err
	}
	_, err = conn.PgConn().ExecParams(ctx, sql, values, oids, binaryFormats[:len(values)], nil).Close()
	return err
}
