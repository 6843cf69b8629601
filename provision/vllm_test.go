package provision

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud"
	"github.com/berth-dev/berth/cloud/vast/vasttest"
)

// newVLLMRig is a rig whose pool is a vLLM pool of model on a free
// loopback port, whose machines have the fake vLLM server
// (agent/testdata/fakevllm, built for the test) as vllm on their PATH,
// and whose provisioner creates instances as the server does for a vLLM
// pool: vllm serve from the onstart (VLLMOnstart), the port exposed.
func newVLLMRig(t *testing.T, machines int, faults map[int64]vasttest.Fault) *rig {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fakevllm")
	if out, err := exec.Command("go", "build", "-o", bin, "../agent/testdata/fakevllm").CombinedOutput(); err != nil {
		t.Fatalf("build fakevllm: %v\n%s", err, out)
	}
	r := newRig(t, machines, faults, vasttest.WithCommand("vllm", bin))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r.pool.Workload, r.pool.Model, r.pool.Port, r.pool.MaxModelLen = berth.WorkloadVLLM, "Qwen/Qwen2.5-0.5B-Instruct", port, 4096
	if err := r.st.PutPool(context.Background(), r.pool); err != nil {
		t.Fatal(err)
	}
	r.p.Request = func(pool *berth.Pool, inst *berth.Instance) cloud.CreateRequest {
		return cloud.CreateRequest{Image: pool.Image, DiskGB: 32, Env: VLLMEnv(pool), Onstart: VLLMOnstart(pool)}
	}
	// The fake clock runs ahead of the real vLLM warm-up (each poll
	// advances it 5s at once): a day's budget leaves the real warm-up
	// time to end, however busy the test machine.
	r.p.Budgets.Ready = 24 * time.Hour
	return r
}

// A vLLM node reaches ready through vLLM's startup markers and a
// /v1/models that lists the pool's model, read over SSH; its endpoint is
// the instance's public address for the port, and it has no worker.
func TestProvisionVLLMNodeReady(t *testing.T) {
	t.Parallel()
	r := newVLLMRig(t, 2, nil)
	inst, err := r.p.Provision(context.Background(), r.pool)
	if err != nil {
		t.Fatal(err)
	}
	r.checkReady(t, inst, vasttest.FirstMachine)
	if want := "127.0.0.1:" + strconv.Itoa(r.pool.Port); inst.Endpoint != want || inst.WorkerHost != "" {
		t.Errorf("endpoint %q, worker host %q; want %s and no worker", inst.Endpoint, inst.WorkerHost, want)
	}
	if ready := inst.Timeline[len(inst.Timeline)-1]; !strings.Contains(ready.Reason, "vllm serves Qwen/Qwen2.5-0.5B-Instruct at http://"+inst.Endpoint) {
		t.Errorf("ready because %q; want vllm serving the model at its endpoint", ready.Reason)
	}
	var progress, models bool
	for _, p := range inst.Probes {
		switch {
		case p.Phase != berth.InstanceGPUChecked:
		case p.Command == vllmLogProbe && p.Class == berth.FailureWarmup && strings.Contains(p.Output, "startup markers; last"):
			progress = true
		case p.Command == modelsProbe(r.pool.Port) && p.Class == "" && p.ExitCode != nil && *p.ExitCode == 0:
			models = strings.Contains(p.Output, `"id":"Qwen/Qwen2.5-0.5B-Instruct"`)
		}
	}
	if !progress || !models {
		t.Errorf("probes (markers seen as progress %v, /v1/models listing the model %v):\n%+v", progress, models, inst.Probes)
	}
	stored, err := r.st.Instance(context.Background(), inst.ID)
	if err != nil || stored.Endpoint != inst.Endpoint || len(stored.Probes) != len(inst.Probes) {
		t.Errorf("stored %+v, %v; want the endpoint and every probe kept", stored, err)
	}
}

// A vLLM node whose server runs out of GPU memory during its warm-up is
// workload-fatal: destroyed, provisioning stops with the log's line, no
// other offer is tried, and its machine is not quarantined.
func TestProvisionVLLMOutOfMemoryIsWorkloadFatal(t *testing.T) {
	t.Parallel()
	r := newVLLMRig(t, 2, map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultOOM})
	inst, err := r.p.Provision(context.Background(), r.pool)
	var f *Failure
	if !errors.As(err, &f) || f.Class != berth.FailureWorkloadFatal || !strings.Contains(f.Reason, "CUDA out of memory") {
		t.Fatalf("Provision = %v, want a workload-fatal failure naming CUDA out of memory", err)
	}
	if inst == nil || inst.Phase != berth.InstanceDestroyed || inst.Failure != berth.FailureWorkloadFatal {
		t.Fatalf("instance = %+v, want destroyed, workload-fatal", inst)
	}
	if got := phases(inst); !slices.Equal(got, append(slices.Clone(toReady[:5]), failedOut...)) {
		t.Errorf("timeline = %v", got)
	}
	last := inst.Probes[len(inst.Probes)-1]
	if last.Command != vllmLogProbe || last.Class != berth.FailureWorkloadFatal || !strings.Contains(last.Output, "torch.OutOfMemoryError: CUDA out of memory") ||
		strings.Contains(last.Output, "\x1b") {
		t.Errorf("last probe = %+v, want the log's out-of-memory line, workload-fatal, without ANSI codes", last)
	}
	h := r.host(t, vasttest.FirstMachine)
	if h == nil || h.Failures[berth.FailureWorkloadFatal] != 1 || !cloud.Usable(h, r.clk.Now()) {
		t.Errorf("host record %+v: want one workload-fatal failure and no quarantine", h)
	}
	if len(r.srv.Live()) != 0 || len(r.creates()) != 1 {
		t.Errorf("live %v, creates %v: want nothing billed and one create (no other offer tried)", r.srv.Live(), r.creates())
	}
}

// vLLM's log lines are matched without their ANSI codes and process
// prefixes; a fatal pattern gives its class, a missing libcuda the
// machine's, a marker counts once.
func TestVLLMWatchScan(t *testing.T) {
	t.Parallel()
	w := newVLLMWatch()
	log := "\x1b[1;36m(EngineCore_0 pid=4711)\x1b[0;0m INFO 11-26 05:00:00 [loader.py:262] Loading weights took 3.21 seconds\n" +
		"Loading safetensors checkpoint shards:  50% Completed | 2/4\r" +
		"(APIServer pid=1) INFO vLLM API server version 0.10.1\n"
	if n, fatal, class := w.scan(log); n != 3 || fatal != "" || class != "" {
		t.Fatalf("scan = %d, %q, %q; want 3 markers, no fatal line", n, fatal, class)
	}
	if n, _, _ := w.scan(log); n != 0 || w.summary() != `3 of 13 startup markers; last "Loading weights took"` {
		t.Errorf("the same log again: %d new, summary %q", n, w.summary())
	}
	for line, want := range map[string]string{
		"\x1b[1;31m(EngineCore_0 pid=9)\x1b[0m ERROR vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue": berth.FailureWorkloadFatal,
		"(VllmWorker rank=0 pid=7) /usr/bin/ld: cannot find -lcuda: No such file or directory":                                   berth.FailureInfraFatal,
		noVLLM: berth.FailureWorkloadFatal,
	} {
		_, fatal, class := newVLLMWatch().scan(line + "\n")
		if class != want || strings.Contains(fatal, "pid=") || strings.Contains(fatal, "\x1b") {
			t.Errorf("scan(%q) = %q, %q; want class %s, the line without prefix or codes", line, fatal, class, want)
		}
	}
}

// A node is ready when /v1/models lists the pool's model by id, not on any
// answer; its endpoint is the public port mapped to its own.
func TestServedModelsAndEndpoint(t *testing.T) {
	t.Parallel()
	for out, want := range map[string]string{
		`{"object":"list","data":[{"id":"Qwen/Qwen2.5-0.5B-Instruct","object":"model"}]}`: "",
		`{"object":"list","data":[{"id":"other"},{"id":"qwen"}]}`:                         `["other", "qwen"]`,
		`{"detail":"Not Found"}`:   `[]`,
		`<html>bad gateway</html>`: "no model list",
	} {
		listed, served := servedModels(out, "Qwen/Qwen2.5-0.5B-Instruct")
		if served != (want == "") || !strings.HasPrefix(listed, want) {
			t.Errorf("servedModels(%s) = %q, %v; want %q", out, listed, served, want)
		}
	}
	pi := &cloud.ProviderInstance{PublicIP: "203.0.113.7", Ports: map[int]int{22: 40022, 8000: 41234}}
	if got := endpoint(pi, 8000); got != "203.0.113.7:41234" {
		t.Errorf("endpoint = %q, want the public port mapped to 8000", got)
	}
	if got := endpoint(pi, 8001); got != "" {
		t.Errorf("endpoint of an unmapped port = %q, want none", got)
	}
}
