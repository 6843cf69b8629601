package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
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
	storetest.Exercise(t, storetest.Driver{
		Open: func(t *testing.T, path string) store.Store { return openAt(t, path) },
		StoredEvents: func(t *testing.T, path string) (oldest, newest uint64) {
			t.Helper()
			err := openRaw(t, path).QueryRowContext(t.Context(),
				`SELECT coalesce(min(seq), 0), coalesce(max(seq), 0) FROM events`).Scan(&oldest, &newest)
			if err != nil {
				t.Fatal(err)
			}
			return oldest, newest
		},
	})
}

// migrationVersions returns the versions of the migration files in
// migrations/, in order, and the files' names.
func migrationVersions(t *testing.T) (versions []int, names []string) {
	t.Helper()
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		prefix, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if err != nil {
			t.Fatalf("migration %s: name does not start with a number", e.Name())
		}
		versions, names = append(versions, v), append(names, e.Name())
	}
	if len(versions) == 0 {
		t.Fatal("no migrations found")
	}
	return versions, names
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
	want, _ := migrationVersions(t)

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

// migrateTo creates the database at path with the migrations up to
// version only, as an older Berth left it, and returns it open.
func migrateTo(t *testing.T, path string, version int) *sql.DB {
	t.Helper()
	versions, names := migrationVersions(t)
	old := fstest.MapFS{}
	for i, v := range versions {
		if v > version {
			break
		}
		data, err := os.ReadFile(filepath.Join("migrations", names[i]))
		if err != nil {
			t.Fatal(err)
		}
		old["migrations/"+names[i]] = &fstest.MapFile{Data: data}
	}
	db := openRaw(t, path)
	if err := store.Migrate(t.Context(), db, old, "migrations"); err != nil {
		t.Fatalf("Migrate to %04d: %v", version, err)
	}
	if got := appliedVersions(t, db); !slices.Equal(got, versions[:len(old)]) || got[len(got)-1] != version {
		t.Fatalf("schema_migrations at %04d = %v", version, got)
	}
	return db
}

// TestUpgradeFrom0010 opens a database whose job rows count an attempt
// from its assignment: the upgrade takes the attempt an assigned job is
// making out of its row, as Berth now writes it, and leaves every other
// count alone.
func TestUpgradeFrom0010(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	db := migrateTo(t, path, 10)
	for _, row := range []struct {
		job, state   string
		attempts     int
		attemptState string // of its one attempt, "" for none
	}{
		{"j-assigned", "pending", 2, "assigned"},
		{"j-requeued", "pending", 1, "lost"},
		{"j-running", "running", 1, "running"},
		{"j-queued", "pending", 0, ""},
		{"j-done", "succeeded", 1, "succeeded"},
	} {
		if _, err := db.ExecContext(ctx, `INSERT INTO jobs (id, queue, user_name, spec, state, reason, attempts, created_at, started_at,
			finished_at) VALUES (?, 'gpu', 'ada', '{}', ?, '', ?, 1, 0, 0)`, row.job, row.state, row.attempts); err != nil {
			t.Fatal(err)
		}
		if row.attemptState == "" {
			continue
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO attempts (id, job_id, task_index, worker_id, host, gpus, state, reason, created_at,
			started_at, finished_at) VALUES (?, ?, 0, 'w1', 'gpu-1', '[0]', ?, '', 1, 0, 0)`, "a-"+row.job, row.job, row.attemptState); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s := openAt(t, path)
	defer s.Close()
	got := map[string]int{}
	for _, id := range []string{"j-assigned", "j-requeued", "j-running", "j-queued", "j-done"} {
		j, err := s.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got[id] = j.Attempts
	}
	want := map[string]int{"j-assigned": 1, "j-requeued": 1, "j-running": 1, "j-queued": 0, "j-done": 1}
	if !maps.Equal(got, want) {
		t.Errorf("attempts after the upgrade = %v, want %v", got, want)
	}
}

// TestUpgradeFrom0011 opens a database whose job rows keep their parent
// in the spec only: the upgrade fills the parent column from it, so that
// listing a job's children finds them.
func TestUpgradeFrom0011(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	db := migrateTo(t, path, 11)
	for id, spec := range map[string]string{"j-child": `{"command":["true"],"parent":"j-root"}`, "j-root": `{"command":["true"]}`} {
		if _, err := db.ExecContext(ctx, `INSERT INTO jobs (id, queue, user_name, spec, state, reason, attempts, created_at, started_at,
			finished_at) VALUES (?, 'gpu', 'ada', ?, 'pending', '', 0, 1, 0, 0)`, id, []byte(spec)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s := openAt(t, path)
	defer s.Close()
	for parent, want := range map[string]int{"j-root": 1, "j-child": 0} {
		jobs, err := s.Jobs(ctx, store.JobFilter{Parent: parent})
		if err != nil || len(jobs) != want || want == 1 && (jobs[0].ID != "j-child" || jobs[0].Parent != "j-root") {
			t.Errorf("children of %s after the upgrade: %v, %v; want %d", parent, jobs, err, want)
		}
	}
}

// TestUpgradeFrom0003 opens a database that has migrations up to 0003 and
// rows written then: the store upgrades it, keeps the rows (with no
// progress) and takes worker controls, progress and events.
func TestUpgradeFrom0003(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	versions, _ := migrationVersions(t)
	db := migrateTo(t, path, 3)
	at := time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)
	if _, err := db.ExecContext(ctx, `INSERT INTO attempts (id, job_id, task_index, worker_id, host, gpus, state, exit_code,
		reason, created_at, started_at, finished_at, port) VALUES ('a1', 'j1', 0, 'w1', 'gpu-1', '[0,1]', 'running', NULL, '', ?, ?, 0, 29500)`,
		at.UnixNano(), at.UnixNano()+1); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := openAt(t, path)
	defer s.Close()
	if got := appliedVersions(t, openRaw(t, path)); !slices.Equal(got, versions) {
		t.Fatalf("schema_migrations after upgrade = %v, want %v", got, versions)
	}
	want := &berth.Attempt{ID: "a1", JobID: "j1", WorkerID: "w1", Host: "gpu-1", GPUs: []int{0, 1}, Port: 29500,
		State: berth.AttemptRunning, CreatedAt: at, StartedAt: at.Add(1)}
	as, err := s.Attempts(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || !reflect.DeepEqual(as[0], want) {
		t.Fatalf("Attempts after upgrade = %+v, want [%+v]", as, want)
	}

	off := &berth.WorkerControl{Host: "gpu-1", Queue: berth.AllQueues, DesiredState: berth.DesiredOff, StopPolicy: berth.StopHard,
		RequestedBy: "ops", UpdatedAt: at}
	event := &berth.Event{Seq: 1, Time: at, Type: "worker.control", Host: "gpu-1", Queue: berth.AllQueues, Desired: berth.DesiredOff}
	if err := s.Write(ctx, &store.Batch{Controls: []*berth.WorkerControl{off},
		Progress: []store.AttemptProgress{{AttemptID: "a1", Progress: "step 3"}}, Events: []*berth.Event{event}}); err != nil {
		t.Fatalf("Write after upgrade: %v", err)
	}
	want.Progress = "step 3"
	a, err := s.LoadActive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Attempts, []*berth.Attempt{want}) || !reflect.DeepEqual(a.Controls, []*berth.WorkerControl{off}) ||
		!reflect.DeepEqual(a.Events, []*berth.Event{event}) {
		t.Errorf("LoadActive after upgrade: attempts %+v, controls %+v, events %+v; want [%+v], [%+v], [%+v]",
			a.Attempts, a.Controls, a.Events, want, off, event)
	}
}

// TestWorkerControlsPlainSQL writes controls as an operator would, with
// plain SQL and the table's defaults: the store reads them back, and the
// schema refuses a desired state other than on or off.
func TestWorkerControlsPlainSQL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	s := openAt(t, path)
	defer s.Close()
	db := openRaw(t, path)
	if _, err := db.ExecContext(ctx, `INSERT INTO worker_controls (host_label, queue, desired_state) VALUES ('spark', 'gpu', 'off')`); err != nil {
		t.Fatalf("plain-SQL insert: %v", err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO worker_controls (host_label, queue, desired_state, stop_policy) VALUES ('spark', 'cpu', 'maybe', 'hard')`); err == nil {
		t.Error("insert of desired_state 'maybe' succeeded, want a CHECK failure")
	}
	cs, err := s.WorkerControls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []*berth.WorkerControl{{Host: "spark", Queue: "gpu", DesiredState: berth.DesiredOff, StopPolicy: berth.StopHard}}
	if !reflect.DeepEqual(cs, want) {
		t.Errorf("WorkerControls = %+v, want %+v", cs, want)
	}
}

// TestOpenNewerSchema opens a database that a newer Berth has migrated:
// Open refuses it, saying so, and changes nothing.
func TestOpenNewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "berth.db")
	if err := openAt(t, path).Close(); err != nil {
		t.Fatal(err)
	}
	versions, _ := migrationVersions(t)
	known := versions[len(versions)-1]
	db := openRaw(t, path)
	if _, err := db.ExecContext(t.Context(), `INSERT INTO schema_migrations (version) VALUES (?)`, known+3); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(t.Context(), path)
	if err == nil {
		s.Close()
		t.Fatal("Open of a database with a newer schema succeeded")
	}
	want := fmt.Sprintf("database schema is at version %d, newer than this berth knows (%d): upgrade berth or use the matching store", known+3, known)
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
		t.Errorf("Open error %q does not name the path %s and say %q", err, path, want)
	}
	if got := appliedVersions(t, db); !slices.Equal(got, append(versions, known+3)) {
		t.Errorf("schema_migrations = %v, want %v", got, append(versions, known+3))
	}
}

// TestArraySpecStoredOnce: the jobs of an array written in one batch
// store the spec once, in the array's first job's row (the conformance
// test ArraySpecStoredOnce reads them back), and a job whose spec
// differs stores its own.
func TestArraySpecStoredOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "berth.db")
	s := openAt(t, path)
	defer s.Close()
	var jobs []*berth.Job
	for i := range 5 {
		j := &berth.Job{ID: fmt.Sprintf("01JARRAY%017d", i), JobSpec: berth.DefaultJobSpec(), State: berth.JobPending, ArrayIndex: &i}
		j.User, j.Command = "alice", berth.Argv{"true"}
		jobs = append(jobs, j)
	}
	jobs[3].Env = map[string]string{"K": "v"}
	if err := s.Write(t.Context(), &store.Batch{Jobs: jobs}); err != nil {
		t.Fatal(err)
	}
	var shared, own int
	err := openRaw(t, path).QueryRowContext(t.Context(),
		`SELECT count(*) FILTER (WHERE array_id = ?), count(*) FILTER (WHERE array_id IS NULL) FROM jobs`, jobs[0].ID).Scan(&shared, &own)
	if err != nil {
		t.Fatal(err)
	}
	if shared != 3 || own != 2 {
		t.Errorf("%d rows share the first job's spec and %d store their own, want 3 and 2 (the first, and the one whose spec differs)", shared, own)
	}
}
