package controller

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// TestEndEventsCarryTheExitCode checks that a job's end event names the
// exit code its process reported, for SSE readers and webhooks that act on
// it without fetching the job.
func TestEndEventsCarryTheExitCode(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Now())
	agent := registerAgent(t, c, workerReg())
	spec := berth.DefaultJobSpec()
	spec.Command = berth.Argv{"false"}
	jobs, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec})
	if err != nil {
		t.Fatal(err)
	}
	assign := agent.await(wire.TypeJobAssign).(*wire.JobAssign)
	agent.send(wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: assign.AttemptID})
	exit := 3
	agent.send(wire.TypeJobResult, &wire.JobResult{AttemptID: assign.AttemptID, State: berth.AttemptFailed, ExitCode: &exit})
	var after uint64
	for { // readEvents fails the test if the event never comes
		for _, e := range readEvents(t, c, after) {
			after = e.Seq
			if e.Type == EventJobFailed && e.JobID == jobs[0].ID {
				if e.ExitCode == nil || *e.ExitCode != 3 {
					t.Fatalf("job.failed event %+v: exit code %v, want 3", e, e.ExitCode)
				}
				return
			}
		}
	}
}
