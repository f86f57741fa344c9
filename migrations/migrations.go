package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sort"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

//go:embed *.sql
var files embed.FS

// Up applies every migration that the database behind pool has not had yet. It holds
// golang-migrate's advisory lock while it works, so several chatd processes starting at
// once apply each migration exactly once. A database that is already current is not an
// error.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	src, err := iofs.New(files, ".")
	if err != nil {
		return fmt.Errorf("read embedded migrations: %w", err)
	}
	// Closing this *sql.DB leaves the pool open.
	db := stdlib.OpenDBFromPool(pool)
	driver, err := migratepgx.WithInstance(db, &migratepgx.Config{})
	if err != nil {
		_ = db.Close()
		return fmt.Errorf("open migration driver: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		_ = driver.Close()
		return fmt.Errorf("set up migrations: %w", err)
	}
	defer m.Close()

	// golang-migrate takes no context; GracefulStop lets a cancelled start-up stop
	// between two migrations instead of waiting for all of them.
	stop := context.AfterFunc(ctx, func() {
		select {
		case m.GracefulStop <- true:
		default:
		}
	})
	defer stop()

	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return ctx.Err()
}

// Latest returns the version of the newest migration: what Up brings a database to.
func Latest() uint {
	names, err := fs.Glob(files, "*.up.sql")
	if err != nil {
		panic(err) // the pattern is constant and valid
	}
	var latest uint
	for _, name := range names {
		var v uint
		if _, err := fmt.Sscanf(name, "%d_", &v); err == nil && v > latest {
			latest = v
		}
	}
	return latest
}

// Hash identifies the set of migrations: it changes whenever a file is added or edited.
// Tests name their migrated template database after it.
func Hash() string {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		panic(err) // the pattern is constant and valid
	}
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			panic(err) // embedded files are always readable
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}
