package controller

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth"
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
