package store_test

import (
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/berth-dev/berth/store"
)

// openDB opens a new SQLite database in t's temporary directory.
func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "migrate.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func versions(t *testing.T, db *sql.DB) []int {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return vs
}

func tableExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestMigrateAppliesInOrderOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := openDB(t)
	files := fstest.MapFS{
		"m/0002_b.sql":   {Data: []byte(`ALTER TABLE a ADD COLUMN y INTEGER; CREATE TABLE b (x INTEGER);`)},
		"m/0001_a.sql":   {Data: []byte(`CREATE TABLE a (x INTEGER);`)},
		"m/README.md":    {Data: []byte(`not a migration`)},
		"other/0003.sql": {Data: []byte(`this is not SQL`)},
	}
	if err := store.Migrate(ctx, db, files, "m"); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if got := versions(t, db); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("versions = %v, want [1 2]", got)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO a (x, y) VALUES (1, 2)`); err != nil {
		t.Fatalf("0002 did not run after 0001: %v", err)
	}
	// Again: nothing re-runs (0001 would fail: table a exists).
	if err := store.Migrate(ctx, db, files, "m"); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	// A new migration is applied alone.
	files["m/0003_c.sql"] = &fstest.MapFile{Data: []byte(`CREATE TABLE c (x INTEGER);`)}
	if err := store.Migrate(ctx, db, files, "m"); err != nil {
		t.Fatalf("Migrate with 0003: %v", err)
	}
	if got := versions(t, db); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("versions = %v, want [1 2 3]", got)
	}
	if !tableExists(t, db, "c") {
		t.Error("table c of 0003 does not exist")
	}
}

func TestMigrateBadFileName(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := openDB(t)
	files := fstest.MapFS{
		"m/0001_a.sql":    {Data: []byte(`CREATE TABLE a (x INTEGER);`)},
		"m/add_users.sql": {Data: []byte(`CREATE TABLE users (x INTEGER);`)},
	}
	err := store.Migrate(ctx, db, files, "m")
	if err == nil {
		t.Fatal("Migrate with a migration named add_users.sql succeeded")
	}
	if !strings.Contains(err.Error(), "add_users.sql") {
		t.Errorf("error %q does not name the file add_users.sql", err)
	}
	// Migrations before the bad one stay applied; the bad one is not run.
	if got := versions(t, db); !slices.Equal(got, []int{1}) {
		t.Errorf("versions = %v, want [1]", got)
	}
	if tableExists(t, db, "users") {
		t.Error("the badly named migration ran")
	}
}

func TestMigrateFailingMigrationChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := openDB(t)
	files := fstest.MapFS{
		"m/0001_a.sql": {Data: []byte(`CREATE TABLE a (x INTEGER);`)},
		// The first statement works, the second fails: neither may stay.
		"m/0002_b.sql": {Data: []byte(`CREATE TABLE b (x INTEGER); INSERT INTO no_such_table VALUES (1);`)},
		"m/0003_c.sql": {Data: []byte(`CREATE TABLE c (x INTEGER);`)},
	}
	err := store.Migrate(ctx, db, files, "m")
	if err == nil {
		t.Fatal("Migrate with a failing migration succeeded")
	}
	if !strings.Contains(err.Error(), "0002_b.sql") {
		t.Errorf("error %q does not name the file 0002_b.sql", err)
	}
	if got := versions(t, db); !slices.Equal(got, []int{1}) {
		t.Errorf("versions = %v, want [1]", got)
	}
	if !tableExists(t, db, "a") {
		t.Error("table a of the applied migration 0001 is gone")
	}
	if tableExists(t, db, "b") {
		t.Error("table b of the failed migration 0002 exists: it was not rolled back")
	}
	if tableExists(t, db, "c") {
		t.Error("migration 0003 ran after 0002 failed")
	}

	// Once fixed, the rest applies.
	files["m/0002_b.sql"] = &fstest.MapFile{Data: []byte(`CREATE TABLE b (x INTEGER);`)}
	if err := store.Migrate(ctx, db, files, "m"); err != nil {
		t.Fatalf("Migrate after the fix: %v", err)
	}
	if got := versions(t, db); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("versions = %v, want [1 2 3]", got)
	}
}
