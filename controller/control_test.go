package controller

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
)

// schedView is what the scheduler is told of a worker after its host's
// controls apply.
type schedView struct {
	queues, off []string
	parked      bool
}

func TestControlDecidesWhatAWorkerTakes(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Now())
	set := func(host, queue, desired string) {
		t.Helper()
		if _, err := c.SetWorkerControl(t.Context(), host, berth.ControlRequest{Queue: queue, DesiredState: desired, StopPolicy: berth.StopDrain}); err != nil {
			t.Fatal(err)
		}
	}
	view := func(id string) schedView {
		t.Helper()
		var v schedView
		if err := c.do(t.Context(), func() {
			ws := c.workers[id]
			v = schedView{ws.sched.Queues, ws.sched.OffQueues, ws.parked}
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := c.do(t.Context(), func() {
		for _, w := range []*berth.Worker{{ID: "two", Host: "a", Queues: []string{"cpu", "gpu"}, Slots: 1}, {ID: "all", Host: "b", Slots: 1}} {
			ws := newWorkerState(w)
			c.addWorker(ws)
			c.applyControl(ws)
		}
	}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		host, queue, desired string
		worker               string
		want                 schedView
	}{
		{"a", "gpu", "off", "two", schedView{[]string{"cpu", "gpu"}, []string{"gpu"}, false}},
		{"a", "", "off", "two", schedView{[]string{"cpu", "gpu"}, []string{"cpu", "gpu"}, true}},
		{"a", "cpu", "on", "two", schedView{[]string{"cpu", "gpu"}, []string{"gpu"}, false}},
		{"a", "", "on", "two", schedView{[]string{"cpu", "gpu"}, nil, false}},
		{"b", "gpu", "off", "all", schedView{nil, []string{"gpu"}, false}},
		{"b", "", "off", "all", schedView{nil, nil, true}},
		{"b", "cpu", "on", "all", schedView{[]string{"cpu"}, nil, false}},
	} {
		set(step.host, step.queue, step.desired)
		got := view(step.worker)
		if !slices.Equal(got.queues, step.want.queues) || !slices.Equal(got.off, step.want.off) || got.parked != step.want.parked {
			t.Fatalf("after %s %s/%s: worker %s takes %+v, want %+v", step.desired, step.host, step.queue, step.worker, got, step.want)
		}
	}
}

// TestControlsWrittenToTheStoreApply writes a control to the store
// directly, as plain SQL would, and sees the controller apply it.
func TestControlsWrittenToTheStoreApply(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "berth.db")
	st, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := New(Config{Store: st, ControlPoll: 10 * time.Millisecond})
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(t.Context())
	ctl := &berth.WorkerControl{Host: "spark", Queue: "gpu", DesiredState: "off", StopPolicy: "hard", RequestedBy: "rails",
		UpdatedAt: time.Now().UTC()}
	if err := st.Write(t.Context(), &store.Batch{Controls: []*berth.WorkerControl{ctl}}); err != nil {
		t.Fatal(err)
	}
	var seq uint64
	for applied := false; !applied; {
		events := readEvents(t, c, seq)
		seq = events[len(events)-1].Seq
		applied = slices.ContainsFunc(events, func(e berth.Event) bool {
			return e.Type == berth.EventWorkerControl && e.Host == "spark" && e.Queue == "gpu" && e.Desired == "off" && e.Actor == "rails"
		})
	}
	var off *berth.WorkerControl
	if err := c.do(t.Context(), func() { off = c.controlOf("spark", "gpu") }); err != nil || off == nil || off.RequestedBy != "rails" {
		t.Fatalf("controller's control of spark/gpu = %+v, %v; want rails' off", off, err)
	}
}

// TestEventsSurviveARestart stores events with the changes they describe:
// a restarted controller serves them again and numbers on after them.
func TestEventsSurviveARestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "berth.db")
	start := func() (*Controller, func()) {
		st, err := sqlite.Open(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		c := New(Config{Store: st, StoreEvents: true})
		if err := c.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		return c, func() {
			if err := c.Stop(context.Background()); err != nil {
				t.Error(err)
			}
			st.Close()
		}
	}
	c, stop := start()
	if _, err := c.SetWorkerControl(t.Context(), "spark", berth.ControlRequest{DesiredState: "off"}); err != nil {
		t.Fatal(err)
	}
	stop()
	c, stop = start()
	defer stop()
	if _, err := c.SetWorkerControl(t.Context(), "spark", berth.ControlRequest{DesiredState: "on"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for seq := uint64(0); len(got) < 2; {
		events := readEvents(t, c, seq)
		for _, e := range events {
			got = append(got, strconv.FormatUint(e.Seq, 10)+" "+e.Type+" "+e.Desired)
			seq = e.Seq
		}
	}
	if want := []string{"1 worker.control off", "2 worker.control on"}; !slices.Equal(got, want) {
		t.Fatalf("events after a restart = %q, want %q", got, want)
	}
}
