package store

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// AfterConnect readies a new pool connection (pgxpool's AfterConnect): its uuid encoding
// (RegisterTypes) and its prepared statements (PrepareHot).
func AfterConnect(ctx context.Context, conn *pgx.Conn) error {
	RegisterTypes(conn.TypeMap())
	return PrepareHot(ctx, conn)
}

// RegisterTypes makes m encode github.com/google/uuid values as PostgreSQL's uuid
// directly, from their 16 bytes. Without it pgx calls their Value, a string, and parses
// that back (making an error on the way) for every uuid it sends: a few per statement,
// but thousands in an interval of the stream log, which sends two uuid arrays of a row
// per streaming message.
func RegisterTypes(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapUUIDEncodePlan}, m.TryWrapEncodePlanFuncs...)
}

func tryWrapUUIDEncodePlan(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if v, ok := value.(uuid.UUID); ok {
		return &uuidEncodePlan{}, pgtype.UUID{Bytes: v, Valid: true}, true
	}
	return nil, nil, false
}

// uuidEncodePlan encodes a uuid.UUID as the pgtype.UUID of its bytes.
type uuidEncodePlan struct{ next pgtype.EncodePlan }

func (p *uuidEncodePlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidEncodePlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(pgtype.UUID{Bytes: value.(uuid.UUID), Valid: true}, buf)
}
