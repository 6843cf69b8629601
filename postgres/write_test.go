package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/postgres/pgtest"
	"github.com/berth-dev/berth/store"
)

// copyArray returns a batch that creates an array of copyJobs jobs, enough
// that Write and Stage insert them with COPY; the last has a reason that
// PostgreSQL's text cannot hold as it is.
func copyArray(gen *berth.IDGen) *store.Batch {
	spec := berth.JobSpec{Queue: "gpu", Name: "nul\x00", User: "ann", Command: berth.Argv{"true"}}
	b := &store.Batch{Jobs: arrayJobs(gen, spec, time.Now().UTC(), copyJobs)}
	b.Jobs[copyJobs-1].Reason = "bad \xff\x00 bytes"
	return b
}

// copyFixture returns a store of t's own, the IDs its jobs are given and
// a batch of copyArray.
func copyFixture(t *testing.T) (*Store, *berth.IDGen, *store.Batch) {
	gen := &berth.IDGen{}
	return openTest(t), gen, copyArray(gen)
}

// openTest opens a store on a database of tb's own, closed when tb ends.
func openTest(tb testing.TB) *Store {
	tb.Helper()
	s, err := Open(tb.Context(), pgtest.NewDatabase(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// countJobs returns how many jobs s stores, and how many of them share
// their array's spec.
func countJobs(t *testing.T, s *Store) (all, shared int) {
	t.Helper()
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*), count(array_id) FROM jobs`).Scan(&all, &shared); err != nil {
		t.Fatal(err)
	}
	return all, shared
}

// TestCopiedJobsAsInserted writes a batch of new jobs large enough to be
// copied (COPY) rather than inserted: the rows read back are those an
// INSERT writes (the array's spec stored once, text made storable), and a
// batch with an audit head commits them with it.
func TestCopiedJobsAsInserted(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _, b := copyFixture(t)
	b.BeforeCommit = func() (*store.AuditHead, error) { return &store.AuditHead{Seq: 7, Hash: "h"}, nil }
	if err := s.Write(ctx, b); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if all, shared := countJobs(t, s); all != copyJobs || shared != copyJobs-1 {
		t.Fatalf("%d jobs stored, %d sharing the array's spec; want %d and %d", all, shared, copyJobs, copyJobs-1)
	}
	last, err := s.Job(ctx, b.Jobs[copyJobs-1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if last.Reason != "bad \uFFFD\uFFFD bytes" || last.Name != "nul\x00" || last.User != "ann" || *last.ArrayIndex != copyJobs-1 ||
		!last.CreatedAt.Equal(b.Jobs[0].CreatedAt) {
		t.Errorf("last job read back as %+v", last)
	}
	var seq int64
	if err := s.pool.QueryRow(ctx, `SELECT seq FROM audit_head`).Scan(&seq); err != nil || seq != 7 {
		t.Errorf("audit head seq %d, %v; want 7", seq, err)
	}
}

// TestStagedCopyCommitsWithItsGroup stages copied jobs: a rollback leaves
// none, a copy that fails (a job stored already) fails the stage and
// leaves the store as it was, and a commit stores them all.
func TestStagedCopyCommitsWithItsGroup(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, gen, b := copyFixture(t)
	staged, err := s.Stage(ctx, b)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	staged.Rollback()
	if all, _ := countJobs(t, s); all != 0 {
		t.Fatalf("%d jobs stored after a rollback; want none", all)
	}
	stored := &store.Batch{Jobs: b.Jobs[copyJobs-1:]}
	if err := s.Write(ctx, stored); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stage(ctx, b); err == nil {
		t.Fatal("Stage of jobs of which one is stored: no error")
	}
	if all, _ := countJobs(t, s); all != 1 {
		t.Fatalf("%d jobs stored after a failed stage; want 1", all)
	}
	b.Jobs = b.Jobs[:copyJobs-1]
	b.Jobs = append(b.Jobs, copyArray(gen).Jobs[0])
	staged, err = s.Stage(ctx, b)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	if err := staged.Commit(context.Background(), nil); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if all, _ := countJobs(t, s); all != copyJobs+1 {
		t.Fatalf("%d jobs stored; want %d", all, copyJobs+1)
	}
}

// TestEventSeqsStoredUncompressed writes enough events that their seqs
// would be compressed under PostgreSQL's default storage: they are kept
// as they are, as the body is.
func TestEventSeqsStoredUncompressed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openTest(t)
	b := &store.Batch{}
	for i := range 2000 {
		b.Events = append(b.Events, &berth.Event{Seq: uint64(i + 1), Type: berth.EventJobSubmitted, JobID: "j"})
	}
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	var seqs, body *string
	if err := s.pool.QueryRow(ctx, `SELECT pg_column_compression(seqs), pg_column_compression(body) FROM event_batches`).Scan(&seqs, &body); err != nil {
		t.Fatal(err)
	}
	if seqs != nil || body != nil {
		t.Errorf("event_batches compresses: seqs %v, body %v; want neither", deref(seqs), deref(body))
	}
}

// deref returns *s, or "none" for nil.
func deref(s *string) string {
	if s == nil {
		return "none"
	}
	return *s
}
