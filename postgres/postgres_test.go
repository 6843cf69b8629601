package postgres_test

import (
	"context"
	"errors"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/postgres"
	"github.com/berth-dev/berth/postgres/pgtest"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/store/storetest"
)

// openAt opens the store at url, failing t if it cannot.
func openAt(t *testing.T, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// connect opens a connection to url outside Berth, as another program
// sharing the database would, closed when t ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// openWithConn opens the store on a new database, and a connection to it
// outside Berth; both are closed when t ends.
func openWithConn(t *testing.T) (*postgres.Store, *pgx.Conn) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	s := openAt(t, url)
	t.Cleanup(func() { s.Close() })
	return s, connect(t, url)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	databases := map[string]string{} // path → URL
	database := func(t *testing.T, path string) string {
		mu.Lock()
		defer mu.Unlock()
		url, ok := databases[path]
		if !ok {
			url = pgtest.NewDatabase(t)
			databases[path] = url
		}
		return url
	}
	storetest.Exercise(t, storetest.Driver{
		Open: func(t *testing.T, path string) store.Store { return openAt(t, database(t, path)) },
		StoredEvents: func(t *testing.T, path string) (oldest, newest uint64) {
			t.Helper()
			err := connect(t, database(t, path)).QueryRow(t.Context(),
				`SELECT coalesce(min(seq), 0), coalesce(max(seq), 0) FROM events`).Scan(&oldest, &newest)
			if err != nil {
				t.Fatal(err)
			}
			return oldest, newest
		},
	})
}

// knownVersion returns the version of the last migration in migrations/.
func knownVersion(t *testing.T) int {
	t.Helper()
	return slices.Max(migrationVersions(t))
}

// migrationVersions returns the versions of the migrations in
// migrations/, in order. Numbers may be skipped: a branch takes the number
// its migration is to have once the branches before it are merged.
func migrationVersions(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	var versions []int
	for _, e := range entries {
		prefix, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if err != nil {
			t.Fatalf("migration %s: name does not start with a number", e.Name())
		}
		versions = append(versions, v)
	}
	slices.Sort(versions)
	return versions
}

// appliedVersions returns the rows of schema_migrations.
func appliedVersions(t *testing.T, conn *pgx.Conn) []int {
	t.Helper()
	rows, err := conn.Query(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return versions
}

// TestConcurrentOpenMigratesOnce opens one new database from several
// goroutines at once, as servers starting together do: every Open
// succeeds and each migration is applied once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	const servers = 8
	stores := make([]*postgres.Store, servers)
	errs := make([]error, servers)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() { stores[i], errs[i] = postgres.Open(t.Context(), url) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
			continue
		}
		defer stores[i].Close()
	}
	if got, want := appliedVersions(t, connect(t, url)), migrationVersions(t); !slices.Equal(got, want) {
		t.Fatalf("schema_migrations = %v, want %v, each once", got, want)
	}
	// Each store works on the one schema.
	var ids berth.IDGen
	for i, s := range stores {
		if s == nil {
			continue
		}
		j := &berth.Job{ID: ids.New(time.Now()), JobSpec: berth.JobSpec{Queue: "gpu"}, State: berth.JobPending, CreatedAt: time.Now().UTC()}
		if err := s.Write(t.Context(), &store.Batch{Jobs: []*berth.Job{j}}); err != nil {
			t.Errorf("Write through store %d: %v", i, err)
		}
	}
	if jobs, err := stores[0].Jobs(t.Context(), store.JobFilter{}); err != nil || len(jobs) != servers {
		t.Errorf("Jobs = %d jobs, %v; want %d", len(jobs), err, servers)
	}
}

// TestOpenNewerSchema opens a database that a newer Berth has migrated:
// Open refuses it, saying so, and changes nothing.
func TestOpenNewerSchema(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	if err := openAt(t, url).Close(); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, url)
	known := knownVersion(t)
	if _, err := conn.Exec(t.Context(), `INSERT INTO schema_migrations (version) VALUES ($1)`, known+5); err != nil {
		t.Fatal(err)
	}
	before := appliedVersions(t, conn)
	s, err := postgres.Open(t.Context(), url)
	if err == nil {
		s.Close()
		t.Fatal("Open of a database with a newer schema succeeded")
	}
	want := "database schema is at version " + strconv.Itoa(known+5) + ", newer than this berth knows (" + strconv.Itoa(known) +
		"): upgrade berth or use the matching store"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("Open error %q does not say %q", err, want)
	}
	if got := appliedVersions(t, conn); !slices.Equal(got, before) {
		t.Errorf("schema_migrations = %v, want %v as it was", got, before)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		"postgres://berth:s3cret@127.0.0.1:1/berth?sslmode=disable&connect_timeout=5", // nothing listens on port 1
		"postgres://berth:s3cret@127.0.0.1:5432/berth?sslmode=nonsense",
	} {
		s, err := postgres.Open(t.Context(), url)
		if err == nil {
			s.Close()
			t.Errorf("Open(%s) succeeded", url)
			continue
		}
		if !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("Open error %q does not name the server", err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open error %q shows the password", err)
		}
	}
}

// upsertOff is the plain SQL an operator, or any program sharing the
// database, runs to turn a worker's queue off.
const upsertOff = `INSERT INTO worker_controls (host_label, queue, desired_state, stop_policy, requested_by)
VALUES ($1, $2, 'off', 'hard', 'ops')
ON CONFLICT (host_label, queue) DO UPDATE SET desired_state = excluded.desired_state,
	stop_policy = excluded.stop_policy, requested_by = excluded.requested_by, updated_at = now()`

// wakes fails t unless changed delivers within a few seconds.
func wakes(t *testing.T, changed <-chan struct{}, after string) {
	t.Helper()
	select {
	case _, ok := <-changed:
		if !ok {
			t.Fatalf("channel closed, want a delivery after %s", after)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no delivery after %s", after)
	}
}

// quiet fails t if changed delivers.
func quiet(t *testing.T, changed <-chan struct{}, after string) {
	t.Helper()
	select {
	case <-changed:
		t.Fatalf("delivery after %s, want none", after)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestWatchControlsPlainSQL writes worker controls with plain SQL through
// pgx, not Berth: the trigger's NOTIFY wakes the watcher, also after its
// connection broke and it reconnected, and the store reads the rows back.
func TestWatchControlsPlainSQL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	url := pgtest.NewDatabase(t)
	s := openAt(t, url)
	defer s.Close()
	changed, err := s.WatchControls(ctx)
	if err != nil {
		t.Fatalf("WatchControls: %v", err)
	}
	wakes(t, changed, "listening")
	quiet(t, changed, "listening, with nothing written")

	conn := connect(t, url)
	before := time.Now().Add(-time.Second)
	if _, err := conn.Exec(ctx, upsertOff, "spark", "gpu"); err != nil {
		t.Fatalf("plain-SQL insert: %v", err)
	}
	wakes(t, changed, "a plain-SQL insert")
	if _, err := conn.Exec(ctx, upsertOff, "spark", "gpu"); err != nil {
		t.Fatalf("plain-SQL update: %v", err)
	}
	wakes(t, changed, "a plain-SQL update")

	cs, err := s.WorkerControls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Host != "spark" || cs[0].Queue != "gpu" || !cs[0].Off() || cs[0].StopPolicy != berth.StopHard ||
		cs[0].RequestedBy != "ops" || cs[0].UpdatedAt.Before(before) || cs[0].UpdatedAt.Location() != time.UTC {
		t.Errorf("WorkerControls = %+v, want spark/gpu off (hard) by ops, updated now in UTC", cs)
	}

	// Break the watcher's connection while the database refuses new
	// ones: it retries until it listens again, then delivers, so that the
	// controller reads what it may have missed meanwhile.
	admin := connect(t, os.Getenv(pgtest.Env))
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+conn.Config().Database+` ALLOW_CONNECTIONS false`); err != nil {
		t.Fatal(err)
	}
	var killed int
	err = conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query ILIKE 'listen%'`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminating the watcher's connection: %d terminated, %v; want 1", killed, err)
	}
	if _, err := conn.Exec(ctx, upsertOff, "spark", "cpu"); err != nil {
		t.Fatalf("plain-SQL insert: %v", err)
	}
	time.Sleep(time.Second) // several attempts to reconnect fail
	quiet(t, changed, "losing the connection, while no new one is allowed")
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+conn.Config().Database+` ALLOW_CONNECTIONS true`); err != nil {
		t.Fatal(err)
	}
	wakes(t, changed, "a reconnect")
	if cs, err := s.WorkerControls(ctx); err != nil || len(cs) != 2 {
		t.Errorf("WorkerControls after the reconnect = %+v, %v; want spark/cpu and spark/gpu", cs, err)
	}
	if _, err := conn.Exec(ctx, upsertOff, "spark", "cpu"); err != nil {
		t.Fatalf("plain-SQL update: %v", err)
	}
	wakes(t, changed, "a plain-SQL update after the reconnect")

	// A write through Berth wakes it too.
	on := &berth.WorkerControl{Host: "spark", Queue: "gpu", DesiredState: berth.DesiredOn, StopPolicy: berth.StopHard, UpdatedAt: time.Now().UTC()}
	if err := s.Write(ctx, &store.Batch{Controls: []*berth.WorkerControl{on}}); err != nil {
		t.Fatal(err)
	}
	wakes(t, changed, "a write through Berth")

	cancel()
	select {
	case _, ok := <-changed:
		if ok {
			if _, ok = <-changed; ok {
				t.Fatal("channel delivers after ctx ended, want it closed")
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("channel not closed after ctx ended")
	}
}

// TestWatchControlsEndsWithStore checks that closing the store closes the
// channel of a watcher whose ctx goes on.
func TestWatchControlsEndsWithStore(t *testing.T) {
	t.Parallel()
	s := openAt(t, pgtest.NewDatabase(t))
	changed, err := s.WatchControls(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range changed { // a delivery made before Close, then closed
	}
}

// TestWorkerControlsSchema writes worker controls as an operator would,
// with plain SQL and the table's defaults: CHECK constraints refuse
// invalid values, a write that sets only updated_at moves the time Berth
// reads, and NULL reads as no time.
func TestWorkerControlsSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, conn := openWithConn(t)

	for _, bad := range []struct{ host, queue, desired, policy string }{
		{"spark", "gpu", "maybe", "hard"},
		{"spark", "gpu", "OFF", "hard"},
		{"", "gpu", "off", "hard"},
		{"spark", "", "off", "hard"},
		{"spark", "gpu", "off", ""},
	} {
		_, err := conn.Exec(ctx, `INSERT INTO worker_controls (host_label, queue, desired_state, stop_policy) VALUES ($1, $2, $3, $4)`,
			bad.host, bad.queue, bad.desired, bad.policy)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" { // check_violation
			t.Errorf("insert of %+v: error %v, want a CHECK violation", bad, err)
		}
	}
	if _, err := conn.Exec(ctx, `UPDATE worker_controls SET desired_state = 'maybe'`); err != nil {
		t.Errorf("update of no rows: %v", err)
	}

	// Berth writes a time to the nanosecond; an operator then sets only
	// updated_at, or clears it.
	at := time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)
	c := &berth.WorkerControl{Host: "spark", Queue: "gpu", DesiredState: berth.DesiredOff, StopPolicy: berth.StopDrain, UpdatedAt: at}
	if err := s.Write(ctx, &store.Batch{Controls: []*berth.WorkerControl{c}}); err != nil {
		t.Fatal(err)
	}
	check := func(what string, want ...*berth.WorkerControl) {
		t.Helper()
		cs, err := s.WorkerControls(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cs, want) {
			t.Errorf("WorkerControls after %s = %+v, want %+v", what, cs, want)
		}
	}
	check("a write through Berth", c)
	var stored time.Time
	if err := conn.QueryRow(ctx, `SELECT updated_at FROM worker_controls`).Scan(&stored); err != nil || !stored.Equal(at.Truncate(time.Microsecond)) {
		t.Errorf("updated_at = %v, %v; want %v", stored, err, at.Truncate(time.Microsecond))
	}
	if _, err := conn.Exec(ctx, `UPDATE worker_controls SET desired_state = 'on', updated_at = $1`, at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	c.DesiredState, c.UpdatedAt = berth.DesiredOn, at.Add(time.Hour).Truncate(time.Microsecond)
	check("a plain-SQL update of updated_at", c)
	if _, err := conn.Exec(ctx, `UPDATE worker_controls SET updated_at = NULL`); err != nil {
		t.Fatal(err)
	}
	c.UpdatedAt = time.Time{}
	check("a plain-SQL update to NULL", c)
	if _, err := conn.Exec(ctx, `INSERT INTO worker_controls (host_label, queue, desired_state, updated_at) VALUES ('a', '*', 'off', NULL)`); err != nil {
		t.Fatal(err)
	}
	check("a plain-SQL insert with the defaults", &berth.WorkerControl{Host: "a", Queue: berth.AllQueues, DesiredState: berth.DesiredOff,
		StopPolicy: berth.StopHard}, c)
}

// TestWriteStoresTextPostgreSQLCannotHold writes strings that PostgreSQL's
// text refuses: the batch is written, with U+FFFD in their place, rather
// than refused. In JSON bodies (a spec, an event) a NUL is kept.
func TestWriteStoresTextPostgreSQLCannotHold(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openAt(t, pgtest.NewDatabase(t))
	defer s.Close()
	var ids berth.IDGen
	j := &berth.Job{ID: ids.New(time.Now()), JobSpec: berth.JobSpec{Queue: "gpu", Name: "nul\x00"}, State: berth.JobPending,
		Reason: "bad \xff\x00 bytes", CreatedAt: time.Now().UTC()}
	a := &berth.Attempt{ID: ids.New(time.Now()), JobID: j.ID, State: berth.AttemptRunning}
	err := s.Write(ctx, &store.Batch{Jobs: []*berth.Job{j}, Attempts: []*berth.Attempt{a},
		Progress: []store.AttemptProgress{{AttemptID: a.ID, Progress: "é"[:1]}},
		Events:   []*berth.Event{{Seq: 1, Type: "job.failed", JobID: j.ID, Reason: "bad \xff\x00 bytes"}}})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	got, err := s.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Reason != "bad \uFFFD\uFFFD bytes" || got.Name != "nul\x00" {
		t.Errorf("Job: reason %q, name %q; want %q and the name as written (JSON keeps it)", got.Reason, got.Name, "bad \uFFFD\uFFFD bytes")
	}
	as, err := s.Attempts(ctx, j.ID)
	if err != nil || len(as) != 1 || as[0].Progress != "\uFFFD" {
		t.Errorf("Attempts = %+v, %v; want progress %q", as, err, "\uFFFD")
	}
	active, err := s.LoadActive(ctx, nil)
	if err != nil || len(active.Events) != 1 || active.Events[0].Reason != "bad \uFFFD\x00 bytes" {
		t.Errorf("LoadActive: events %+v, %v; want one with reason %q", active.Events, err, "bad \uFFFD\x00 bytes")
	}
}

// TestAssignedAttemptsMigration runs migration 0010 on rows as an earlier
// Berth wrote them, counting an attempt from its assignment: it takes the
// attempt an assigned job is making out of that job's row, as Berth now
// writes it, and leaves every other count alone.
func TestAssignedAttemptsMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, conn := openWithConn(t)
	migration, err := os.ReadFile("migrations/0010_assigned_attempts.sql")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	b := &store.Batch{}
	for _, row := range []struct {
		job          berth.JobState
		attempts     int
		attemptState berth.AttemptState // of its one attempt, "" for none
	}{
		{berth.JobPending, 2, berth.AttemptAssigned},
		{berth.JobPending, 1, berth.AttemptLost},
		{berth.JobRunning, 1, berth.AttemptRunning},
		{berth.JobPending, 0, ""},
		{berth.JobSucceeded, 1, berth.AttemptSucceeded},
	} {
		id := "j-" + strconv.Itoa(len(b.Jobs))
		b.Jobs = append(b.Jobs, &berth.Job{ID: id, JobSpec: berth.JobSpec{Queue: "gpu", User: "ada", Command: berth.Argv{"true"}},
			State: row.job, Attempts: row.attempts, CreatedAt: now})
		if row.attemptState != "" {
			b.Attempts = append(b.Attempts, &berth.Attempt{ID: "a-" + id, JobID: id, WorkerID: "w1", Host: "gpu-1", State: row.attemptState,
				CreatedAt: now})
		}
	}
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, string(migration)); err != nil {
		t.Fatalf("migration 0010: %v", err)
	}
	var got []int
	for _, j := range b.Jobs {
		stored, err := s.Job(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, stored.Attempts)
	}
	if want := []int{1, 1, 1, 0, 1}; !slices.Equal(got, want) {
		t.Errorf("attempts of the jobs after migration 0010 = %v, want %v", got, want)
	}
}

// TestEventBatchesMigration runs migration 0018 on an events table as an
// earlier Berth wrote it, a row an event: the events load as before,
// through the view that replaces the table, and later writes go on after
// them.
func TestEventBatchesMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, conn := openWithConn(t)
	migration, err := os.ReadFile("migrations/0018_event_batches.sql")
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `DROP VIEW events; DROP TABLE event_batches;
		CREATE TABLE events (seq bigint PRIMARY KEY, body json NOT NULL);
		INSERT INTO events (seq, body) VALUES
			(7, '{"seq":7,"time":"2026-11-26T06:00:00Z","type":"job.submitted","job_id":"j-1"}'),
			(8, '{"seq":8,"time":"2026-11-26T06:00:01Z","type":"job.failed","job_id":"j-1","reason":"nul \u0000"}')`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, string(migration)); err != nil {
		t.Fatalf("migration 0018: %v", err)
	}
	at := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	later := &berth.Event{Seq: 9, Time: at.Add(2 * time.Second), Type: "job.submitted", JobID: "j-2"}
	if err := s.Write(ctx, &store.Batch{Events: []*berth.Event{later}}); err != nil {
		t.Fatal(err)
	}
	active, err := s.LoadActive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []*berth.Event{{Seq: 7, Time: at, Type: "job.submitted", JobID: "j-1"},
		{Seq: 8, Time: at.Add(time.Second), Type: "job.failed", JobID: "j-1", Reason: "nul \x00"}, later}
	if !reflect.DeepEqual(active.Events, want) {
		t.Errorf("events after migration 0018 = %+v, want %+v", active.Events, want)
	}
}

// TestAttemptUpdatesStayInPlace checks that an attempt's update at its
// end is heap-only (HOT): no index of attempts covers a column it changes,
// and its pages leave room for the new versions (migration 0028). The
// update would otherwise insert the row into every index of the table.
// Nine in ten must be in place (a page's last rows may find it full).
func TestAttemptUpdatesStayInPlace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	s := openAt(t, url)
	const n = 300
	now := time.Now().UTC()
	attempts := func(st berth.AttemptState) []*berth.Attempt {
		as := make([]*berth.Attempt, n)
		for i := range as {
			id := "j-" + strconv.Itoa(i)
			as[i] = &berth.Attempt{ID: "a-" + id, JobID: id, WorkerID: "w1", Host: "gpu-1", State: st, CreatedAt: now, StartedAt: now}
			if st.Terminal() {
				as[i].FinishedAt, as[i].ExitCode = now, new(int)
			}
		}
		return as
	}
	first := &store.Batch{Attempts: attempts(berth.AttemptRunning)}
	for _, a := range first.Attempts {
		first.Jobs = append(first.Jobs, &berth.Job{ID: a.JobID, JobSpec: berth.JobSpec{Queue: "default", Command: berth.Argv{"true"}},
			State: berth.JobRunning, CreatedAt: now})
	}
	for _, b := range []*store.Batch{first, {Attempts: attempts(berth.AttemptSucceeded)}} {
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	s.Close() // each of its backends reports its counts as it exits
	conn := connect(t, url)
	var updated, inPlace int
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := conn.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'attempts'`).Scan(&updated, &inPlace)
		if err != nil {
			t.Fatal(err)
		}
		if updated >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the counts arrive as the backends exit: nothing to wait on
	}
	if updated != n || inPlace < n*9/10 {
		t.Errorf("attempts: %d updates, %d of them heap-only; want %d, nine in ten heap-only", updated, inPlace, n)
	}
}
