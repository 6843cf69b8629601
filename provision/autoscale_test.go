package provision

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/store"
)

var t0 = time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)

func pool4090() *berth.Pool {
	return &berth.Pool{Name: "rent", Provider: "vast", GPUType: "RTX 4090", GPUs: 1, MaxInstances: 4, MaxPrice: 2.0,
		IdleTimeout: berth.Duration(10 * time.Minute), Strictness: berth.StrictnessBalanced}
}

func wants(n int, gpuType string, gpus int) controller.Demand {
	return controller.Demand{Queue: "default", Nodes: 1, Resources: berth.Resources{GPUs: gpus, GPUType: gpuType}, Jobs: n, Since: t0.Add(-time.Minute)}
}

func inst(id string, phase berth.InstancePhase, price float64, host string) *berth.Instance {
	return &berth.Instance{ID: id, Pool: "rent", Phase: phase, PricePerH: price, WorkerHost: host, GPUName: "RTX 4090", GPUs: 1,
		CreatedAt: t0.Add(-time.Hour), ReadyAt: t0.Add(-time.Hour)}
}

func TestDecide(t *testing.T) {
	burst := []controller.Demand{wants(100, "4090", 1)}
	one := []controller.Demand{wants(1, "4090", 1)}
	labelled := func(d controller.Demand) controller.Demand {
		d.Constraints.Labels = map[string]string{"zone": "eu"}
		return d
	}
	tests := []struct {
		name      string
		pool      func(*berth.Pool)
		demand    []controller.Demand
		instances []*berth.Instance
		idle      map[string]time.Time
		rent      int
		wanted    int
		destroy   []string
		capped    string // a substring of Capped; "" when none
	}{
		{name: "nothing waits"},
		{name: "one waiting job rents one", demand: one, rent: 1, wanted: 1},
		{name: "a GPU type the pool lacks rents nothing", demand: []controller.Demand{wants(3, "A100", 1)}},
		{name: "more GPUs than an instance has rent nothing", demand: []controller.Demand{wants(3, "4090", 2)}},
		{name: "CPU-only jobs rent nothing", demand: []controller.Demand{wants(3, "", 0)}},
		{name: "fractions fill each GPU: five quarters want two", demand: []controller.Demand{func() controller.Demand {
			d := wants(5, "4090", 0)
			d.Resources.GPUMilli = 250
			return d
		}()}, rent: 1, wanted: 2},
		{name: "no GPU type asked: any GPU serves", demand: []controller.Demand{wants(1, "", 1)}, rent: 1, wanted: 1},
		{name: "a queue the pool does not serve rents nothing", pool: func(p *berth.Pool) { p.Queues = []string{"gpu"} }, demand: one},
		{name: "labels the pool lacks rent nothing", demand: []controller.Demand{labelled(wants(1, "4090", 1))}},
		{name: "labels the pool carries rent", pool: func(p *berth.Pool) { p.Labels = map[string]string{"zone": "eu", "x": "y"} },
			demand: []controller.Demand{labelled(wants(1, "4090", 1))}, rent: 1, wanted: 1},
		{name: "a job pinned to a host rents nothing", demand: []controller.Demand{func() controller.Demand {
			d := wants(1, "4090", 1)
			d.Constraints.Host = "gpu1"
			return d
		}()}},
		{name: "no second instance while one is starting for the same job", demand: one,
			instances: []*berth.Instance{inst("i1", berth.InstanceSSH, 0.4, "")}},
		{name: "a rental not stored yet counts as starting", demand: one,
			instances: []*berth.Instance{{Pool: "rent", Phase: berth.InstanceCreating}}},
		{name: "a rental not stored yet holds the next one back", demand: burst,
			instances: []*berth.Instance{{Pool: "rent", Phase: berth.InstanceCreating}}, wanted: 99},
		{name: "a ready idle instance serves the job", demand: one,
			instances: []*berth.Instance{inst("i1", berth.InstanceReady, 0.4, "h1")}, idle: map[string]time.Time{"h1": t0.Add(-time.Minute)}},
		{name: "a busy ready instance does not", demand: one,
			instances: []*berth.Instance{inst("i1", berth.InstanceReady, 0.4, "h1")}, rent: 1, wanted: 1},
		{name: "burst of 100: one create at a time", demand: burst,
			instances: []*berth.Instance{inst("i1", berth.InstanceRunning, 0.5, "")}, rent: 1, wanted: 99},
		{name: "burst of 100 at max instances: none", demand: burst, instances: []*berth.Instance{
			inst("i1", berth.InstanceReady, 0.3, "h1"), inst("i2", berth.InstanceReady, 0.3, "h2"),
			inst("i3", berth.InstanceGPUChecked, 0.3, ""), inst("i4", berth.InstanceCreated, 0.3, "")}, wanted: 98, capped: "max instances 4 reached (4 live)"},
		{name: "burst of 100 at max price: none", demand: burst, pool: func(p *berth.Pool) { p.MaxInstances = 10 }, instances: []*berth.Instance{
			inst("i1", berth.InstanceReady, 1.0, "h1"), inst("i2", berth.InstanceRunning, 1.0, "")}, wanted: 99, capped: "max $2.00/h reached (live instances cost $2.00/h)"},
		{name: "burst of 100, headroom below the cheapest price: none", demand: burst, pool: func(p *berth.Pool) { p.MaxInstances = 10 }, instances: []*berth.Instance{
			inst("i1", berth.InstanceReady, 0.8, "h1"), inst("i2", berth.InstanceRunning, 0.9, "")}, wanted: 99, capped: "max $2.00/h"},
		{name: "burst of 100, no price cap: max instances", demand: burst, pool: func(p *berth.Pool) { p.MaxPrice = 0 },
			instances: []*berth.Instance{inst("i1", berth.InstanceRunning, 5, ""), inst("i2", berth.InstanceRunning, 5, ""), inst("i3", berth.InstanceRunning, 5, "")},
			rent:      1, wanted: 97},
		{name: "a preserved failed instance is still billed and counted", demand: burst, instances: []*berth.Instance{
			inst("i1", berth.InstanceFailed, 0.3, ""), inst("i2", berth.InstanceReady, 0.3, "h2"),
			inst("i3", berth.InstanceGPUChecked, 0.3, ""), inst("i4", berth.InstanceCreated, 0.3, "")}, wanted: 98, capped: "max instances 4 reached (4 live)"},
		{name: "destroyed instances count for nothing", demand: one,
			instances: []*berth.Instance{inst("i1", berth.InstanceDestroyed, 1.9, "h1")}, rent: 1, wanted: 1},
		{name: "two-GPU instances take two one-GPU jobs each", pool: func(p *berth.Pool) { p.GPUs = 2 },
			demand: []controller.Demand{wants(3, "4090", 1)}, rent: 1, wanted: 2},
		{name: "a gang wants an instance per member",
			demand: []controller.Demand{func() controller.Demand { d := wants(1, "4090", 1); d.Nodes = 3; return d }()}, rent: 1, wanted: 3},
		{name: "idle past the timeout is given back", instances: []*berth.Instance{inst("i1", berth.InstanceReady, 0.4, "h1"), inst("i2", berth.InstanceReady, 0.4, "h2")},
			idle: map[string]time.Time{"h1": t0.Add(-11 * time.Minute), "h2": t0.Add(-9 * time.Minute)}, destroy: []string{"i1"}},
		{name: "idle is counted from ready", instances: []*berth.Instance{func() *berth.Instance {
			i := inst("i1", berth.InstanceReady, 0.4, "h1")
			i.ReadyAt = t0.Add(-5 * time.Minute)
			return i
		}()}, idle: map[string]time.Time{"h1": t0.Add(-time.Hour)}},
		{name: "a busy instance is kept", instances: []*berth.Instance{inst("i1", berth.InstanceReady, 0.4, "h1")}},
		{name: "no idle timeout: never given back", pool: func(p *berth.Pool) { p.IdleTimeout = 0 },
			instances: []*berth.Instance{inst("i1", berth.InstanceReady, 0.4, "h1")}, idle: map[string]time.Time{"h1": t0.Add(-24 * time.Hour)}},
		{name: "an idle instance given back is no supply", demand: one,
			instances: []*berth.Instance{inst("i1", berth.InstanceReady, 0.4, "h1")}, idle: map[string]time.Time{"h1": t0.Add(-time.Hour)},
			destroy: []string{"i1"}, rent: 1, wanted: 1},
		{name: "a vLLM pool rents nothing for jobs and gives nothing back for idleness",
			pool: func(p *berth.Pool) { p.Workload, p.Model, p.Port = berth.WorkloadVLLM, "m", 8000 }, demand: burst,
			instances: []*berth.Instance{inst("i1", berth.InstanceReady, 0.4, "")}, idle: map[string]time.Time{"": t0.Add(-24 * time.Hour)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := pool4090()
			if tc.pool != nil {
				tc.pool(p)
			}
			d := Decide(p, tc.demand, tc.instances, tc.idle, t0)
			if d.Rent != tc.rent {
				t.Errorf("Rent = %d, want %d (%+v)", d.Rent, tc.rent, d)
			}
			if d.Wanted != tc.wanted {
				t.Errorf("Wanted = %d, want %d", d.Wanted, tc.wanted)
			}
			var destroyed []string
			for _, r := range d.Destroy {
				destroyed = append(destroyed, r.Instance.ID)
				if !strings.Contains(r.Reason, "idle for") {
					t.Errorf("release reason %q", r.Reason)
				}
			}
			if strings.Join(destroyed, ",") != strings.Join(tc.destroy, ",") {
				t.Errorf("Destroy = %v, want %v", destroyed, tc.destroy)
			}
			if tc.capped == "" && d.Capped != "" || !strings.Contains(d.Capped, tc.capped) {
				t.Errorf("Capped = %q, want it to say %q", d.Capped, tc.capped)
			}
			if d.Rent > 0 && !strings.Contains(d.Reason, "waiting jobs") {
				t.Errorf("Reason = %q", d.Reason)
			}
		})
	}
}

// staticPools is a store of pools for Load.
type staticPools []*berth.Pool

func (s staticPools) Pools(context.Context) ([]*berth.Pool, error) { return s, nil }
func (s staticPools) Instances(context.Context, store.InstanceFilter) ([]*berth.Instance, error) {
	return nil, nil
}

// Reach yields each pool's machine once per instance it may have, for a
// job asking for GPUs and pinned to no host, and nothing otherwise. A
// vLLM pool's nodes run no jobs: it yields none.
func TestReach(t *testing.T) {
	llm := pool4090()
	llm.Name, llm.Workload, llm.Model, llm.Port = "llm", berth.WorkloadVLLM, "m", 8000
	a := New(Config{Pools: staticPools{pool4090(), llm}})
	gpu := berth.DefaultJobSpec()
	gpu.Resources.GPUs = 1
	count := func(spec berth.JobSpec) (n int, model string) {
		for w := range a.Reach(&spec) {
			n++
			model = w.GPUs[0].Model
		}
		return n, model
	}
	if n, _ := count(gpu); n != 0 {
		t.Fatalf("before Load: %d machines", n)
	}
	if _, err := a.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, model := count(gpu); n != 4 || model != "RTX 4090" {
		t.Fatalf("a GPU job: %d machines of %q; want 4 of RTX 4090", n, model)
	}
	cpu := berth.DefaultJobSpec()
	cpu.Resources.CPUs = 1000
	pinned := gpu
	pinned.Constraints.Host = "gpu-1"
	for name, spec := range map[string]berth.JobSpec{"a CPU job": cpu, "a pinned job": pinned} {
		if n, _ := count(spec); n != 0 {
			t.Errorf("%s: %d machines; want none", name, n)
		}
	}
}

// A host is idle from when the autoscaler first sees it run nothing, or
// sees a ready instance's worker gone from the controller; busy, it
// forgets that time.
func TestIdleSince(t *testing.T) {
	a := New(Config{})
	live := []*berth.Instance{inst("i1", berth.InstanceReady, 0.3, "h1"), inst("i2", berth.InstanceReady, 0.3, "h2"),
		inst("i3", berth.InstanceReady, 0.3, "lost"), inst("i4", berth.InstanceSSH, 0.3, "booting")}
	view := &controller.PoolView{Hosts: []controller.HostActivity{{Host: "h1", Connected: true}, {Host: "h2", Connected: true, Running: 1}}}
	idle := a.idle(view, live, t0)
	if len(idle) != 2 || !idle["h1"].Equal(t0) || !idle["lost"].Equal(t0) {
		t.Fatalf("idle = %v; want h1 and lost since t0", idle)
	}
	view.Hosts[0].Running = 1
	if idle = a.idle(view, live, t0.Add(time.Minute)); len(idle) != 1 || !idle["lost"].Equal(t0) {
		t.Fatalf("idle a minute on = %v; want only lost, still since t0", idle)
	}
	view.Hosts[0].Running = 0
	if idle = a.idle(view, live, t0.Add(2*time.Minute)); !idle["h1"].Equal(t0.Add(2 * time.Minute)) {
		t.Fatalf("h1 idle again since %v; want since it was seen idle again", idle["h1"])
	}
}
