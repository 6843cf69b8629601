package controller

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// TestWorkersCountTheGPUsInUse checks a worker's count of the GPUs its
// attempts hold, as berth workers shows it: taken at assignment, given
// back when the attempt ends.
func TestWorkersCountTheGPUsInUse(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Now())
	reg := workerReg()
	reg.Slots, reg.GPUs = 2, []berth.GPU{{Index: 0, Model: "T4"}, {Index: 1, Model: "T4"}, {Index: 2, Model: "T4"}}
	agent := registerAgent(t, c, reg)
	inUse := func() int {
		t.Helper()
		ws, err := c.Workers(t.Context())
		if err != nil || len(ws) != 1 {
			t.Fatalf("workers: %v, %v", ws, err)
		}
		return ws[0].GPUsInUse
	}
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Resources.GPUs = berth.Argv{"true"}, 2
	jobs, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec})
	if err != nil {
		t.Fatal(err)
	}
	assign := agent.await(wire.TypeJobAssign).(*wire.JobAssign)
	if n := inUse(); n != 2 {
		t.Errorf("GPUs in use while a 2-GPU job is assigned: %d, want 2", n)
	}
	agent.send(wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: assign.AttemptID})
	agent.exit(assign, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if res, err := c.Wait(ctx, []string{jobs[0].ID}, false, ""); err != nil || !res.Done {
		t.Fatalf("wait: %+v, %v", res, err)
	}
	if n := inUse(); n != 0 {
		t.Errorf("GPUs in use once the job ended: %d, want 0", n)
	}
}

// TestControlCountsTheHostsWorkers checks that turning a host off says how
// many workers it has: 1 for a registered one, 0 for a name no agent
// joined as (a typo, most likely).
func TestControlCountsTheHostsWorkers(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Now())
	agent := connectAgent(t, c, &wire.Register{Version: wire.Version, WorkerID: "w1", Host: "gpu-1", CPUs: 4, Memory: 8 << 30, Slots: 1})
	if ack := agent.await(wire.TypeAck).(*wire.Ack); ack.Error != "" {
		t.Fatalf("register refused: %s", ack.Error)
	}
	for host, want := range map[string]int{"gpu-1": 1, "gpu1": 0} {
		resp, err := c.SetWorkerControl(t.Context(), host, berth.ControlRequest{DesiredState: berth.DesiredOff, StopPolicy: berth.StopDrain})
		if err != nil || resp.Workers != want {
			t.Errorf("off %s: %+v, %v; want %d workers", host, resp, err, want)
		}
	}
}
