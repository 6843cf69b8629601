package sim_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/sim"
	"github.com/berth-dev/berth/sim/trace"
)

// replay loads one Berth YAML file as both cluster and trace and runs it
// under the named policy.
func replay(t *testing.T, doc, policy string) sim.Result {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scenario.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := trace.LoadCluster(path, trace.FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	w, err := trace.LoadWorkload(path, trace.FormatAuto, c)
	if err != nil {
		t.Fatal(err)
	}
	return run(t, c, w, policy)
}

func run(t *testing.T, c *sim.Cluster, w *sim.Workload, policy string) sim.Result {
	t.Helper()
	cfg, err := scheduler.PolicyConfig(policy)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(context.Background(), c, w, cfg)
	if err != nil {
		t.Fatalf("%s: %v", policy, err)
	}
	return res
}

func outcome(t *testing.T, r sim.Result, id string) sim.Outcome {
	t.Helper()
	o, ok := r.Outcome(id)
	if !ok {
		t.Fatalf("no outcome for job %s", id)
	}
	return o
}

const twoH100Workers = "workers:\n  - {name: w, count: 2, gpus: 8xH100:80GiB, cpus: 64, memory: 512GiB}\n"

// gangBehindStream: 16 one-GPU jobs fill both workers at 0 and end one by
// one, every 2.5m from 20m to 57.5m (their max_runtime says so); a gang of
// 2×8 GPUs arrives at 1m; a stream of 150 one-GPU 30m jobs arrives every 2m
// from 2m to 5h.
func gangBehindStream() string {
	var b strings.Builder
	b.WriteString(twoH100Workers + "jobs:\n")
	for k := range 16 {
		d := 20*time.Minute + time.Duration(k)*150*time.Second
		fmt.Fprintf(&b, "  - {id: fill-%02d, user: small, gpus: 1, duration: %s, max_runtime: %s}\n", k, d, d)
	}
	b.WriteString("  - {id: gang, user: big, submit: 1m, nodes: 2, gpus: 8, duration: 1h}\n")
	b.WriteString("  - {id: stream, user: small, submit: 2m, count: 150, every: 2m, gpus: 1, duration: 30m, max_runtime: 30m}\n")
	return b.String()
}

func TestSimGangReservationAgainstStream(t *testing.T) {
	t.Parallel()
	doc := gangBehindStream()
	drained := 57*time.Minute + 30*time.Second // the last fill job ends
	fifo, greedy, berthRes := replay(t, doc, "fifo"), replay(t, doc, "greedy"), replay(t, doc, "berth")
	for _, r := range []sim.Result{fifo, greedy, berthRes} {
		if r.Completed != r.Jobs || r.Jobs != 167 {
			t.Fatalf("%d of %d jobs completed, want all 167", r.Completed, r.Jobs)
		}
	}
	// greedy lets every freed GPU go to the stream: the gang starves until
	// the stream has passed.
	if g := outcome(t, greedy, "gang"); g.Start < 5*time.Hour {
		t.Errorf("greedy: gang started at %s, want after the stream (5h)", g.Start)
	}
	// fifo holds the stream behind the gang: it starts as the fill drains.
	if g := outcome(t, fifo, "gang"); g.Start != drained {
		t.Errorf("fifo: gang started at %s, want %s", g.Start, drained)
	}
	// berth reserves both workers after ReserveAfter (10m): the gang starts
	// no later than the drain, and stream jobs whose max_runtime ends
	// before then backfill meanwhile.
	if g := outcome(t, berthRes, "gang"); g.Start > drained {
		t.Errorf("berth: gang started at %s, want by %s", g.Start, drained)
	}
	backfilled := 0
	for _, o := range berthRes.Outcomes {
		if strings.HasPrefix(o.ID, "stream-") && o.Start < drained {
			backfilled++
			if o.End > drained {
				t.Errorf("berth: backfilled %s runs until %s, past the reservation", o.ID, o.End)
			}
		}
	}
	if backfilled == 0 {
		t.Error("berth: no stream job backfilled before the gang")
	}
	if berthRes.Wait.Mean >= fifo.Wait.Mean {
		t.Errorf("berth mean wait %.0fs, want below fifo's %.0fs", berthRes.Wait.Mean, fifo.Wait.Mean)
	}
}

func TestSimFairShareBoundsWaitOfSecondUser(t *testing.T) {
	t.Parallel()
	doc := twoH100Workers + `jobs:
  - {id: a, user: alice, count: 1000, gpus: 1, duration: 10m}
  - {id: b, user: bob, submit: 1s, count: 4, gpus: 1, duration: 10m}
`
	berthRes, greedy := replay(t, doc, "berth"), replay(t, doc, "greedy")
	for k := range 4 {
		id := fmt.Sprintf("b-%d", k)
		// berth: alice's share of the cluster costs her priority, so bob
		// starts as soon as the first wave of alice's jobs ends.
		if o := outcome(t, berthRes, id); o.Wait > 10*time.Minute {
			t.Errorf("berth: %s waited %s, want at most 10m", id, o.Wait)
		}
		// greedy: bob waits behind all 1,000 of alice's jobs (62 waves).
		if o := outcome(t, greedy, id); o.Wait < 10*time.Hour {
			t.Errorf("greedy: %s waited %s, want over 10h", id, o.Wait)
		}
	}
}

func TestSimPreemptionStopsAndRequeuesVictim(t *testing.T) {
	t.Parallel()
	doc := `workers:
  - {name: w, gpus: 8xH100:80GiB, cpus: 64, memory: 512GiB}
jobs:
  - {id: low, priority: 10, preemptible: true, gpus: 8, duration: 10h}
  - {id: high, priority: 500, submit: 1m, gpus: 8, duration: 1h}
`
	r := replay(t, doc, "berth")
	// low becomes a victim once it has run PreemptMinRuntime (5m).
	high, low := outcome(t, r, "high"), outcome(t, r, "low")
	if high.Start != 5*time.Minute || high.End != time.Hour+5*time.Minute {
		t.Errorf("high ran %s–%s, want 5m–1h5m", high.Start, high.End)
	}
	if low.Preemptions != 1 || r.Preemptions != 1 {
		t.Errorf("low preempted %d times, %d in all; want 1", low.Preemptions, r.Preemptions)
	}
	// Requeued from scratch: the whole 10h again after high.
	if low.Start != high.End || low.End != high.End+10*time.Hour {
		t.Errorf("low's last attempt ran %s–%s, want %s–%s", low.Start, low.End, high.End, high.End+10*time.Hour)
	}
	if low.Wait != high.End-5*time.Minute {
		t.Errorf("low waited %s, want %s", low.Wait, high.End-5*time.Minute)
	}
	g := replay(t, doc, "greedy")
	if h := outcome(t, g, "high"); g.Preemptions != 0 || h.Start != 10*time.Hour {
		t.Errorf("greedy: %d preemptions, high started at %s; want none and 10h", g.Preemptions, h.Start)
	}
}

// TestSimPreemptionBudgetRefillsAfterWindow: berth preempts at most 10
// attempts a minute, so of 12 urgent jobs 10 start at once and the other 2
// when the first preemptions leave the window.
func TestSimPreemptionBudgetRefillsAfterWindow(t *testing.T) {
	t.Parallel()
	doc := `workers:
  - {gpus: 12xH100:80GiB, cpus: 64, memory: 512GiB}
jobs:
  - {id: low, priority: 10, preemptible: true, count: 12, gpus: 1, duration: 10h}
  - {id: high, priority: 500, submit: 10m, count: 12, gpus: 1, duration: 1h}
`
	r := replay(t, doc, "berth")
	if r.Preemptions != 12 {
		t.Fatalf("%d preemptions, want 12", r.Preemptions)
	}
	started := map[time.Duration]int{}
	for k := range 12 {
		started[outcome(t, r, fmt.Sprintf("high-%d", k)).Start]++
	}
	if started[10*time.Minute] != 10 || started[11*time.Minute] != 2 {
		t.Fatalf("urgent jobs started at %v, want 10 at 10m and 2 at 11m", started)
	}
}

func TestSimUnfitJobsAreDroppedWithoutBlocking(t *testing.T) {
	t.Parallel()
	doc := twoH100Workers + `jobs:
  - {id: huge, gpus: 16, duration: 1h}
  - {id: wide, nodes: 3, gpus: 8, duration: 1h}
  - {id: small, count: 3, gpus: 1, duration: 1h}
`
	for _, policy := range scheduler.PolicyNames() {
		r := replay(t, doc, policy)
		if r.Unschedulable != 2 || r.Completed != 3 {
			t.Fatalf("%s: %d unschedulable, %d completed; want 2 and 3", policy, r.Unschedulable, r.Completed)
		}
		if o := outcome(t, r, "huge"); o.Completed || !strings.Contains(o.Reason, "16 GPUs") {
			t.Errorf("%s: huge: %+v, want dropped for 16 GPUs", policy, o)
		}
		if o := outcome(t, r, "wide"); !strings.Contains(o.Reason, "needs 3 workers") {
			t.Errorf("%s: wide: %+v, want dropped for 3 workers", policy, o)
		}
		if o := outcome(t, r, "small-2"); o.Start != 0 {
			t.Errorf("%s: small-2 started at %s, want 0 (the unfit jobs must not block)", policy, o.Start)
		}
	}
}

func TestSimMaxRuntimeStopsJob(t *testing.T) {
	t.Parallel()
	r := replay(t, twoH100Workers+"jobs:\n  - {id: long, gpus: 1, duration: 2h, max_runtime: 1h}\n", "berth")
	if o := outcome(t, r, "long"); o.End != time.Hour || r.TimedOut != 1 {
		t.Fatalf("long ended at %s, %d timed out; want 1h and 1", o.End, r.TimedOut)
	}
}

// TestSimMetricsOfKnownPlacements checks each metric on placements worked out
// by hand: one 8-GPU worker, a 4-GPU job and an 8-GPU job at 0, 1h each.
func TestSimMetricsOfKnownPlacements(t *testing.T) {
	t.Parallel()
	doc := `workers:
  - {gpus: 8xH100:80GiB, cpus: 64, memory: 512GiB}
jobs:
  - {id: four, gpus: 4, duration: 1h}
  - {id: eight, gpus: 8, duration: 1h}
`
	r := replay(t, doc, "fifo")
	h := time.Hour.Seconds()
	// four runs 0–1h, eight 1h–2h.
	want := map[string]float64{
		"makespan": 2 * h,
		// (4 GPUs × 1h + 8 × 1h) ÷ (8 × 2h)
		"utilisation": 0.75,
		// [0,1h): 4 free GPUs; the 4-GPU shape fits them, the 8-GPU shape
		// (weight ½) does not: ½ × 4 ÷ 4 = ½. [1h,2h): none free. Average ¼.
		"fragmentation": 0.25,
		"jct mean":      1.5 * h, "jct max": 2 * h, "wait mean": 0.5 * h, "wait p50": 0, "wait max": h,
		"starvation": h,
	}
	got := map[string]float64{"makespan": r.MakespanSeconds, "utilisation": r.GPUUtilization,
		"fragmentation": r.Fragmentation, "jct mean": r.JCT.Mean, "jct max": r.JCT.Max, "wait mean": r.Wait.Mean,
		"wait p50": r.Wait.P50, "wait max": r.Wait.Max, "starvation": r.LongestStarvationSeconds}
	for k, v := range want {
		if diff := got[k] - v; diff > 1e-9 || diff < -1e-9 {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if r.LongestStarvationJob != "eight" {
		t.Errorf("longest starvation by %s, want eight", r.LongestStarvationJob)
	}
}

func TestSimReplayIsDeterministic(t *testing.T) {
	t.Parallel()
	doc := gangBehindStream() + `  - {id: pre, user: carol, priority: 5, preemptible: true, submit: 3m, count: 20, every: 7m, gpus: 2, duration: 40m}
  - {id: urgent, user: dave, priority: 900, submit: 30m, count: 5, every: 50m, gpus: 4, duration: 20m}
`
	first := replay(t, doc, "berth")
	if first.Preemptions == 0 {
		t.Fatal("the scenario preempts nothing; it should exercise preemption")
	}
	for range 3 {
		again := replay(t, doc, "berth")
		first.WallSeconds, again.WallSeconds = 0, 0
		if !reflect.DeepEqual(first, again) {
			t.Fatalf("two replays differ:\n%+v\n%+v", first, again)
		}
	}
}

func TestSimRunRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	c := &sim.Cluster{Workers: []sim.Worker{{ID: "w", GPUs: make([]berth.GPU, 8)}}}
	ok := sim.Job{ID: "j", Queue: "default", Duration: time.Hour}
	for _, tc := range []struct {
		c     *sim.Cluster
		jobs  []sim.Job
		field string
	}{
		{&sim.Cluster{}, []sim.Job{ok}, "workers"},
		{&sim.Cluster{Workers: []sim.Worker{{ID: "w"}, {ID: "w"}}}, []sim.Job{ok}, "workers[1].id"},
		{c, []sim.Job{{ID: "j", Queue: "default"}}, "jobs[0].duration"},
		{c, []sim.Job{ok, ok}, "jobs[1].id"},
		{c, []sim.Job{{ID: "j", Queue: "default", Duration: 1, Priority: 5000}}, "jobs[0].priority"},
	} {
		_, err := sim.Run(context.Background(), tc.c, &sim.Workload{Jobs: tc.jobs}, scheduler.DefaultConfig())
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("sim.Run(%+v): %v, want an error naming %s", tc.jobs, err, tc.field)
		}
	}
}

func TestSimRunStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := &sim.Cluster{Workers: []sim.Worker{{ID: "w", GPUs: make([]berth.GPU, 8)}}}
	w := &sim.Workload{Jobs: []sim.Job{{ID: "j", Queue: "default", Duration: time.Hour}}}
	if _, err := sim.Run(ctx, c, w, scheduler.DefaultConfig()); err != context.Canceled {
		t.Fatalf("sim.Run with a cancelled context: %v", err)
	}
}

func TestSimScaleArrivals(t *testing.T) {
	t.Parallel()
	w := &sim.Workload{Jobs: []sim.Job{{Submit: time.Hour}, {Submit: 10 * time.Second}}}
	if err := w.ScaleArrivals(10); err != nil {
		t.Fatal(err)
	}
	if w.Jobs[0].Submit != 6*time.Minute || w.Jobs[1].Submit != time.Second {
		t.Fatalf("scaled submissions %s, %s", w.Jobs[0].Submit, w.Jobs[1].Submit)
	}
	if err := w.ScaleArrivals(0); err == nil {
		t.Fatal("a zero speed-up was accepted")
	}
}
