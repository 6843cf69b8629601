package controller

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/postgres"
	"github.com/berth-dev/berth/postgres/pgtest"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/wire"
)

// TestAssignedJobKeepsItsAttemptOverARestart restarts the server while a
// job's only attempt is assigned and not yet started, a state its stored
// row does not count: the restarted controller counts it, so the failure
// that follows spends the job's one attempt (retries 0) and ends it.
func TestAssignedJobKeepsItsAttemptOverARestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "berth.db")
	now := time.Now()
	reg := workerReg()
	c, stop := startOn(t, path, now)
	agent := registerAgent(t, c, reg)
	spec := berth.DefaultJobSpec()
	spec.Command = berth.Argv{"false"}
	jobs, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec})
	if err != nil {
		t.Fatal(err)
	}
	id := jobs[0].ID
	assign := agent.await(wire.TypeJobAssign).(*wire.JobAssign)
	stored, err := c.store.Job(t.Context(), id)
	if err != nil || stored.State != berth.JobPending || stored.Attempts != 0 {
		t.Fatalf("stored job while assigned = %+v, %v; want pending with 0 attempts", stored, err)
	}
	stop()

	c, _ = startOn(t, path, now)
	reg.Running = []string{assign.AttemptID}
	agent = connectAgent(t, c, reg)
	if ack := agent.await(wire.TypeAck).(*wire.Ack); ack.Error != "" || len(ack.Keep) != 1 || ack.Keep[0] != assign.AttemptID {
		t.Fatalf("register ack = %+v, want attempt %s kept", ack, assign.AttemptID)
	}
	exit := 1
	agent.send(wire.TypeJobResult, &wire.JobResult{AttemptID: assign.AttemptID, State: berth.AttemptFailed, ExitCode: &exit})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if res, err := c.Wait(ctx, []string{id}, false, ""); err != nil || !res.Done {
		t.Fatalf("wait for %s: %+v, %v", id, res, err)
	}
	j, err := c.store.Job(t.Context(), id)
	if err != nil || j.State != berth.JobFailed || j.Attempts != 1 {
		t.Fatalf("job after its one attempt failed = %+v, %v; want failed after 1 attempt", j, err)
	}
}

// TestRestartKnowsEveryActiveJobBeforeTheFirstPass stops a controller as
// kill -9 would (it never stops: nothing it did not already make durable
// reaches the store) with an array of 25,000 jobs queued, enough for the
// store to hand them out in parts, jobs of their own beside it, one job
// placed and one job of the array cancelled, and starts another on the
// same store, on each driver. Before its first pass the new one knows
// every acknowledged active job, in its state, the queued ones in the
// queue in id order, and not the cancelled one; then a new job runs.
func TestRestartKnowsEveryActiveJobBeforeTheFirstPass(t *testing.T) {
	t.Parallel()
	drivers := map[string]func(t *testing.T) func() (store.Store, error){
		"sqlite": func(t *testing.T) func() (store.Store, error) {
			path := filepath.Join(t.TempDir(), "berth.db")
			return func() (store.Store, error) { return sqlite.Open(t.Context(), path) }
		},
		"postgres": func(t *testing.T) func() (store.Store, error) {
			url := pgtest.NewDatabase(t)
			return func() (store.Store, error) { return postgres.Open(t.Context(), url) }
		},
	}
	for name, driver := range drivers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRestartKnowsEveryActiveJob(t, driver(t))
		})
	}
}

// testRestartKnowsEveryActiveJob is the test above on the store each
// call of open opens anew.
func testRestartKnowsEveryActiveJob(t *testing.T, open func() (store.Store, error)) {
	ctx := t.Context()
	now := time.Now()
	start := func() *Controller {
		st, err := open()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		c := New(Config{Store: st, Now: func() time.Time { return now }})
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := start()
	agent := registerAgent(t, a, workerReg())
	placed := submitSleep(t, a, func(*berth.JobSpec) {})
	agent.acceptNext() // its attempt was durable before the agent was told
	const n = 25_000
	spec := berth.DefaultJobSpec()
	spec.Queue, spec.Command = "parked", berth.Argv{"true"}
	array, err := a.Submit(ctx, &berth.SubmitRequest{JobSpec: spec, Array: n})
	if err != nil {
		t.Fatal(err)
	}
	var queued []string
	for _, j := range array {
		queued = append(queued, j.ID)
	}
	for _, env := range []string{"a", "b", "c"} { // jobs of their own
		own := spec
		own.Env = map[string]string{"RUN": env}
		jobs, err := a.Submit(ctx, &berth.SubmitRequest{JobSpec: own})
		if err != nil {
			t.Fatal(err)
		}
		queued = append(queued, jobs[0].ID)
	}
	cancelled := array[7].ID
	cancelJob(t, a, cancelled)
	queued = slices.DeleteFunc(queued, func(id string) bool { return id == cancelled })
	// a is never stopped: killed, as far as the store can tell.

	b := start()
	t.Cleanup(func() { b.Stop(context.Background()) })
	err = b.do(ctx, func() { // on the loop, before anything else it runs
		if n := b.stats.passes.snapshot().Count; n != 0 {
			t.Errorf("%d passes before the first look at the jobs", n)
		}
		if len(b.jobs) != len(queued)+1 {
			t.Errorf("%d jobs known after the restart, want %d", len(b.jobs), len(queued)+1)
		}
		if js := b.jobs[placed]; js == nil || !js.placed() {
			t.Errorf("placed job %s after the restart: %+v, want it with its attempt", placed, js)
		}
		if b.jobs[cancelled] != nil {
			t.Errorf("cancelled job %s known as active after the restart", cancelled)
		}
		for _, id := range queued {
			if js := b.jobs[id]; js == nil || js.view().State != berth.JobPending || js.task == nil {
				t.Fatalf("queued job %s after the restart: %+v, want it pending and queued", id, js)
			}
		}
		if b.queue.Len() != len(queued) {
			t.Errorf("queue holds %d jobs, want %d", b.queue.Len(), len(queued))
		}
		var order []string // the queue's order: the array's, by id, as submitted
		b.queue.Ordered(now, func(task *scheduler.Task) bool {
			order = append(order, task.JobID)
			return true
		})
		if !slices.IsSorted(order) {
			t.Errorf("the queue's order after the restart is not the jobs' submission order")
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	reg := workerReg()
	reg.WorkerID, reg.Host = "w2", "gpu-2"
	agent = registerAgent(t, b, reg)
	id := submitSleep(t, b, func(*berth.JobSpec) {})
	agent.exit(agent.acceptNext(), 0)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if res, err := b.Wait(wctx, []string{id}, false, ""); err != nil || !res.Done {
		t.Fatalf("a new job after the restart: %+v, %v", res, err)
	}
}
