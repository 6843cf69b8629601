package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// recorder is a real store that records what each Write gets and,
// when hold is set, keeps the first Write from starting until hold is
// closed (it closes entered once that Write is waiting).
type recorder struct {
	store.Store

	hold    chan struct{}
	entered chan struct{}

	mu       sync.Mutex
	writes   [][]string     // ids of the new jobs of each Write, in order
	writeOf  map[string]int // new job id → index of the Write it was in
	returned int            // Writes that have returned
}

func newRecorder(s store.Store) *recorder {
	return &recorder{Store: s, writeOf: map[string]int{}}
}

func (r *recorder) Write(ctx context.Context, b *store.Batch) error {
	r.mu.Lock()
	n := len(r.writes)
	var ids []string
	for _, j := range b.Jobs {
		ids = append(ids, j.ID)
		r.writeOf[j.ID] = n
	}
	r.writes = append(r.writes, ids)
	r.mu.Unlock()
	if n == 0 && r.hold != nil {
		close(r.entered)
		<-r.hold
	}
	err := r.Store.Write(ctx, b)
	r.mu.Lock()
	r.returned++
	r.mu.Unlock()
	return err
}

func (r *recorder) writeCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.writes)
}

var testIDs berth.IDGen

func newJob() *berth.Job {
	return &berth.Job{ID: testIDs.New(base), JobSpec: berth.JobSpec{Queue: "gpu", Kind: berth.KindBatch, Command: berth.Argv{"true"}},
		State: berth.JobPending, CreatedAt: base}
}

// results collects the callbacks of commits.
type results struct {
	mu    sync.Mutex
	order []int
	errs  map[int]error
	all   chan struct{}
	want  int
}

func newResults(want int) *results {
	return &results{errs: map[int]error{}, all: make(chan struct{}), want: want}
}

// done returns the callback of commit i.
func (r *results) done(i int) func(error) {
	return func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.order = append(r.order, i)
		r.errs[i] = err
		if len(r.order) == r.want {
			close(r.all)
		}
	}
}

func (r *results) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.all:
	case <-t.Context().Done():
		t.Fatal("callbacks did not all run")
	}
}

func (r *results) get(i int) (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err, ok := r.errs[i]
	return err, ok
}

func TestCommitterCallbacksInOrderAfterWrite(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := t.Context()
		r := newRecorder(open(t))
		c := store.NewCommitter(r)
		c.Start()
		defer c.Stop()

		const n = 100
		res := newResults(n)
		for i := range n {
			b := &store.Batch{}
			if i%10 != 9 { // every tenth batch is empty
				b.Jobs = []*berth.Job{newJob()}
			}
			var id string
			if len(b.Jobs) > 0 {
				id = b.Jobs[0].ID
			}
			done := res.done(i)
			c.Commit(b, func(err error) {
				if id != "" {
					// The Write that carried the job has returned, and the
					// job is in the store.
					r.mu.Lock()
					w, ok := r.writeOf[id]
					returned := r.returned
					r.mu.Unlock()
					if !ok || returned <= w {
						t.Errorf("callback of commit %d ran before its Write returned", i)
					}
					if _, err := r.Store.Job(ctx, id); err != nil {
						t.Errorf("callback of commit %d ran before its job was stored: %v", i, err)
					}
				}
				done(err)
			})
		}
		res.wait(t)
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		if !slices.Equal(res.order, want) {
			t.Errorf("callbacks ran in order %v, want submission order", res.order)
		}
		for i := range n {
			if err, _ := res.get(i); err != nil {
				t.Errorf("commit %d: %v", i, err)
			}
		}
	})
}

func TestCommitterMergesBatchesQueuedDuringWrite(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := t.Context()
		r := newRecorder(open(t))
		r.hold, r.entered = make(chan struct{}), make(chan struct{})
		c := store.NewCommitter(r)
		c.Start()
		defer c.Stop()

		const queued = 9
		res := newResults(1 + queued)
		first := newJob()
		c.Commit(&store.Batch{Jobs: []*berth.Job{first}}, res.done(0))
		<-r.entered // the first Write is in flight

		var ids []string
		var updated *berth.Job
		for i := 1; i <= queued; i++ {
			j := newJob()
			ids = append(ids, j.ID)
			b := &store.Batch{Jobs: []*berth.Job{j}}
			if i == 5 {
				// An update of a job created by an earlier queued batch.
				updated = j
				b.JobUpdates = []store.JobUpdate{{ID: ids[0], State: berth.JobRunning, Attempts: 1, StartedAt: base}}
			}
			c.Commit(b, res.done(i))
		}
		if _, ok := res.get(0); ok {
			t.Fatal("callback of the first commit ran while its Write was held")
		}
		close(r.hold)
		res.wait(t)

		r.mu.Lock()
		writes := slices.Clone(r.writes)
		r.mu.Unlock()
		if len(writes) != 2 {
			t.Fatalf("%d Writes (%v), want 2: the first and one for all %d batches queued behind it", len(writes), writes, queued)
		}
		if !slices.Equal(writes[0], []string{first.ID}) || !slices.Equal(writes[1], ids) {
			t.Errorf("Writes = %v, want [[%s] %v]", writes, first.ID, ids)
		}
		for i := range 1 + queued {
			if err, _ := res.get(i); err != nil {
				t.Errorf("commit %d: %v", i, err)
			}
		}
		if !slices.Equal(res.order, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Errorf("callbacks ran in order %v", res.order)
		}
		j, err := r.Store.Job(ctx, ids[0])
		if err != nil || j.State != berth.JobRunning {
			t.Errorf("job %s updated by a later queued batch: %+v, %v; want running", ids[0], j, err)
		}
		if j, err := r.Store.Job(ctx, updated.ID); err != nil || j.State != berth.JobPending {
			t.Errorf("job %s: %+v, %v; want pending", updated.ID, j, err)
		}
	})
}

func TestCommitterErrorIsSticky(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := t.Context()
		r := newRecorder(open(t))
		c := store.NewCommitter(r)
		c.Start()
		defer c.Stop()

		commit := func(b *store.Batch) error { return commitAndWait(t, c, b) }
		good := newJob()
		if err := commit(&store.Batch{Jobs: []*berth.Job{good}}); err != nil {
			t.Fatalf("first commit: %v", err)
		}
		lost := newJob()
		errBad := commit(&store.Batch{Jobs: []*berth.Job{lost},
			JobUpdates: []store.JobUpdate{{ID: "no-such-job", State: berth.JobRunning}}})
		if errBad == nil {
			t.Fatal("commit updating a missing job succeeded")
		}
		writes := r.writeCount()

		later := newJob()
		for i, b := range []*store.Batch{{Jobs: []*berth.Job{later}}, {}} {
			if err := commit(b); !errors.Is(err, errBad) {
				t.Errorf("commit %d after the failure: error %v, want the failure %v", i, err, errBad)
			}
		}
		if n := r.writeCount(); n != writes {
			t.Errorf("%d more Writes after the failure, want none", n-writes)
		}
		for _, id := range []string{lost.ID, later.ID} {
			if _, err := r.Store.Job(ctx, id); berth.ErrorCode(err) != berth.ECodeNotFound {
				t.Errorf("job %s of a failed commit: %v, want not found", id, err)
			}
		}
		if _, err := r.Store.Job(ctx, good.ID); err != nil {
			t.Errorf("job %s committed before the failure: %v", good.ID, err)
		}
	})
}

// commitAndWait commits b and returns the error its callback gets.
func commitAndWait(t *testing.T, c *store.Committer, b *store.Batch) error {
	t.Helper()
	ch := make(chan error, 1)
	c.Commit(b, func(err error) { ch <- err })
	select {
	case err := <-ch:
		return err
	case <-t.Context().Done():
		t.Fatal("callback did not run")
		return nil
	}
}

// TestCommitterPrepareRunsAlongsideWrite checks that Prepare runs while
// the store writes the batch, and that the batch is committed only once
// Prepare has returned.
func TestCommitterPrepareRunsAlongsideWrite(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := t.Context()
		r := newRecorder(open(t))
		r.hold, r.entered = make(chan struct{}), make(chan struct{})
		close(r.hold) // the first Write only signals that it has begun
		c := store.NewCommitter(r)
		release, prepared := make(chan struct{}), make(chan []*berth.Event, 1)
		head := &store.AuditHead{Seq: 7, Hash: strings.Repeat("c", 64)}
		c.Prepare = func(b *store.Batch) (*store.AuditHead, error) {
			<-release
			prepared <- b.Audit
			return head, nil
		}
		c.Start()
		defer c.Stop()

		j := newJob()
		audit := []*berth.Event{{Type: "job.submitted", JobID: j.ID}}
		res := newResults(1)
		c.Commit(&store.Batch{Jobs: []*berth.Job{j}, Audit: audit}, res.done(0))
		select {
		case <-r.entered: // the Write began while Prepare is held
		case <-time.After(10 * time.Second):
			close(release) // lets Stop end
			t.Fatal("the store's Write waited for Prepare")
		}
		if _, err := r.Store.Job(ctx, j.ID); berth.ErrorCode(err) != berth.ECodeNotFound {
			t.Fatalf("job readable before Prepare returned: %v", err)
		}
		if _, ok := res.get(0); ok {
			t.Fatal("callback ran before Prepare returned")
		}
		close(release)
		res.wait(t)
		if err, _ := res.get(0); err != nil {
			t.Fatalf("commit: %v", err)
		}
		if got := <-prepared; len(got) != 1 || got[0].JobID != j.ID {
			t.Errorf("Prepare got audit events %+v, want the batch's", got)
		}
		if _, err := r.Store.Job(ctx, j.ID); err != nil {
			t.Errorf("job after the commit: %v", err)
		}
		if got, err := r.Store.AuditHead(ctx); err != nil || got != *head {
			t.Errorf("audit head after the commit = %+v, %v; want Prepare's %+v", got, err, *head)
		}
	})
}

// TestCommitterPrepareErrorWritesNothing checks that a batch whose
// Prepare fails is not committed, though the store made its changes, and
// that the failure is sticky.
func TestCommitterPrepareErrorWritesNothing(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := t.Context()
		st := open(t)
		c := store.NewCommitter(st)
		errAudit := errors.New("audit log full")
		fail := false
		c.Prepare = func(*store.Batch) (*store.AuditHead, error) {
			if fail {
				return nil, errAudit
			}
			return nil, nil
		}
		c.Start()
		defer c.Stop()

		good := newJob()
		if err := commitAndWait(t, c, &store.Batch{Jobs: []*berth.Job{good}}); err != nil {
			t.Fatalf("first commit: %v", err)
		}
		fail = true // the writer goroutine reads it after this commit is queued
		lost, later := newJob(), newJob()
		update := store.JobUpdate{ID: good.ID, State: berth.JobRunning, Attempts: 1, StartedAt: base}
		if err := commitAndWait(t, c, &store.Batch{Jobs: []*berth.Job{lost}, JobUpdates: []store.JobUpdate{update}}); !errors.Is(err, errAudit) {
			t.Fatalf("commit with a failing Prepare: %v, want %v", err, errAudit)
		}
		if err := commitAndWait(t, c, &store.Batch{Jobs: []*berth.Job{later}}); !errors.Is(err, errAudit) {
			t.Errorf("commit after the failure: %v, want %v", err, errAudit)
		}
		for _, id := range []string{lost.ID, later.ID} {
			if _, err := st.Job(ctx, id); berth.ErrorCode(err) != berth.ECodeNotFound {
				t.Errorf("job %s of a failed commit: %v, want not found", id, err)
			}
		}
		if got, err := st.Job(ctx, good.ID); err != nil || got.State != berth.JobPending {
			t.Errorf("job of the first commit = %+v, %v; want it stored and still pending", got, err)
		}
	})
}

func TestCommitterCommitAfterStop(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := t.Context()
		r := newRecorder(open(t))
		c := store.NewCommitter(r)
		c.Start()
		c.Stop()

		j := newJob()
		ch := make(chan error, 1)
		c.Commit(&store.Batch{Jobs: []*berth.Job{j}}, func(err error) { ch <- err })
		select {
		case err := <-ch:
			if !errors.Is(err, store.ErrStopped) {
				t.Errorf("commit after Stop: %v, want ErrStopped", err)
			}
			if berth.ErrorCode(err) != berth.ECodeUnavailable {
				t.Errorf("commit after Stop: code %q, want %q", berth.ErrorCode(err), berth.ECodeUnavailable)
			}
		case <-ctx.Done():
			t.Fatal("callback of a commit after Stop did not run")
		}
		if n := r.writeCount(); n != 0 {
			t.Errorf("%d Writes, want none", n)
		}
		if _, err := r.Store.Job(ctx, j.ID); berth.ErrorCode(err) != berth.ECodeNotFound {
			t.Errorf("job committed after Stop: %v, want not found", err)
		}
	})
}

func TestCommitterStopWritesPending(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := t.Context()
		r := newRecorder(open(t))
		c := store.NewCommitter(r)

		const n = 5
		res := newResults(n)
		var jobs []*berth.Job
		for i := range n {
			j := newJob()
			jobs = append(jobs, j)
			c.Commit(&store.Batch{Jobs: []*berth.Job{j}}, res.done(i))
		}
		if w := r.writeCount(); w != 0 {
			t.Fatalf("%d Writes before Start, want none", w)
		}
		c.Start()
		c.Stop()
		// Stop has returned: every pending batch is written and called back.
		for i, j := range jobs {
			err, ok := res.get(i)
			if !ok {
				t.Errorf("commit %d was not called back before Stop returned", i)
			} else if err != nil {
				t.Errorf("commit %d: %v", i, err)
			}
			if _, err := r.Store.Job(ctx, j.ID); err != nil {
				t.Errorf("job %d not stored after Stop: %v", i, err)
			}
		}
	})
}

func TestCommitterStopWaitsForWriteInFlight(t *testing.T) {
	t.Parallel()
	onEachDriver(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		ctx := t.Context()
		r := newRecorder(open(t))
		r.hold, r.entered = make(chan struct{}), make(chan struct{})
		c := store.NewCommitter(r)
		c.Start()

		res := newResults(3)
		var jobs []*berth.Job
		for i := range 3 {
			j := newJob()
			jobs = append(jobs, j)
			c.Commit(&store.Batch{Jobs: []*berth.Job{j}}, res.done(i))
			if i == 0 {
				<-r.entered
			}
		}
		stopped := make(chan struct{})
		go func() {
			c.Stop()
			close(stopped)
		}()
		select {
		case <-stopped:
			t.Fatal("Stop returned while a Write was in flight")
		default:
		}
		close(r.hold)
		<-stopped
		for i, j := range jobs {
			if err, ok := res.get(i); !ok || err != nil {
				t.Errorf("commit %d: called back %v, error %v; want called back with nil before Stop returned", i, ok, err)
			}
			if _, err := r.Store.Job(ctx, j.ID); err != nil {
				t.Errorf("job %d not stored after Stop: %v", i, err)
			}
		}
	})
}
