package store_test

import (
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	_ "modernc.org/sqlite"             // registers the "sqlite" driver

	"github.com/berth-dev/berth/postgres/pgtest"
	"github.com/berth-dev/berth/store"
)

// databases are, for each store, its database/sql driver and where it
// gets a new, empty database. PostgreSQL's needs TEST_DATABASE_URL (see
// pgtest).
var databases = []struct {
	name, driver string
	source       func(t *testing.T) string
}{
	{"sqlite", "sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "migrate.db") }},
	{"postgres", "pgx", func(t *testing.T) string { return pgtest.NewDatabase(t) }},
}

// onEachDatabase runs test as a parallel subtest of t for each driver,
// with a new, empty database of it.
func onEachDatabase(t *testing.T, test func(t *testing.T, db *sql.DB)) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db, err := sql.Open(d.driver, d.source(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			test(t, db)
		})
	}
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

// tableExists reports whether table name can be queried.
func tableExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT * FROM `+name+` WHERE 1 = 0`)
	if err != nil {
		return false
	}
	rows.Close()
	return true
}

func TestMigrateAppliesInOrderOnce(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, db *sql.DB) {
		ctx := t.Context()
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
	})
}

func TestMigrateBadFileName(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, db *sql.DB) {
		ctx := t.Context()
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
	})
}

func TestMigrateFailingMigrationChangesNothing(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, db *sql.DB) {
		ctx := t.Context()
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
	})
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, func(t *testing.T, db *sql.DB) {
		ctx := t.Context()
		files := fstest.MapFS{
			"m/0001_a.sql": {Data: []byte(`CREATE TABLE a (x INTEGER);`)},
			"m/0002_b.sql": {Data: []byte(`CREATE TABLE b (x INTEGER);`)},
		}
		if err := store.Migrate(ctx, db, files, "m"); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		// A newer Berth applied migrations up to 7; this one knows up to 3.
		if _, err := db.ExecContext(ctx, `INSERT INTO schema_migrations (version) VALUES (7)`); err != nil {
			t.Fatal(err)
		}
		files["m/0003_c.sql"] = &fstest.MapFile{Data: []byte(`CREATE TABLE c (x INTEGER);`)}
		err := store.Migrate(ctx, db, files, "m")
		const want = "database schema is at version 7, newer than this berth knows (3): upgrade berth or use the matching store"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Migrate of a newer schema: error %v, want one containing %q", err, want)
		}
		if got := versions(t, db); !slices.Equal(got, []int{1, 2, 7}) {
			t.Errorf("versions = %v, want [1 2 7]", got)
		}
		if tableExists(t, db, "c") {
			t.Error("migration 0003 ran against a newer schema")
		}
	})
}
