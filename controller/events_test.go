package controller

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth"
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
	agent.exit(agent.acceptNext(), 3)
	var after uint64
	for { // readEvents fails the test if the event never comes
		for _, e := range readEvents(t, c, after) {
			after = e.Seq
			if e.Type == berth.EventJobFailed && e.JobID == jobs[0].ID {
				if e.ExitCode == nil || *e.ExitCode != 3 {
					t.Fatalf("job.failed event %+v: exit code %v, want 3", e, e.ExitCode)
				}
				return
			}
		}
	}
}
