package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// stateSMI is an nvidia-smi stand-in that answers the health query with
// the file "gpus" of its state directory and the compute-apps query with
// the file "apps"; while the file "fail" exists it prints it to stderr and
// exits 9.
type stateSMI struct {
	t    *testing.T
	path string
	dir  string
}

func newStateSMI(t *testing.T) *stateSMI {
	t.Helper()
	dir := t.TempDir()
	s := &stateSMI{t: t, path: filepath.Join(dir, "nvidia-smi"), dir: dir}
	script := `#!/bin/sh
if [ -e '` + dir + `/fail' ]; then cat '` + dir + `/fail' >&2; exit 9; fi
case "$*" in
"` + strings.Join(healthQuery.args(), " ") + `") exec cat '` + dir + `/gpus' ;;
"` + strings.Join(statsQuery.args(), " ") + `") exec cat '` + dir + `/stats' ;;
"` + strings.Join(appsQuery.args(), " ") + `") exec cat '` + dir + `/apps' ;;
esac
echo "fake nvidia-smi: unexpected arguments: $*" >&2
exit 64
`
	// No fork may copy the file while it is open for writing, or running
	// it fails with ETXTBSY until that child has exec'd.
	syscall.ForkLock.RLock()
	err := os.WriteFile(s.path, []byte(script), 0o755)
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	s.set("apps", "")
	s.set("stats", "")
	return s
}

// set replaces a state file at once.
func (s *stateSMI) set(name, content string) {
	s.t.Helper()
	tmp := filepath.Join(s.dir, name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, name)); err != nil {
		s.t.Fatal(err)
	}
}

// clear removes a state file.
func (s *stateSMI) clear(name string) {
	s.t.Helper()
	if err := os.Remove(filepath.Join(s.dir, name)); err != nil {
		s.t.Fatal(err)
	}
}

var testGPUs = []berth.GPU{
	{Index: 0, UUID: "GPU-aaaa", Model: "NVIDIA H100 80GB HBM3", Memory: 80 << 30},
	{Index: 1, UUID: "GPU-bbbb", Model: "NVIDIA H100 80GB HBM3", Memory: 80 << 30},
}

func TestGPUHealth(t *testing.T) {
	t.Parallel()
	smi := newStateSMI(t)
	h := newGPUHealth(smi.path, testGPUs)
	for _, step := range []struct {
		name, gpus string
		want       map[int]string
	}{
		{"healthy", "0, GPU-aaaa, 2\n1, GPU-bbbb, [N/A]\n", nil},
		{"no ECC reads N/A", "0, GPU-aaaa, 2\n1, GPU-bbbb, N/A\n", nil},
		{"ECC unsupported", "0, GPU-aaaa, 2\n1, GPU-bbbb, [Not Supported]\n", nil},
		{"ECC increase", "0, GPU-aaaa, 5\n1, GPU-bbbb, [N/A]\n",
			map[int]string{0: "GPU 0 (GPU-aaaa) reported uncorrected ECC errors (2 → 5)"}},
		{"ECC back down after a reset", "0, GPU-aaaa, 0\n1, GPU-bbbb, [N/A]\n", nil},
		{"ECC up from the new low", "0, GPU-aaaa, 1\n1, GPU-bbbb, [N/A]\n",
			map[int]string{0: "GPU 0 (GPU-aaaa) reported uncorrected ECC errors (0 → 1)"}},
		{"reset required", "0, GPU-aaaa, 0\n1, GPU-bbbb, [GPU requires reset]\n",
			map[int]string{1: "GPU 1 (GPU-bbbb) reported an error: [GPU requires reset]"}},
		{"uuid unreadable", "0, GPU-aaaa, 0\n1, [Unknown Error], [Unknown Error]\n",
			map[int]string{1: "GPU 1 (GPU-bbbb) reported an error: [Unknown Error]"}},
		{"ERR!", "0, GPU-aaaa, ERR!\n1, GPU-bbbb, [N/A]\n",
			map[int]string{0: "GPU 0 (GPU-aaaa) reported an error: ERR!"}},
		{"disappeared", "0, GPU-aaaa, 0\n", map[int]string{1: "GPU 1 (GPU-bbbb) disappeared"}},
		{"another GPU at its index", "0, GPU-aaaa, 0\n1, GPU-cccc, 0\n", map[int]string{1: "GPU 1 (GPU-bbbb) disappeared"}},
		{"back", "1, GPU-bbbb, [N/A]\n0, GPU-aaaa, 0\n", nil},
	} {
		smi.set("gpus", step.gpus)
		got, err := h.check(context.Background())
		if err != nil {
			t.Fatalf("%s: check: %v", step.name, err)
		}
		if len(got) != len(step.want) {
			t.Fatalf("%s: faults = %v, want %v", step.name, got, step.want)
		}
		for idx, what := range step.want {
			if got[idx] != what {
				t.Fatalf("%s: faults = %v, want %v", step.name, got, step.want)
			}
		}
	}

	// A failed or unreadable run is an error and changes nothing: the ECC
	// baseline is still 0.
	smi.set("fail", "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.")
	if got, err := h.check(context.Background()); err == nil || !strings.Contains(err.Error(), "could not communicate") {
		t.Fatalf("check with nvidia-smi failing = %v, %v; want its error", got, err)
	}
	smi.clear("fail")
	smi.set("gpus", "0, GPU-aaaa\n")
	if got, err := h.check(context.Background()); err == nil || !strings.Contains(err.Error(), "want 3 comma-separated fields") {
		t.Fatalf("check of a short line = %v, %v; want an error", got, err)
	}
	smi.set("gpus", "0, GPU-aaaa, 3\n1, GPU-bbbb, [N/A]\n")
	if got, err := h.check(context.Background()); err != nil || got[0] != "GPU 0 (GPU-aaaa) reported uncorrected ECC errors (0 → 3)" {
		t.Fatalf("check after failures = %v, %v; want the ECC increase from 0", got, err)
	}
}

func TestAwaitGPURelease(t *testing.T) {
	t.Parallel()
	smi := newStateSMI(t)
	smi.set("apps", "GPU-cccc, 77, 100\n") // another GPU's
	if got, want := awaitGPURelease(context.Background(), smi.path, testGPUs, time.Second), "GPU memory released on GPU 0,1"; got != want {
		t.Errorf("released: %q, want %q", got, want)
	}
	smi.set("apps", "GPU-bbbb, 123, 500\nGPU-cccc, 77, 100\nGPU-bbbb, 124, [N/A]\n")
	if got, want := awaitGPURelease(context.Background(), smi.path, testGPUs, 300*time.Millisecond),
		"GPU memory still held on GPU 1 (pid 123, 500 MiB; pid 124) after 300ms"; got != want {
		t.Errorf("held: %q, want %q", got, want)
	}
	smi.set("fail", "GPU is lost")
	if got, want := awaitGPURelease(context.Background(), smi.path, testGPUs[1:], 100*time.Millisecond),
		"GPU memory release on GPU 1 unconfirmed: nvidia-smi: exit status 9: GPU is lost"; got != want {
		t.Errorf("nvidia-smi failing: %q, want %q", got, want)
	}
}

func TestAgentHardStop(t *testing.T) {
	t.Parallel()
	smi := newStateSMI(t)
	smi.set("gpus", "0, GPU-aaaa, 0\n1, GPU-bbbb, 0\n")
	fs := newFakeServer(t)
	a, _ := startAgent(t, fs, func(c *Config) { c.GPUs, c.NvidiaSMI, c.ReleaseTimeout = testGPUs, smi.path, 300*time.Millisecond })
	const reason = "stopped by operator: queue gpu of box turned off (hard) by alice"

	// A process tree: a child and a grandchild, both ignoring SIGTERM.
	fs.assign(&wire.JobAssign{AttemptID: "a1", Queue: "gpu", GPUs: []int{0, 1}, Command: []string{"sh", "-c",
		`trap "" TERM; sh -c 'sleep 1000 & echo $! >grandchild; wait' & echo $! >child; while [ ! -s grandchild ]; do sleep 0.01; done; echo ready; wait`}})
	fs.output("a1", "ready")
	dir := filepath.Join(a.work.attDir, "a1")
	pids := append(pidsIn(t, filepath.Join(dir, "child")), pidsIn(t, filepath.Join(dir, "grandchild"))...)
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a1", Reason: reason, Cause: berth.CauseOperator})
	checkResult(t, fs.result("a1"), berth.AttemptCancelled, berth.CauseOperator, intp(79),
		reason+"; processes gone; GPU memory released on GPU 0,1")
	assertDead(t, pids...)

	smi.set("apps", "GPU-bbbb, 4242, 500\n")
	fs.assign(&wire.JobAssign{AttemptID: "a2", Queue: "gpu", GPUs: []int{1}, Command: []string{"sleep", "1000"}})
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a2", Reason: reason, Cause: berth.CauseOperator})
	checkResult(t, fs.result("a2"), berth.AttemptCancelled, berth.CauseOperator, intp(79),
		reason+"; processes gone; GPU memory still held on GPU 1 (pid 4242, 500 MiB) after 300ms")
}

func TestConfirmStoppedNamesLingeringProcesses(t *testing.T) {
	t.Parallel()
	s := &supervisor{cfg: &Config{}}
	if got, want := s.confirmStopped(context.Background(), nil, []int{12, 34}), "processes still alive after SIGKILL: pid 12, 34"; got != want {
		t.Fatalf("confirmStopped = %q, want %q", got, want)
	}
}

func TestAgentGPUHealth(t *testing.T) {
	t.Parallel()
	smi := newStateSMI(t)
	smi.set("gpus", "0, GPU-aaaa, 0\n1, GPU-bbbb, 0\n")
	fs := newFakeServer(t)
	startAgent(t, fs, func(c *Config) { c.GPUs, c.NvidiaSMI, c.HealthEvery = testGPUs, smi.path, 20*time.Millisecond })
	sleep := []string{"sleep", "1000"}
	fs.assign(&wire.JobAssign{AttemptID: "on0", GPUs: []int{0}, Command: sleep})
	fs.assign(&wire.JobAssign{AttemptID: "on1", GPUs: []int{1}, Command: sleep})

	smi.set("gpus", "0, GPU-aaaa, 0\n")
	checkResult(t, fs.result("on1"), berth.AttemptFailed, berth.CauseGPUHealth, intp(78), "gpu health: GPU 1 (GPU-bbbb) disappeared")
	fs.await("a heartbeat naming GPU 1 faulty", func(m wire.Message) bool {
		hb, ok := m.Body.(*wire.Heartbeat)
		return ok && slices.Equal(hb.FaultyGPUs, []int{1}) && slices.Equal(hb.Running, []string{"on0"})
	})

	// GPU 1 is back; the heartbeats carry the GPUs' load.
	smi.set("gpus", "0, GPU-aaaa, 0\n1, GPU-bbbb, 0\n")
	smi.set("stats", "0, 57, 1024\n1, [N/A], 0\n")
	fs.await("a heartbeat with no faulty GPU after the first, with GPU 0's load", func(m wire.Message) bool {
		hb, ok := m.Body.(*wire.Heartbeat)
		return ok && len(hb.FaultyGPUs) == 0 && slices.Equal(hb.Running, []string{"on0"}) &&
			slices.Equal(hb.GPUStats, []berth.GPUStat{{Index: 0, Utilization: 57, MemoryUsed: 1 << 30}})
	})
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "on0", Reason: "cancelled by erin"})
	checkResult(t, fs.result("on0"), berth.AttemptCancelled, "", nil, "cancelled by erin")
}

// TestGPUHealthMIG: a MIG device is as healthy as the GPU it is part of,
// which the health query lists by the parent's UUID.
func TestGPUHealthMIG(t *testing.T) {
	t.Parallel()
	smi := newStateSMI(t)
	gpus := []berth.GPU{
		{Index: 1, UUID: "GPU-bbbb", Model: "NVIDIA A100", Memory: 80 << 30},
		{Index: 2, UUID: "MIG-1111", Model: "3g.40gb", Memory: 40e9, Parent: "GPU-aaaa"},
		{Index: 3, UUID: "MIG-2222", Model: "3g.40gb", Memory: 40e9, Parent: "GPU-aaaa"},
	}
	h := newGPUHealth(smi.path, gpus)
	for _, step := range []struct {
		name, gpus string
		want       string
	}{
		{"healthy", "0, GPU-aaaa, 0\n1, GPU-bbbb, 0\n", "map[]"},
		{"parent faulted", "0, GPU-aaaa, ERR!\n1, GPU-bbbb, 0\n",
			"map[2:GPU 2 (MIG-1111) reported an error: ERR! 3:GPU 3 (MIG-2222) reported an error: ERR!]"},
		{"parent gone", "1, GPU-bbbb, 0\n", "map[2:GPU 2 (MIG-1111) disappeared 3:GPU 3 (MIG-2222) disappeared]"},
	} {
		smi.set("gpus", step.gpus)
		got, err := h.check(context.Background())
		if err != nil || fmt.Sprint(got) != step.want {
			t.Errorf("%s: faults = %v, %v; want %s", step.name, got, err, step.want)
		}
	}
}

// TestRealH100Answers reads what nvidia-smi (driver 580.159.04) answered on
// an H100 machine, byte for byte, to the health, load and compute-apps
// queries: once idle, once while two half-GPU jobs each held 10 GiB.
func TestRealH100Answers(t *testing.T) {
	t.Parallel()
	h100 := []berth.GPU{{Index: 0, UUID: "GPU-009bc4cc-7f22-986b-8713-e7a7af83aee9", Model: "NVIDIA H100 80GB HBM3", Memory: 81559 << 20}}
	smi := newStateSMI(t)
	smi.set("gpus", "0, GPU-009bc4cc-7f22-986b-8713-e7a7af83aee9, 0\n")
	smi.set("stats", "0, 0, 0\n")
	if faults, err := newGPUHealth(smi.path, h100).check(context.Background()); err != nil || len(faults) != 0 {
		t.Fatalf("health check of an idle H100 = %v, %v; want no fault", faults, err)
	}
	if stats, err := gpuStats(context.Background(), smi.path); err != nil || !slices.Equal(stats, []berth.GPUStat{{Index: 0}}) {
		t.Fatalf("load of an idle H100 = %+v, %v; want GPU 0 at 0 %% and 0 bytes", stats, err)
	}
	if got, want := awaitGPURelease(context.Background(), smi.path, h100, time.Second), "GPU memory released on GPU 0"; got != want {
		t.Fatalf("release on an idle H100 (no compute app: empty output) = %q, want %q", got, want)
	}
	smi.set("apps", "GPU-009bc4cc-7f22-986b-8713-e7a7af83aee9, 657, 10758\nGPU-009bc4cc-7f22-986b-8713-e7a7af83aee9, 668, 10758\n")
	held, err := computeApps(context.Background(), smi.path, h100)
	if want := []string{"GPU 0 (pid 657, 10758 MiB; pid 668, 10758 MiB)"}; err != nil || !slices.Equal(held, want) {
		t.Fatalf("compute apps of two half-GPU jobs = %q, %v; want %q", held, err, want)
	}
}
