package controller

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// submitChild submits one job in queue under parent ("" for none) and
// returns its id.
func submitChild(t *testing.T, c *Controller, queue, parent string) string {
	t.Helper()
	return submitSleep(t, c, func(spec *berth.JobSpec) { spec.Queue, spec.Parent = queue, parent })
}

// settled returns job id as stored once the controller's writes so far
// are durable.
func settled(t *testing.T, c *Controller, id string) *berth.Job {
	t.Helper()
	var written <-chan struct{}
	if err := c.do(t.Context(), func() { written = c.durable() }); err != nil {
		t.Fatal(err)
	}
	if err := c.awaitDurable(t.Context(), written); err != nil {
		t.Fatal(err)
	}
	j, err := c.store.Job(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestCancellingAParentCancelsItsTree: cancelling a job cancels its
// children and theirs, also after a restart, naming the parent; other jobs
// stay.
func TestCancellingAParentCancelsItsTree(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "berth.db")
	now := time.Now()
	c, stop := startOn(t, path, now)
	parent := submitChild(t, c, "q", "")
	child := submitChild(t, c, "q", parent)
	grandchild := submitChild(t, c, "q", child)
	other := submitChild(t, c, "q", "")
	stop()

	c, _ = startOn(t, path, now) // the tree is rebuilt from the store
	cancelJob(t, c, parent)
	for _, id := range []string{child, grandchild} {
		j := settled(t, c, id)
		if j.State != berth.JobCancelled || !strings.Contains(j.Reason, "parent") {
			t.Errorf("job %s under the cancelled parent: %s, %q; want cancelled, naming its parent", id, j.State, j.Reason)
		}
	}
	if j := settled(t, c, other); j.State != berth.JobPending {
		t.Errorf("unrelated job: %s, want pending", j.State)
	}
	if j := settled(t, c, child); !strings.Contains(j.Reason, "parent "+parent+", which was cancelled") {
		t.Errorf("child's reason %q, want it to name parent %s", j.Reason, parent)
	}
}

// TestAFailedParentCancelsItsChildren: a parent that fails cancels its
// children; one that succeeds leaves them be.
func TestAFailedParentCancelsItsChildren(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Now())
	agent := registerAgent(t, c, workerReg())
	for _, tc := range []struct {
		exit int
		want berth.JobState // of the child, in a queue no worker serves
	}{{1, berth.JobCancelled}, {0, berth.JobPending}} {
		parent := submitChild(t, c, berth.DefaultQueue, "")
		child := submitChild(t, c, "elsewhere", parent)
		agent.exit(agent.acceptNext(), tc.exit)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		res, err := c.Wait(ctx, []string{parent}, false, "")
		cancel()
		if err != nil || !res.Done {
			t.Fatalf("wait for the parent: %+v, %v", res, err)
		}
		if j := settled(t, c, child); j.State != tc.want {
			t.Errorf("parent exited %d: child %s, want %s", tc.exit, j.State, tc.want)
		}
	}
}

// TestParentMustBeLive: a parent that does not exist is invalid, one
// that failed or was cancelled a conflict; nothing is stored.
func TestParentMustBeLive(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Now())
	cancelled := submitChild(t, c, "q", "")
	cancelJob(t, c, cancelled)
	var ids berth.IDGen
	for _, tc := range []struct {
		parent, code string
	}{
		{"01JPARENT0000000000000000", berth.ECodeInvalid}, // not an id's shape
		{ids.New(time.Now()), berth.ECodeInvalid},         // no such job
		{cancelled, berth.ECodeConflict},
	} {
		spec := berth.DefaultJobSpec()
		spec.Command, spec.Parent = berth.Argv{"true"}, tc.parent
		_, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec})
		var e *berth.Error
		if !errors.As(err, &e) || e.Code != tc.code || e.Field != "parent" {
			t.Errorf("parent %s: %v; want %s on parent", tc.parent, err, tc.code)
		}
	}
	if n := storedJobs(t, c); n != 1 {
		t.Errorf("%d jobs stored, want only the cancelled one", n)
	}
}

// TestCancelMatching: a cancel by filter stops every active job matching
// all its filters, with their trees, in one request; a running match is
// stopped on its agent and answered as stopping; the rest stay.
func TestCancelMatching(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Now())
	agent := registerAgent(t, c, workerReg())
	named := func(name, queue, parent string) string {
		return submitSleep(t, c, func(spec *berth.JobSpec) { spec.Name, spec.Queue, spec.Parent = name, queue, parent })
	}
	running := named("driver", berth.DefaultQueue, "")
	assign := agent.acceptNext()
	pending := named("driver", "q", "")
	child := named("step", "q", pending)
	step := named("step", "q", "")
	other := named("other", "q", "")

	if _, err := c.CancelMatching(t.Context(), berth.CancelRequest{State: berth.JobPending}); berth.ErrorCode(err) != berth.ECodeInvalid {
		t.Errorf("cancel with only a state: %v, want invalid", err)
	}
	jobs, err := c.CancelMatching(t.Context(), berth.CancelRequest{Name: "driver"})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].ID != running || jobs[1].ID != pending {
		t.Fatalf("cancelled %d jobs, want the two drivers, oldest first", len(jobs))
	}
	if jobs[0].State != berth.JobRunning || jobs[1].State != berth.JobCancelled {
		t.Errorf("answered %s and %s, want the running driver stopping and the pending one cancelled", jobs[0].State, jobs[1].State)
	}
	if cancel := agent.await(wire.TypeJobCancel).(*wire.JobCancel); cancel.AttemptID != assign.AttemptID {
		t.Errorf("agent told to stop %s, want the running driver's attempt %s", cancel.AttemptID, assign.AttemptID)
	}
	if j := settled(t, c, child); j.State != berth.JobCancelled {
		t.Errorf("the pending driver's child: %s, want cancelled with it", j.State)
	}
	jobs, err = c.CancelMatching(t.Context(), berth.CancelRequest{Name: "step", Queue: "q"})
	if err != nil || len(jobs) != 1 || jobs[0].ID != step {
		t.Errorf("cancel the steps left: %d jobs, %v; want only %s", len(jobs), err, step)
	}
	if j := settled(t, c, other); j.State != berth.JobPending {
		t.Errorf("the job no filter matched: %s, want pending", j.State)
	}
}
