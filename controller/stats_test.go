package controller

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// TestBacklogsAgreeWithARecount: through random sequences of
// submissions (arrays share a submission time), placements, starts,
// ends that retry, fail, succeed or are lost, cancels, backoffs running
// out, services restarted, handoffs to a federation peer, runs there and
// reroutes back, the backlog kept as jobs move (depth, and the second of
// the oldest submission, by queue), the job counters and the index of service jobs
// are, after every step, what a walk of every job counts.
func TestBacklogsAgreeWithARecount(t *testing.T) {
	t.Parallel()
	for seed := range uint64(24) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 29))
			h := newLifecycleHarness(t)
			h.worker(workerReg())
			gpu := workerReg()
			gpu.WorkerID, gpu.Host, gpu.Queues, gpu.Slots = "w2", "gpu-2", []string{"gpu"}, 2
			h.worker(gpu)
			queues := []string{berth.DefaultQueue, "gpu", "parked"} // no worker serves parked
			for step := range 400 {
				op := randomStep(t, h, rng, queues)
				if err := checkBacklogs(h.l); err != nil {
					t.Fatalf("step %d (%s): %v", step, op, err)
				}
			}
		})
	}
}

// TestMetricsAnswerWhileTheLoopIsBusy: Metrics reads what the loop
// published and does not wait for it (here held by a closure that has not
// returned), and a change the caller was told of (a submission, then its
// cancel) is in what it reads next.
func TestMetricsAnswerWhileTheLoopIsBusy(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC))
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Queue = berth.Argv{"true"}, "parked"
	jobs, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec, Array: 3, HoldUntilFits: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Metrics(t.Context())
	if err != nil || m.QueueDepth["parked"] != 3 || m.Jobs[berth.JobPending] != 3 || !m.OldestPending["parked"].Equal(jobs[0].CreatedAt) {
		t.Fatalf("after submitting 3: %+v, %v; want 3 pending in parked since %v", m, err, jobs[0].CreatedAt)
	}
	if _, err := c.Cancel(t.Context(), jobs[0].ID); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	if err := c.post(t.Context(), func() { close(held); <-release }); err != nil {
		t.Fatal(err)
	}
	defer close(release)
	<-held
	got := make(chan *Metrics, 1)
	go func() {
		m, err := c.Metrics(t.Context())
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	select {
	case m = <-got:
	case <-time.After(30 * time.Second): // a watchdog: Metrics returns at once, or waits for the loop for ever
		t.Fatal("Metrics waits for the loop")
	}
	if m == nil || m.QueueDepth["parked"] != 2 || m.Jobs[berth.JobCancelled] != 1 || m.Totals.JobsSubmitted != 3 {
		t.Fatalf("while the loop is held, after a cancel: %+v; want 2 pending, 1 cancelled, 3 submitted", m)
	}
}

// randomStep makes one random move on h and says which.
func randomStep(t *testing.T, h *harness, rng *rand.Rand, queues []string) string {
	t.Helper()
	now := func() time.Time { return h.clock.Now().UTC() }
	jobs := func(keep func(*jobState) bool) []*jobState {
		var out []*jobState
		for _, id := range slices.Sorted(maps.Keys(h.l.jobs)) {
			if js := h.l.jobs[id]; keep(js) {
				out = append(out, js)
			}
		}
		return out
	}
	pick := func(from []*jobState) *jobState {
		if len(from) == 0 {
			return nil
		}
		return from[rng.IntN(len(from))]
	}
	switch rng.IntN(9) {
	case 0, 1:
		spec := berth.DefaultJobSpec()
		spec.Command, spec.Queue, spec.Retries = []string{"true"}, queues[rng.IntN(len(queues))], rng.IntN(3)
		spec.Priority, spec.Preemptible = rng.IntN(100), rng.IntN(2) == 0
		req := &berth.SubmitRequest{JobSpec: spec, Array: rng.IntN(4)}
		if rng.IntN(4) == 0 {
			req.Kind, req.Name, req.Array = berth.KindService, "svc", 0
		}
		if err := req.Validate(); err != nil {
			t.Fatal(err)
		}
		h.step(func() { h.l.createJobs(req, "test") })
		return "submit"
	case 2:
		h.clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
		h.step(func() { h.l.requeueDue(now()) })
		return "time passes"
	case 3:
		var assigned []*attemptState
		for _, id := range slices.Sorted(maps.Keys(h.l.attempts)) {
			if as := h.l.attempts[id]; as.a.State == berth.AttemptAssigned {
				assigned = append(assigned, as)
			}
		}
		if len(assigned) > 0 {
			as := assigned[rng.IntN(len(assigned))]
			h.step(func() { h.l.markRunning(as, now()) })
		}
		return "start"
	case 4:
		ids := slices.Sorted(maps.Keys(h.l.attempts))
		if len(ids) == 0 {
			return "end (none)"
		}
		as := h.l.attempts[ids[rng.IntN(len(ids))]]
		st := []berth.AttemptState{berth.AttemptSucceeded, berth.AttemptFailed, berth.AttemptLost}[rng.IntN(3)]
		code := 0
		if st == berth.AttemptFailed {
			code = 1
		}
		h.step(func() { h.l.endAttempt(as, st, &code, "", now()) })
		return "end " + string(st)
	case 5:
		if js := pick(jobs(func(js *jobState) bool { return !js.federated() })); js != nil {
			h.step(func() { h.l.stopJob(js, cancelRequestedBy("test"), now()) })
		}
		return "cancel"
	case 6: // handed to a peer, as handOff does
		if js := pick(jobs(func(js *jobState) bool { return js.waiting() && !js.placed() })); js != nil {
			h.step(func() {
				if js.task != nil {
					h.l.queue.Remove(js.task)
				}
				delete(h.l.restarting, js)
				js.restarted()
				h.l.setCluster(js, "peer")
			})
		}
		return "hand off"
	case 7: // the peer runs it or ends it
		if js := pick(jobs((*jobState).federated)); js != nil {
			h.step(func() {
				if js.view().State == berth.JobPending && rng.IntN(2) == 0 {
					_ = h.l.transitionJob(js, berth.JobRunning, berth.Event{Time: now(), Type: berth.EventJobRunning})
					return
				}
				h.l.finishJob(js, berth.JobSucceeded, nil, "", now())
			})
		}
		return "peer runs"
	default: // lost on the peer and routed back here, as reroute does
		if js := pick(jobs((*jobState).federated)); js != nil {
			h.step(func() {
				h.l.setCluster(js, "")
				h.l.requeueEvent(js, berth.Event{Time: now(), Type: berth.EventJobRequeued, Reason: "lost"})
			})
		}
		return "reroute"
	}
}

// checkBacklogs recounts, walking every job, what the lifecycle keeps as
// jobs move, and says where the two differ.
func checkBacklogs(l *lifecycle) error {
	depth, oldest, states := map[string]int{}, map[string]time.Time{}, map[berth.JobState]int{}
	services := 0
	for _, js := range l.jobs {
		j := js.view()
		states[j.State]++
		if j.Kind == berth.KindService {
			if services++; l.services[js.id] != js {
				return fmt.Errorf("service job %s is not among the services", js.id)
			}
		}
		if j.State != berth.JobPending || j.Cluster != "" {
			continue
		}
		depth[j.Queue]++
		if t, ok := oldest[j.Queue]; !ok || j.CreatedAt.Before(t) {
			oldest[j.Queue] = j.CreatedAt
		}
	}
	if len(l.services) != services {
		return fmt.Errorf("%d services kept, a recount finds %d", len(l.services), services)
	}
	if len(l.stats.backlogs) != len(depth) {
		return fmt.Errorf("backlogs of %d queues, a recount finds %d: %v", len(l.stats.backlogs), len(depth), depth)
	}
	for q, n := range depth {
		b := l.stats.backlogs[q]
		if b == nil || b.n != n {
			return fmt.Errorf("queue %s: kept %+v, a recount finds %d pending", q, b, n)
		}
		if t, ok := b.created.least(); !ok || !t.Equal(oldest[q].Truncate(time.Second)) {
			return fmt.Errorf("queue %s: oldest kept %v, a recount finds %v (to the second below)", q, t, oldest[q])
		}
	}
	for _, st := range []berth.JobState{berth.JobPending, berth.JobRunning} {
		if l.stats.jobs[st] != states[st] {
			return fmt.Errorf("%d jobs counted %s, a recount finds %d", l.stats.jobs[st], st, states[st])
		}
	}
	return nil
}

// TestSubmitTimesKeepsTheLeast: the multiset behind a queue's oldest
// pending job gives its least time as times come and go in any order,
// repeated times counted as many times as added.
func TestSubmitTimesKeepsTheLeast(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var s submitTimes
	held := map[int64]int{}
	for range 5000 {
		if t := int64(rng.IntN(50)); rng.IntN(3) > 0 {
			s.add(t)
			held[t]++
		} else if held[t] > 0 {
			s.remove(t)
			if held[t]--; held[t] == 0 {
				delete(held, t)
			}
		}
		got, ok := s.least()
		if len(held) == 0 {
			if ok {
				t.Fatalf("least %v of an empty set", got)
			}
			continue
		}
		if want := slices.Min(slices.Collect(maps.Keys(held))); !ok || got.Unix() != want {
			t.Fatalf("least %v (%v), want %d; held %v", got.Unix(), ok, want, held)
		}
	}
}
