package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/store/storetest"
)

// openAt opens the store at path, failing t if it cannot.
func openAt(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		return openAt(t, filepath.Join(t.TempDir(), "berth.db"))
	})
}

func TestDurable(t *testing.T) {
	t.Parallel()
	storetest.RunDurable(t, func(t *testing.T, path string) store.Store {
		return openAt(t, path)
	})
}

// migrationVersions returns the versions of the migration files in
// migrations/, in order.
func migrationVersions(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	var versions []int
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		prefix, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if err != nil {
			t.Fatalf("migration %s: name does not start with a number", e.Name())
		}
		versions = append(versions, v)
	}
	if len(versions) == 0 {
		t.Fatal("no migrations found")
	}
	return versions
}

// appliedVersions returns the rows of schema_migrations of the database at
// path, opened without the store.
func appliedVersions(t *testing.T, db *sql.DB) []int {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var versions []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return versions
}

func openRaw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestReopenDoesNotRerunMigrations(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	want := migrationVersions(t)

	var ids berth.IDGen
	job := &berth.Job{ID: ids.New(time.Now()), JobSpec: berth.JobSpec{Queue: "gpu", Command: berth.Argv{"true"}},
		State: berth.JobPending, CreatedAt: time.Now().UTC()}
	s := openAt(t, path)
	if err := s.Write(ctx, &store.Batch{Jobs: []*berth.Job{job}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db := openRaw(t, path)
	if got := appliedVersions(t, db); !slices.Equal(got, want) {
		t.Fatalf("schema_migrations after first open = %v, want %v", got, want)
	}

	for i := range 2 {
		s = openAt(t, path)
		got, err := s.Job(ctx, job.ID)
		if err != nil {
			t.Fatalf("reopen %d: Job: %v", i, err)
		}
		if got.ID != job.ID || got.Queue != job.Queue || !got.CreatedAt.Equal(job.CreatedAt) {
			t.Errorf("reopen %d: Job = %+v, want %+v", i, got, job)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := appliedVersions(t, db); !slices.Equal(got, want) {
			t.Fatalf("schema_migrations after reopen %d = %v, want %v (one row per migration)", i, got, want)
		}
	}

	// Migrating an up-to-date database again changes nothing.
	if err := store.Migrate(ctx, db, os.DirFS("."), "migrations"); err != nil {
		t.Fatalf("Migrate of an up-to-date database: %v", err)
	}
	if got := appliedVersions(t, db); !slices.Equal(got, want) {
		t.Fatalf("schema_migrations after Migrate = %v, want %v", got, want)
	}
}

func TestOpenInMissingDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "no", "such")
	path := filepath.Join(dir, "berth.db")
	s, err := sqlite.Open(context.Background(), path)
	if err == nil {
		s.Close()
		t.Fatalf("Open(%s) succeeded, want an error", path)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("Open error %q does not name the path %s", err, path)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Open created %s (stat: %v)", dir, err)
	}
}

func TestOpenNotADatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "berth.db")
	junk := []byte(strings.Repeat("this is not an SQLite database\n", 200))
	if err := os.WriteFile(path, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(context.Background(), path)
	if err == nil {
		s.Close()
		t.Fatalf("Open of a file that is not a database succeeded")
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("Open error %q does not name the path %s", err, path)
	}
	if got, _ := os.ReadFile(path); string(got) != string(junk) {
		t.Errorf("Open changed the file that is not a database")
	}
}
