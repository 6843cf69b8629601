package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/postgres/pgtest"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/store/sqlstore"
)

// TestWriterLooksRowsUpByKey checks the plan of the update of a batch's
// jobs on Write's connection: with most of the table in the batch, each
// row is still looked up by its primary key, not found by hashing every
// job (which a custom plan, knowing the arrays' length, would do).
func TestWriterLooksRowsUpByKey(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() }) // after the connection writeAnalyzed holds is released
	const n = 3000
	var gen berth.IDGen
	now := time.Now()
	b := &store.Batch{}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = gen.New(now)
		b.Jobs = append(b.Jobs, &berth.Job{ID: ids[i], JobSpec: berth.JobSpec{Queue: "default", Command: berth.Argv{"true"}},
			State: berth.JobPending, CreatedAt: now})
	}
	conn := writeAnalyzed(t, s, s.writer, b)
	if _, err := conn.Conn().Prepare(t.Context(), "update_jobs", steps[sqlstore.UpdateJobs].query); err != nil {
		t.Fatal(err)
	}
	fill := func(v string) string { return "'{" + strings.Repeat(v+",", n-1) + v + "}'" }
	explain := `EXPLAIN EXECUTE update_jobs('{` + strings.Join(ids, ",") + `}', ` + fill("succeeded") + `, ` + fill(`""`) + `, ` +
		fill("0") + `, ` + fill("1") + `, ` + fill("0") + `, ` + fill("0") + `)`
	if p := plan(t, conn, explain); strings.Contains(p, "Seq Scan on jobs") || !strings.Contains(p, "Index Scan using jobs_pkey") {
		t.Fatalf("the update of %d of %d jobs does not look each up by key:\n%s", n, n, p)
	}
}

// TestStateReadsUseTheActiveJobsIndex checks that the reads of jobs by
// state (the restart's load, listings by state) use jobs_state, which
// leaves succeeded jobs out (migration 0027), even under plans made for
// any value: the planner uses a partial index only where the query's
// condition keeps to its rows, so sqlstore.StateIn writes the states as
// literals. A placeholder's generic plan, shown first, cannot use it.
func TestStateReadsUseTheActiveJobsIndex(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() }) // after the connection writeAnalyzed holds is released
	var gen berth.IDGen
	now := time.Now()
	b := &store.Batch{}
	for i := range 3000 {
		st := berth.JobSucceeded
		switch {
		case i%1000 == 0:
			st = berth.JobPending
		case i%1000 == 1:
			st = berth.JobFailed
		}
		b.Jobs = append(b.Jobs, &berth.Job{ID: gen.New(now), JobSpec: berth.JobSpec{Queue: "default", Command: berth.Argv{"true"}},
			State: st, CreatedAt: now})
	}
	conn := writeAnalyzed(t, s, s.pool, b)
	if _, err := conn.Exec(t.Context(), `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `PREPARE by_state(text) AS SELECT id FROM jobs WHERE state = $1 ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	if p := plan(t, conn, `EXPLAIN EXECUTE by_state('pending')`); strings.Contains(p, "jobs_state") {
		t.Fatalf("a placeholder's generic plan uses jobs_state, so the literals are not what makes the reads below use it:\n%s", p)
	}
	for _, q := range []string{
		`SELECT id FROM jobs WHERE ` + sqlstore.StateIn("state", berth.JobPending) + ` ORDER BY id`,
		`SELECT id FROM jobs WHERE ` + sqlstore.StateIn("state", berth.JobFailed, berth.JobCancelled) + ` ORDER BY id DESC LIMIT 100`,
	} {
		if p := plan(t, conn, "EXPLAIN "+q); !strings.Contains(p, "jobs_state") {
			t.Errorf("%s\ndoes not use jobs_state:\n%s", q, p)
		}
	}
}

// writeAnalyzed writes b to s and returns a connection of pool, released
// when t ends, after analyzing the jobs table on it.
func writeAnalyzed(t *testing.T, s *Store, pool *pgxpool.Pool, b *store.Batch) *pgxpool.Conn {
	t.Helper()
	if err := s.Write(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(t.Context(), `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	return conn
}

// plan returns the lines an EXPLAIN statement returns on conn.
func plan(t *testing.T, conn *pgxpool.Conn, explain string) string {
	t.Helper()
	rows, err := conn.Query(t.Context(), explain)
	if err != nil {
		t.Fatal(err)
	}
	var p strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		p.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return p.String()
}
