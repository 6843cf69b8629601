package trace_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/sim"
	"github.com/berth-dev/berth/sim/trace"
)

// traces returns a file of the real traces, copied unchanged from the
// traces alibaba/clusterdata and SymbioticLab/Tiresias publish into
// testdata/traces so that the tests need nothing outside the repository.
// A missing file fails the test.
func traces(t *testing.T, parts ...string) string {
	t.Helper()
	path := filepath.Join(append([]string{"testdata", "traces"}, parts...)...)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("trace file missing: %v", err)
	}
	return path
}

func TestSimLoadAlibabaWorkers(t *testing.T) {
	t.Parallel()
	c, err := trace.LoadCluster(traces(t, "alibaba-gpu-v2023", "openb_node_list_gpu_node.csv"), trace.FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Workers) != 1213 || c.GPUs() != 6212 {
		t.Fatalf("%d workers with %d GPUs, want 1213 with 6212", len(c.Workers), c.GPUs())
	}
	w := c.Workers[0] // openb-node-0000,64000,262144,2,P100
	if w.ID != "openb-node-0000" || w.CPUs != 64 || w.Memory != 256<<30 || len(w.GPUs) != 2 || w.GPUs[1].Model != "P100" {
		t.Fatalf("first worker %+v", w)
	}
}

func TestSimLoadAlibabaPods(t *testing.T) {
	t.Parallel()
	w, err := trace.LoadWorkload(traces(t, "alibaba-gpu-v2023", "openb_pod_list_default.csv"), trace.FormatAuto, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 8,152 pods, of which 897 never ran (Pending: no scheduled_time).
	if len(w.Jobs) != 7255 || w.Skipped != 897 {
		t.Fatalf("%d jobs, %d skipped; want 7255 and 897", len(w.Jobs), w.Skipped)
	}
	// openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061:
	// a fraction of one GPU, 460 milli-GPUs.
	j := w.Jobs[1]
	want := sim.Job{ID: "openb-pod-0001", User: "trace", Queue: berth.DefaultQueue, Priority: berth.DefaultPriority, Nodes: 1,
		Submit: 427061 * time.Second, Duration: (12902960 - 427061) * time.Second,
		Resources: berth.Resources{GPUMilli: 460, CPUs: 6, Memory: 12288 << 20}}
	if j != want {
		t.Fatalf("pod 1 = %+v\nwant     %+v", j, want)
	}
	cpuOnly, multi, shares := 0, 0, 0
	for _, j := range w.Jobs {
		switch r := j.Resources; {
		case r.GPUMilli > 0:
			shares++
		case r.GPUs == 0:
			cpuOnly++
		case r.GPUs > 1:
			multi++
		}
	}
	// awk -F, 'NR>1 && $11!="" && $10-$11>0 && $4==1 && $5<1000' counts the shares.
	if cpuOnly == 0 || multi == 0 || shares != 2573 {
		t.Fatalf("%d CPU-only, %d multi-GPU and %d fractional pods; want some, some and 2573", cpuOnly, multi, shares)
	}
}

func TestSimLoadAlibabaGPUSpec(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "pods.csv")
	data := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
		"one,1000,1024,1,1000,V100M32,LS,Succeeded,10,100,20\n" +
		"two,1000,1024,2,1000,V100M16|V100M32,LS,Succeeded,10,100,20\n" +
		"never,1000,1024,1,1000,,LS,Pending,10,,\n" +
		"zero,1000,1024,1,1000,,LS,Failed,10,20,20\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := trace.LoadWorkload(path, trace.FormatAlibaba, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Jobs) != 2 || w.Skipped != 2 {
		t.Fatalf("%d jobs, %d skipped; want 2 and 2", len(w.Jobs), w.Skipped)
	}
	if w.Jobs[0].Resources.GPUType != "V100M32" || w.Jobs[1].Resources.GPUType != "" || w.Jobs[0].Duration != 80*time.Second {
		t.Fatalf("jobs %+v", w.Jobs)
	}
}

// TestSimLoadAlibabaMultiGPU50NamesMissingColumn: the stored
// openb_pod_list_multigpu50.csv has no time columns, so it cannot be
// replayed; the error says which column is missing.
func TestSimLoadAlibabaMultiGPU50NamesMissingColumn(t *testing.T) {
	t.Parallel()
	path := traces(t, "alibaba-gpu-v2023", "openb_pod_list_multigpu50.csv")
	_, err := trace.LoadWorkload(path, trace.FormatAuto, nil)
	if err == nil || !strings.Contains(err.Error(), path+":1: creation_time:") {
		t.Fatalf("loading %s: %v; want an error naming line 1 and creation_time", path, err)
	}
}

func TestSimLoadTiresias(t *testing.T) {
	t.Parallel()
	c, err := trace.LoadCluster(traces(t, "tiresias", "n32g4.csv"), trace.FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Workers) != 32 || c.GPUs() != 128 || c.Workers[31].ID != "s0-n031" || c.Workers[0].CPUs != 40 || c.Workers[0].Memory != 256<<30 {
		t.Fatalf("n32g4: %d workers, %d GPUs, last %+v", len(c.Workers), c.GPUs(), c.Workers[31])
	}
	spec, err := trace.LoadCluster(traces(t, "tiresias", "cluster_spec.csv"), trace.FormatAuto)
	if err != nil || len(spec.Workers) != 16 || spec.GPUs() != 64 {
		t.Fatalf("cluster_spec: %v", err)
	}
	w, err := trace.LoadWorkload(traces(t, "tiresias", "60_job.csv"), trace.FormatAuto, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Jobs) != 60 {
		t.Fatalf("%d jobs, want 60", len(w.Jobs))
	}
	// 1,8,30,133,vgg11,147,23: 8 GPUs on 4-GPU workers is a gang of 2.
	if j := w.Jobs[1]; j.ID != "1" || j.Nodes != 2 || j.Resources.GPUs != 4 || j.Submit != 30*time.Second || j.Duration != 147*time.Second {
		t.Fatalf("job 1 = %+v", j)
	}
	// yarn-gput1000.csv holds durations only: one-GPU jobs, all at 0.
	yarn, err := trace.LoadWorkload(traces(t, "tiresias", "yarn-gput1000.csv"), trace.FormatAuto, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(yarn.Jobs) != 1001 || yarn.Jobs[0].Duration != 121*time.Second || yarn.Jobs[1000].Submit != 0 || yarn.Jobs[1000].Resources.GPUs != 1 {
		t.Fatalf("yarn: %d jobs, first %+v", len(yarn.Jobs), yarn.Jobs[0])
	}
}

// TestSimReplayTiresias replays 60_job.csv on a cluster of half the size,
// arrivals 10× faster, under every policy.
func TestSimReplayTiresias(t *testing.T) {
	t.Parallel()
	c, err := trace.LoadCluster(traces(t, "tiresias", "cluster_spec.csv"), trace.FormatTiresias)
	if err != nil {
		t.Fatal(err)
	}
	w, err := trace.LoadWorkload(traces(t, "tiresias", "60_job.csv"), trace.FormatTiresias, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.ScaleArrivals(10); err != nil {
		t.Fatal(err)
	}
	for _, p := range scheduler.PolicyNames() {
		cfg, err := scheduler.PolicyConfig(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := sim.Run(context.Background(), c, w, cfg)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if r.Completed != 60 || r.Unschedulable != 0 || r.Wait.Max == 0 || r.GPUUtilization <= 0 || r.GPUUtilization > 1 {
			t.Errorf("%s: %+v", p, r)
		}
	}
}

func TestSimLoadBerthYAML(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cluster.yml")
	doc := `# a cluster and a workload in one file
workers:
  - {name: h100, count: 12, gpus: 8xH100:80GiB, cpus: 64, memory: 512GiB}
  - name: big
    gpus: 4xA100:40GiB,4xH100:80GiB
    cpus: 128
jobs:
  - {id: gang, user: alice, submit: 90, nodes: 2, gpus: 8, gpu_type: H100, duration: 1h30m, max_runtime: 2h}
  - id: small
    user: bob
    count: 3
    every: 30s
    submit: 1m
    gpus: 1
    gpu_memory: 40GiB
    cpus: 2.5
    memory: 16GiB
    duration: 600
    priority: 50
    preemptible: true
`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := trace.LoadCluster(path, trace.FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Workers) != 13 || c.Workers[0].ID != "h100-00" || c.Workers[11].ID != "h100-11" || c.Workers[12].ID != "big" ||
		c.Workers[12].GPUs[7].Model != "H100" || c.Workers[0].Memory != 512<<30 {
		t.Fatalf("workers %+v", c.Workers)
	}
	w, err := trace.LoadWorkload(path, trace.FormatAuto, c)
	if err != nil {
		t.Fatal(err)
	}
	want := []sim.Job{
		{ID: "gang", User: "alice", Queue: "default", Priority: 100, Submit: 90 * time.Second, Nodes: 2,
			Resources: berth.Resources{GPUs: 8, GPUType: "H100"}, Duration: 90 * time.Minute, MaxRuntime: 2 * time.Hour},
	}
	for k := range 3 {
		want = append(want, sim.Job{ID: "small-" + string(rune('0'+k)), User: "bob", Queue: "default", Priority: 50,
			Submit: time.Minute + time.Duration(k)*30*time.Second, Nodes: 1,
			Resources: berth.Resources{GPUs: 1, GPUMemory: 40 << 30, CPUs: 2.5, Memory: 16 << 30},
			Duration:  10 * time.Minute, Preemptible: true})
	}
	if len(w.Jobs) != len(want) {
		t.Fatalf("%d jobs, want %d", len(w.Jobs), len(want))
	}
	for i := range want {
		if w.Jobs[i] != want[i] {
			t.Errorf("job %d = %+v\nwant    %+v", i, w.Jobs[i], want[i])
		}
	}
}

// TestSimLoaderErrorsNameFileLineAndField checks each kind of bad input.
func TestSimLoaderErrorsNameFileLineAndField(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := &sim.Cluster{Workers: []sim.Worker{{ID: "w", GPUs: make([]berth.GPU, 4)}}}
	for _, tc := range []struct {
		name, data string
		cluster    bool
		want       string // after the file name
	}{
		{"nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,T4\nn1,lots,1024,2,T4\n", true, ":3: cpu_milli: \"lots\" is not a number"},
		{"nodes2.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,\n", true, ":2: model: a node with GPUs needs a model"},
		{"pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\np,1,1,1.5,1000,0,9,1\n", false, ":2: num_gpu: 1.5 is not a whole number"},
		{"pods2.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\np,1,1,1,1000,0,x,1\n", false, ":2: deletion_time: \"x\" is not a number"},
		{"jobs.csv", "job_id,num_gpu,submit_time,duration\n0,1,0,10\n1,1,5,-3\n", false, ":3: duration: -3 is out of range"},
		{"spec.csv", "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,0,4,40,256\n", true, ":2: num_node_p_switch: 0 is out of range"},
		{"quote.csv", "job_id,num_gpu,duration\n0,1,\"10\n", false, ":2: column"},
		{"w.yaml", "workers:\n  - {count: 2, gpus: 8xH100}\n", true, ":2: workers[0].gpus: \"8xH100\" is not COUNTxMODEL:MEMORY"},
		{"w2.yaml", "workers:\n  - name: a\n    cpu: 4\n", true, ":3: workers[0].cpu: unknown field"},
		{"w3.yaml", "workers:\n  - {name: a}\n  - {name: a}\n", true, ":3: workers[1].name: worker a is also made on line 2"},
		{"j.yaml", "jobs:\n  - {id: a, duration: 1h}\n  - id: b\n    gpus: 1\n    duration: soon\n", false, ":5: jobs[1].duration: \"soon\" is not a duration"},
		{"j2.yaml", "jobs:\n  - {id: a, gpus: 1}\n", false, ":2: jobs[0].duration: is required"},
		{"j3.yaml", "jobs:\n  - {id: a, duration: 1h, priority: 5000}\n", false, ":2: jobs[0].priority: 5000 is out of range"},
		{"j4.yaml", "jobs:\n  - {id: a, duration: 1h, gpus: [1]}\n", false, ":2: jobs[0].gpus: must be a single value"},
		{"j5.yaml", "jobs: {id: a}\n", false, ":1: jobs: must be a list"},
		{"j6.yaml", "jobs:\n  - {id: a, duration: 1h\n", false, ":2: not valid YAML"},
		{"j7.yaml", "job:\n  - {id: a}\n", false, ":1: job: unknown field"},
		{"j8.yaml", "workers: []\n", false, ":1: jobs: the file has no jobs list"},
		{"odd.txt", "hello\n", false, ":1: cannot tell the format"},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
			t.Fatal(err)
		}
		var err error
		if tc.cluster {
			_, err = trace.LoadCluster(path, trace.FormatAuto)
		} else {
			_, err = trace.LoadWorkload(path, trace.FormatAuto, c)
		}
		if err == nil || !strings.HasPrefix(err.Error(), path+tc.want) {
			t.Errorf("%s: %v\nwant an error starting %s%s", tc.name, err, path, tc.want)
		}
	}
	if _, err := trace.LoadCluster(filepath.Join(dir, "missing.csv"), trace.FormatAuto); err == nil || !strings.Contains(err.Error(), "missing.csv: cannot read") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := trace.LoadCluster(filepath.Join(dir, "nodes.csv"), "slurm"); err == nil || !strings.Contains(err.Error(), `unknown format "slurm"`) {
		t.Errorf("unknown format: %v", err)
	}
}

func TestSimDetect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ path, data, want string }{
		{"a.yaml", "", trace.FormatBerth},
		{"a.YML", "", trace.FormatBerth},
		{"nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n", trace.FormatAlibaba},
		{"pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", trace.FormatAlibaba},
		{"spec.csv", "num_switch,num_node_p_switch\n", trace.FormatTiresias},
		{"jobs.csv", "job_id,num_gpu,submit_time,duration\n", trace.FormatTiresias},
		{"cluster", "workers:\n", trace.FormatBerth},
	} {
		if got, err := trace.Detect(tc.path, []byte(tc.data)); got != tc.want || err != nil {
			t.Errorf("trace.Detect(%s) = %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
}

// TestSimRunPlacesWithinCapacity replays the Tiresias trace on a small
// cluster and checks, from the outcomes, that no worker ever held more
// GPUs than it has.
func TestSimRunPlacesWithinCapacity(t *testing.T) {
	t.Parallel()
	c := &sim.Cluster{Workers: []sim.Worker{{ID: "a", GPUs: make([]berth.GPU, 4)}, {ID: "b", GPUs: make([]berth.GPU, 4)}}}
	w, err := trace.LoadWorkload(traces(t, "tiresias", "60_job.csv"), trace.FormatTiresias, c)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sim.Run(context.Background(), c, w, scheduler.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if r.Completed != 60 {
		t.Fatalf("%d of 60 completed", r.Completed)
	}
	gpus := map[string]int{}
	for _, j := range w.Jobs {
		gpus[j.ID] = j.Resources.GPUs * j.Nodes
	}
	for _, o := range r.Outcomes {
		held := 0
		for _, p := range r.Outcomes {
			if p.Start <= o.Start && o.Start < p.End {
				held += gpus[p.ID]
			}
		}
		if held > 8 {
			t.Fatalf("at %s jobs hold %d GPUs of 8", o.Start, held)
		}
	}
}
