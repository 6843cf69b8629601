package controller

import (
	"fmt"
	"iter"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/sqlite"
)

// rentableFunc yields the workers it returns.
type rentableFunc func() []*scheduler.Worker

func (f rentableFunc) Reach(*berth.JobSpec) iter.Seq[*scheduler.Worker] {
	return func(yield func(*scheduler.Worker) bool) {
		for _, w := range f() {
			if !yield(w) {
				return
			}
		}
	}
}

// TestRentableReachAdmits: with an A100 worker only, a job asking for a
// 4090 is refused as unsatisfiable; with a pool that rents 4090s it is
// admitted and shows in the pending demand once it has waited past the
// cut-off, beside the hosts' activity; a pool event is published.
func TestRentableReachAdmits(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	reg := workerReg()
	reg.GPUs = []berth.GPU{{Index: 0, Model: "NVIDIA A100-SXM4-80GB", Memory: 80 << 30}}
	ask4090 := func(s *berth.JobSpec) { s.Resources.GPUs, s.Resources.GPUType = 1, "4090" }

	plain, _ := startOn(t, filepath.Join(t.TempDir(), "plain.db"), now)
	registerAgent(t, plain, reg)
	spec := berth.DefaultJobSpec()
	spec.Command = berth.Argv{"true"}
	ask4090(&spec)
	if _, err := plain.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec}); berth.ErrorCode(err) != berth.ECodeUnsatisfiable {
		t.Fatalf("no pool: submit 4090 = %v; want unsatisfiable", err)
	}

	pool := &scheduler.Worker{ID: "pool/rent", Host: "pool/rent", GPUs: []berth.GPU{{Model: "RTX 4090"}}, CPUs: 1 << 20, Memory: 1 << 60}
	c, _ := startOnWith(t, filepath.Join(t.TempDir(), "pool.db"), now, func(*Config, *sqlite.Store) {})
	c.SetRentable(rentableFunc(func() []*scheduler.Worker { return []*scheduler.Worker{pool} }))
	if c.Registered("gpu-1") {
		t.Fatal("Registered(gpu-1) before its agent registered")
	}
	registerAgent(t, c, reg)
	if !c.Registered("gpu-1") || c.Registered("gpu-2") {
		t.Fatalf("Registered(gpu-1), Registered(gpu-2) = %v, %v; want true, false", c.Registered("gpu-1"), c.Registered("gpu-2"))
	}
	id := submitSleep(t, c, ask4090)
	spec.Resources.GPUType = "H100"
	if _, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec}); berth.ErrorCode(err) != berth.ECodeUnsatisfiable {
		t.Fatalf("a pool of 4090s: submit H100 = %v; want unsatisfiable", err)
	}

	view, err := c.PendingDemand(t.Context(), now)
	if err != nil || len(view.Demand) != 0 {
		t.Fatalf("demand before the cut-off = %+v, %v; want none", view, err)
	}
	view, err = c.PendingDemand(t.Context(), now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(view.Demand) != 1 || view.Demand[0].Jobs != 1 || view.Demand[0].Resources.GPUType != "4090" || !view.Demand[0].Since.Equal(now) {
		t.Fatalf("demand of job %s = %+v; want one 4090 job since %s", id, view.Demand, now)
	}
	if len(view.Hosts) != 1 || view.Hosts[0] != (HostActivity{Host: "gpu-1", Connected: true}) {
		t.Fatalf("hosts = %+v; want gpu-1 connected and idle", view.Hosts)
	}

	if err := c.RecordPoolEvent(t.Context(), berth.Event{Type: berth.EventPoolCapped, Pool: "rent", Reason: "max instances 4"}); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range readEvents(t, c, 0) {
		found = found || e.Type == berth.EventPoolCapped && e.Pool == "rent" && e.Time.Equal(now) && e.Seq != 0
	}
	if !found {
		t.Fatalf("no pool.capped event for pool rent")
	}
}

// TestPendingDemandGroupsByShape: jobs with no label constraints (none
// or an empty map) are grouped by their shape alone, jobs with labels by
// their labels too, and each group counts its jobs and its oldest.
func TestPendingDemandGroupsByShape(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), now)
	submit := func(array int, edit func(s *berth.JobSpec)) {
		t.Helper()
		spec := berth.DefaultJobSpec()
		spec.Command, spec.Resources.GPUs = berth.Argv{"true"}, 1
		edit(&spec)
		if _, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec, Array: array, HoldUntilFits: true}); err != nil {
			t.Fatal(err)
		}
	}
	submit(3, func(s *berth.JobSpec) {})
	submit(0, func(s *berth.JobSpec) { s.Constraints.Labels = map[string]string{} })
	submit(2, func(s *berth.JobSpec) { s.Constraints.Labels = map[string]string{"zone": "a"} })
	submit(0, func(s *berth.JobSpec) { s.Constraints.Labels = map[string]string{"zone": "a"} })
	submit(4, func(s *berth.JobSpec) { s.Resources.GPUs = 2 })
	view, err := c.PendingDemand(t.Context(), now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, d := range view.Demand {
		got[fmt.Sprintf("gpus=%d labels=%v", d.Resources.GPUs, d.Constraints.Labels)] += d.Jobs
		if !d.Since.Equal(now) {
			t.Errorf("demand %+v: since %s, want %s", d, d.Since, now)
		}
	}
	want := map[string]int{"gpus=1 labels=map[]": 4, "gpus=1 labels=map[zone:a]": 3, "gpus=2 labels=map[]": 4}
	if !maps.Equal(got, want) || len(view.Demand) != 3 {
		t.Errorf("demand = %v in %d groups, want %v in 3", got, len(view.Demand), want)
	}
}
