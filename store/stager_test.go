package store_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/postgres"
	"github.com/berth-dev/berth/postgres/pgtest"
	"github.com/berth-dev/berth/store"
)

// stageRecorder is a real PostgreSQL store whose staged writes it
// numbers and checks: a group writes a job that an open group writes only
// once that group's changes are made, and never one it inserts. With
// holdStage or holdCommit set, the first Stage, or the first Commit, waits
// until it is closed.
type stageRecorder struct {
	*postgres.Store
	t *testing.T

	holdStage  chan struct{}
	holdCommit chan struct{}
	released   sync.Once
	staging    chan int // each stage's number as it begins

	mu      sync.Mutex
	n       int
	open    map[int]*openStage
	commits []int // stages committed, in order
}

func newStageRecorder(t *testing.T) *stageRecorder {
	s, err := postgres.Open(t.Context(), pgtest.NewDatabase(t))
	opened(t, s, err)
	return &stageRecorder{Store: s, t: t, staging: make(chan int, 1000), open: map[int]*openStage{}}
}

// openStage is a group staged and not yet committed or rolled back.
type openStage struct {
	created, jobs []string
	made          bool // Stage has returned
}

func (r *stageRecorder) Stage(ctx context.Context, b *store.Batch) (store.Staged, error) {
	o := &openStage{}
	for _, j := range b.Jobs {
		o.created = append(o.created, j.ID)
	}
	o.jobs = append(o.jobs, o.created...)
	for _, u := range b.JobUpdates {
		o.jobs = append(o.jobs, u.ID)
	}
	r.mu.Lock()
	i := r.n
	r.n++
	for g, other := range r.open {
		for _, id := range o.jobs {
			switch {
			case slices.Contains(other.created, id):
				r.t.Errorf("stage %d writes job %s, which stage %d inserts and has not committed", i, id, g)
			case slices.Contains(other.jobs, id) && !other.made:
				r.t.Errorf("stage %d writes job %s while stage %d, which writes it too, is being made", i, id, g)
			}
		}
	}
	r.open[i] = o
	r.mu.Unlock()
	r.staging <- i
	if i == 0 && r.holdStage != nil {
		<-r.holdStage
	}
	s, err := r.Store.Stage(ctx, b)
	if err != nil {
		r.end(i, false)
		return nil, err
	}
	r.mu.Lock()
	o.made = true
	r.mu.Unlock()
	return &recordedStage{r: r, i: i, s: s}, nil
}

// release closes the holds set, once: a test defers it before its
// committer's Stop, which would otherwise wait for a held stage.
func (r *stageRecorder) release() {
	r.released.Do(func() {
		for _, h := range []chan struct{}{r.holdStage, r.holdCommit} {
			if h != nil {
				close(h)
			}
		}
	})
}

// committer returns a started committer over r with prepare as its
// Prepare, stopped when t ends, after r's holds are released.
func (r *stageRecorder) committer(t *testing.T, prepare func(*store.Batch) (*store.AuditHead, error)) *store.Committer {
	c := store.NewCommitter(r)
	c.Prepare = prepare
	c.Start()
	t.Cleanup(c.Stop)
	t.Cleanup(r.release)
	return c
}

// end records that stage i is no longer open, and committed if so.
func (r *stageRecorder) end(i int, committed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.open, i)
	if committed {
		r.commits = append(r.commits, i)
	}
}

// waitStaging waits for stage i to begin, failing t after 30 s.
func (r *stageRecorder) waitStaging(t *testing.T, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		select {
		case n := <-r.staging:
			if n == i {
				return
			}
		case <-ctx.Done():
			t.Fatalf("stage %d did not begin", i)
		}
	}
}

// Lanes allows one more group open than the store's connections, so that
// a group the committer staged too early shows here, not only as a wait
// for a connection.
func (r *stageRecorder) Lanes() int { return r.Store.Lanes() + 1 }

type recordedStage struct {
	r *stageRecorder
	i int
	s store.Staged
}

func (s *recordedStage) Commit(ctx context.Context, head *store.AuditHead) error {
	if s.i == 0 && s.r.holdCommit != nil {
		<-s.r.holdCommit
	}
	err := s.s.Commit(ctx, head)
	s.r.end(s.i, err == nil)
	return err
}

func (s *recordedStage) Rollback() {
	s.s.Rollback()
	s.r.end(s.i, false)
}

// TestStagedGroupsOverlapAndCommitInOrder checks that on PostgreSQL a
// group is staged while the one before it is still open, that a group
// updating a job an open group inserts waits for its commit, and that the groups
// commit, and their Prepares and callbacks run, in order.
func TestStagedGroupsOverlapAndCommitInOrder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := newStageRecorder(t)
	r.holdCommit = make(chan struct{})
	var mu sync.Mutex
	var prepared []int
	c := r.committer(t, func(b *store.Batch) (*store.AuditHead, error) {
		mu.Lock()
		defer mu.Unlock()
		prepared = append(prepared, len(prepared))
		return &store.AuditHead{Seq: uint64(len(prepared)), Hash: "h"}, nil
	})

	a, b := newJob(), newJob()
	res := newResults(3)
	c.Commit(&store.Batch{Jobs: []*berth.Job{a}}, res.done(0))
	r.waitStaging(t, 0)
	c.Commit(&store.Batch{Jobs: []*berth.Job{b}}, res.done(1))
	r.waitStaging(t, 1) // while stage 0 cannot commit
	c.Commit(&store.Batch{JobUpdates: []store.JobUpdate{{ID: a.ID, State: berth.JobRunning, Attempts: 1, StartedAt: base}}},
		res.done(2))
	r.release()
	res.wait(t)

	if want := []int{0, 1, 2}; !slices.Equal(res.order, want) || !slices.Equal(r.commits, want) || !slices.Equal(prepared, want) {
		t.Errorf("callbacks %v, commits %v, Prepares %v; want each %v", res.order, r.commits, prepared, want)
	}
	for i := range 3 {
		if err, _ := res.get(i); err != nil {
			t.Errorf("commit %d: %v", i, err)
		}
	}
	if j, err := r.Job(ctx, a.ID); err != nil || j.State != berth.JobRunning {
		t.Errorf("job updated by the last group: %v, %v; want running", j, err)
	}
	if _, err := r.Job(ctx, b.ID); err != nil {
		t.Errorf("job of the second group: %v", err)
	}
}

// TestStagedFailureRollsBackLaterGroups checks that when a group fails,
// a later group already staged is not committed, and that both get the
// first group's error, as do later commits.
func TestStagedFailureRollsBackLaterGroups(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := newStageRecorder(t)
	r.holdStage = make(chan struct{})
	c := r.committer(t, nil)

	lost, later := newJob(), newJob()
	res := newResults(2)
	c.Commit(&store.Batch{Jobs: []*berth.Job{lost}, JobUpdates: []store.JobUpdate{{ID: "no-such-job", State: berth.JobRunning}}},
		res.done(0))
	r.waitStaging(t, 0)
	c.Commit(&store.Batch{Jobs: []*berth.Job{later}}, res.done(1))
	r.waitStaging(t, 1)
	r.release()
	res.wait(t)

	errBad, _ := res.get(0)
	if errBad == nil {
		t.Fatal("the group updating a missing job succeeded")
	}
	if err, _ := res.get(1); !errors.Is(err, errBad) {
		t.Errorf("the group staged after it: %v, want its error %v", err, errBad)
	}
	if err := commitAndWait(t, c, &store.Batch{Jobs: []*berth.Job{newJob()}}); !errors.Is(err, errBad) {
		t.Errorf("a commit after the failure: %v, want %v", err, errBad)
	}
	for _, id := range []string{lost.ID, later.ID} {
		if _, err := r.Job(ctx, id); berth.ErrorCode(err) != berth.ECodeNotFound {
			t.Errorf("job %s of a failed group: %v, want not found", id, err)
		}
	}
	if len(r.commits) != 0 {
		t.Errorf("stages %v committed, want none", r.commits)
	}
}

// TestStagedChainOfUpdates commits batches, each once the one before it
// is being staged, that each insert a job and finish the one inserted two
// batches before: every one succeeds, in order, and every job but the
// last two ends finished.
func TestStagedChainOfUpdates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := newStageRecorder(t)
	c := r.committer(t, nil)

	const n = 300
	jobs := make([]*berth.Job, n)
	res := newResults(n)
	for i := range n {
		jobs[i] = newJob()
		b := &store.Batch{Jobs: []*berth.Job{jobs[i]}}
		if i > 0 {
			r.waitStaging(t, i-1)
		}
		if i > 1 {
			b.JobUpdates = []store.JobUpdate{{ID: jobs[i-2].ID, State: berth.JobSucceeded, Attempts: 1, StartedAt: base, FinishedAt: base}}
		}
		c.Commit(b, res.done(i))
	}
	res.wait(t)
	for i := range n {
		if err, _ := res.get(i); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		if res.order[i] != i {
			t.Fatalf("callbacks ran in order %v, want submission order", res.order)
		}
	}
	for i, j := range jobs {
		got, err := r.Job(ctx, j.ID)
		want := berth.JobSucceeded
		if i >= n-2 {
			want = berth.JobPending
		}
		if err != nil || got.State != want {
			t.Errorf("job %d: %v, %v; want %s", i, got, err, want)
		}
	}
}

// TestStagedUpdateWaitsForTheRowInTheDatabase checks that a group
// updating a job that an open group has updated is staged before that
// group commits, and that PostgreSQL applies its update after the open
// group's.
func TestStagedUpdateWaitsForTheRowInTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := newStageRecorder(t)
	a := newJob()
	if err := r.Write(ctx, &store.Batch{Jobs: []*berth.Job{a}}); err != nil {
		t.Fatal(err)
	}
	r.holdCommit = make(chan struct{})
	c := r.committer(t, nil)

	res := newResults(2)
	c.Commit(&store.Batch{JobUpdates: []store.JobUpdate{{ID: a.ID, State: berth.JobRunning, Attempts: 1, StartedAt: base}}},
		res.done(0))
	r.waitStaging(t, 0)
	c.Commit(&store.Batch{JobUpdates: []store.JobUpdate{{ID: a.ID, State: berth.JobSucceeded, Attempts: 1, StartedAt: base,
		FinishedAt: base}}}, res.done(1))
	r.waitStaging(t, 1) // while stage 0 cannot commit
	r.release()
	res.wait(t)

	for i := range 2 {
		if err, _ := res.get(i); err != nil {
			t.Errorf("commit %d: %v", i, err)
		}
	}
	if want := []int{0, 1}; !slices.Equal(r.commits, want) {
		t.Errorf("commits %v, want %v", r.commits, want)
	}
	if j, err := r.Job(ctx, a.ID); err != nil || j.State != berth.JobSucceeded {
		t.Errorf("job after both updates: %v, %v; want succeeded", j, err)
	}
}
