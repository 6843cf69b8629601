package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berth-dev/berth/postgres/pgtest"
)

// TestOneLeaderAtATime has two stores on one database campaign: the first
// leads, the second waits until the first gives up (its store closes), and
// Leader names whoever leads.
func TestOneLeaderAtATime(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	a, b := openAt(t, url), openAt(t, url)
	defer b.Close()
	if leader, err := a.Leader(t.Context()); err != nil || leader != "" {
		t.Fatalf("Leader before anyone leads = %q, %v; want none", leader, err)
	}
	if _, err := a.Lead(t.Context(), "http://a:7070"); err != nil {
		t.Fatalf("a.Lead: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, err := b.Lead(ctx, "http://b:7070"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b.Lead while a leads = %v, want it to wait until its context ends", err)
	}
	if leader, err := b.Leader(t.Context()); err != nil || leader != "http://a:7070" {
		t.Fatalf("Leader = %q, %v; want a", leader, err)
	}

	took := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		if _, err := b.Lead(t.Context(), "http://b:7070"); err != nil {
			t.Errorf("b.Lead after a gave up: %v", err)
		}
		took <- time.Since(start)
	}()
	a.Close()
	select {
	case d := <-took:
		t.Logf("b led %s after a gave up", d)
	case <-time.After(10 * time.Second):
		t.Fatal("b did not lead within 10s of a giving up")
	}
	if leader, err := b.Leader(t.Context()); err != nil || leader != "http://b:7070" {
		t.Fatalf("Leader = %q, %v; want b", leader, err)
	}
}

// TestLeadershipLostWithItsConnection kills the leader's connection from
// outside: lost closes, and another store can lead.
func TestLeadershipLostWithItsConnection(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	a, b := openAt(t, url), openAt(t, url)
	defer a.Close()
	defer b.Close()
	lost, err := a.Lead(t.Context(), "http://a:7070")
	if err != nil {
		t.Fatal(err)
	}
	admin := connect(t, url)
	if _, err := admin.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND ((classid::bigint << 32) | objid::bigint) = x'626572746C656164'::bigint
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("leadership not reported lost within 10s of its connection being killed")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := b.Lead(ctx, "http://b:7070"); err != nil {
		t.Fatalf("b.Lead after a lost leadership: %v", err)
	}
}
