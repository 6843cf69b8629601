package store

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// MigrationTarget is the database Migrate runs on: a *sql.DB, or a
// *sql.Conn where every statement must use one connection (one that holds
// a PostgreSQL advisory lock).
type MigrationTarget interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Migrate applies, in order and each in its own transaction, the numbered
// migrations in directory dir of files ("0001_init.sql", "0002_….sql") that db has not yet
// applied, recording each in the schema_migrations table. It returns the
// first error, naming the file; migrations already applied stay applied.
// It changes nothing and returns an error if db has applied a migration
// newer than any in files: that database belongs to a newer Berth.
func Migrate(ctx context.Context, db MigrationTarget, files fs.FS, dir string) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var current int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("migrate: read version: %w", err)
	}
	names, err := fs.Glob(files, path.Join(dir, "*.sql"))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	sort.Strings(names)
	versions := make([]int, len(names)) // -1: the name does not start with a number
	known := 0
	for i, name := range names {
		prefix, _, _ := strings.Cut(path.Base(name), "_")
		if versions[i], err = strconv.Atoi(prefix); err != nil {
			versions[i] = -1
		}
		known = max(known, versions[i])
	}
	if current > known {
		return fmt.Errorf("migrate: database schema is at version %d, newer than this berth knows (%d): upgrade berth or use the matching store", current, known)
	}
	for i, name := range names {
		if versions[i] < 0 {
			return fmt.Errorf("migrate: %s: name must start with a number", name)
		}
		if versions[i] <= current {
			continue
		}
		body, err := fs.ReadFile(files, name)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if err := applyMigration(ctx, db, versions[i], string(body)); err != nil {
			return fmt.Errorf("migrate: %s: %w", name, err)
		}
	}
	return nil
}

func applyMigration(ctx context.Context, db MigrationTarget, version int, body string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, body); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version) VALUES (`+strconv.Itoa(version)+`)`); err != nil {
		return err
	}
	return tx.Commit()
}
