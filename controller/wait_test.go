package controller

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// submitAs submits one pending job of kind for user and returns its id.
func submitAs(t *testing.T, c *Controller, user, kind string) string {
	t.Helper()
	return submitSleep(t, c, func(spec *berth.JobSpec) { spec.User, spec.Kind = user, kind })
}

// waitCall is the outcome of a Wait started by startWait.
type waitCall struct {
	res *berth.WaitResult
	err error
}

// startWait starts Wait(ids, all, user) and returns once it waits for
// jobs (or has already answered); the answer comes on the channel.
func startWait(t *testing.T, c *Controller, ids []string, all bool, user string) <-chan waitCall {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	out := make(chan waitCall, 1)
	go func() {
		res, err := c.Wait(ctx, ids, all, user)
		out <- waitCall{res, err}
	}()
	for {
		var n int
		if err := c.do(t.Context(), func() { n = len(c.waiters) }); err != nil {
			t.Fatal(err)
		}
		if n > 0 || len(out) > 0 {
			return out
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWaitAllLeavesServicesOut: a wait for all answers once the batch job
// active at the call has ended, though a service still runs (it runs until
// stopped); the answer counts the service it left out. A service named by
// id is waited for.
func TestWaitAllLeavesServicesOut(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Now())
	svc := submitAs(t, c, "alice", berth.KindService)
	batch := submitAs(t, c, "alice", berth.KindBatch)

	wait := startWait(t, c, nil, true, "")
	select {
	case got := <-wait:
		t.Fatalf("wait for all answered with the batch job still pending: %+v, %v", got.res, got.err)
	default:
	}
	cancelJob(t, c, batch)
	got := <-wait
	if got.err != nil || !got.res.Done || got.res.Total != 1 || got.res.Counts[berth.JobCancelled] != 1 ||
		got.res.Pending != 0 || got.res.Services != 1 {
		t.Fatalf("wait for all with a service running = %+v, %v; want done, the 1 batch job cancelled, 1 service left out", got.res, got.err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	res, err := c.Wait(ctx, []string{svc}, true, "")
	if err != nil || res.Done || res.Total != 1 || res.Pending != 1 || res.Services != 0 ||
		len(res.PendingIDs) != 1 || res.PendingIDs[0] != svc {
		t.Fatalf("wait for all and the service by id = %+v, %v; want the service waited for, still active", res, err)
	}
}

// TestWaitAllOfOneUser: a wait for all of one user's jobs answers once
// that user's jobs have ended, another user's still pending.
func TestWaitAllOfOneUser(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Now())
	alices := submitAs(t, c, "alice", berth.KindBatch)
	submitAs(t, c, "bob", berth.KindBatch)

	wait := startWait(t, c, nil, true, "alice")
	cancelJob(t, c, alices)
	got := <-wait
	if got.err != nil || !got.res.Done || got.res.Total != 1 || got.res.Counts[berth.JobCancelled] != 1 {
		t.Fatalf("alice's wait for all = %+v, %v; want done with her 1 job cancelled, bob's not counted", got.res, got.err)
	}
}
