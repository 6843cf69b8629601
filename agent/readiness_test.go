package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fakeclock"
	"github.com/berth-dev/berth/internal/freeport"
)

// vllmMarkers are vLLM's startup markers (shared/reference/vast-and-vllm.md).
var vllmMarkers = []string{
	"vLLM API server version", "Resolved architecture", "Loading safetensors checkpoint shards",
	"Loading weights took", "Model loading took", "Available KV cache memory", "GPU KV cache size",
	"Capturing CUDA graph", "Graph capturing finished",
	"init engine (profile, create kv cache, warmup model) took", "Starting vLLM API server",
	"Application startup complete",
}

var vllmFatal = []FatalPattern{
	{Substring: "CUDA out of memory", Class: FailWorkloadFatal},
	{Substring: "EngineDeadError", Class: FailWorkloadFatal},
	{Substring: "cannot find -lcuda", Class: FailInfraFatal},
}

const testModel = "Qwen/Qwen2-VL-7B-Instruct"

// vllmSpec is a vLLM readiness spec with test-sized budgets.
func vllmSpec() ReadinessSpec {
	return ReadinessSpec{
		Probe:        ProbeSpec{Kind: "http", Path: "/v1/models", ModelIn: testModel},
		Liveness:     ProbeSpec{Kind: "http", Path: "/health"},
		Infra:        3 * time.Second,
		Warmup:       10 * time.Second,
		Stall:        2 * time.Second,
		Markers:      vllmMarkers,
		Fatal:        vllmFatal,
		LiveEvery:    100 * time.Millisecond,
		LiveFailures: 2,
	}
}

// reports records what a Prober reports.
type reports struct {
	mu  sync.Mutex
	got []ServiceStatus
}

func (r *reports) add(s ServiceStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s)
}

// phases returns the phases reported, in order, repeats collapsed.
func (r *reports) phases() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.got {
		if len(out) == 0 || out[len(out)-1] != s.Phase { // a warming service reports each new marker
			out = append(out, s.Phase)
		}
	}
	return out
}

func (r *reports) last() ServiceStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) == 0 {
		return ServiceStatus{}
	}
	return r.got[len(r.got)-1]
}

// stepProber is a Prober driven step by step on a fake clock, reading a log
// file the test writes.
type stepProber struct {
	*Prober
	t       *testing.T
	clock   *fakeclock.Clock
	log     string
	reports *reports
}

func newStepProber(t *testing.T, spec ReadinessSpec, port int) *stepProber {
	t.Helper()
	sp := &stepProber{t: t, clock: fakeclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)), log: filepath.Join(t.TempDir(), "out.log"), reports: &reports{}}
	p, err := NewProber(ProberConfig{
		Spec: spec, Port: port, LogPath: sp.log,
		Now: sp.clock.Now, Report: sp.reports.add, ProbeTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatalf("NewProber: %v", err)
	}
	p.start = sp.clock.Now()
	sp.Prober = p
	return sp
}

func (sp *stepProber) write(lines ...string) {
	sp.t.Helper()
	f, err := os.OpenFile(sp.log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		sp.t.Fatal(err)
	}
	defer f.Close()
	for _, l := range lines {
		if _, err := f.WriteString(l); err != nil {
			sp.t.Fatal(err)
		}
	}
}

// at advances the clock by d, steps once and checks the phase.
func (sp *stepProber) at(d time.Duration, phase string) ServiceStatus {
	sp.t.Helper()
	sp.clock.Advance(d)
	sp.step(context.Background())
	st := sp.Status()
	if st.Phase != phase {
		sp.t.Fatalf("after %v more: phase %q (%s), want %q", d, st.Phase, st.Reason, phase)
	}
	return st
}

func TestProberStallNeedsSemanticProgress(t *testing.T) {
	t.Parallel()
	spec := vllmSpec()
	spec.Infra, spec.Warmup, spec.Stall = time.Minute, time.Hour, 10*time.Second
	sp := newStepProber(t, spec, freeport.ForTest(t))
	sp.at(0, ServiceStarting)
	sp.write("\x1b[1;36m(APIServer pid=7)\x1b[0;0m INFO vLLM API server version 0.10.1\n")
	if st := sp.at(time.Second, ServiceWarming); st.Marker != "vLLM API server version" {
		t.Fatalf("marker %q, want the first", st.Marker)
	}
	// Raw log growth is no progress, nor is a marker seen before.
	sp.write("INFO waiting\n")
	sp.at(4*time.Second, ServiceWarming)
	sp.write("INFO waiting\n", "INFO vLLM API server version 0.10.1\n")
	sp.at(4*time.Second, ServiceWarming)
	sp.write("(EngineCore_0 pid=9) INFO Resolved architature typo\r(EngineCore_0 pid=9) INFO Resolved architecture: Qwen2\r")
	sp.at(time.Second, ServiceWarming) // 9s: a new marker
	sp.write("INFO waiting\n")
	sp.at(9*time.Second, ServiceWarming) // 18s: 9s since the marker
	sp.write("INFO waiting\n")
	st := sp.at(time.Second, ServiceFailed)
	if st.Class != FailStall || !strings.Contains(st.Reason, `no startup progress for 10s (last marker "Resolved architecture")`) {
		t.Fatalf("failed %+v, want class stall naming the last marker", st)
	}
	if got, want := sp.reports.phases(), []string{ServiceWarming, ServiceFailed}; !slices.Equal(got, want) {
		t.Fatalf("reported %v, want %v", got, want)
	}
	// Each new marker while warming was reported (the gateway names the
	// phase after it), once.
	var markers []string
	for _, r := range sp.reports.got {
		if r.Phase == ServiceWarming {
			markers = append(markers, r.Marker)
		}
	}
	if want := []string{"vLLM API server version", "Resolved architecture"}; !slices.Equal(markers, want) {
		t.Fatalf("warming reports carried markers %q, want %q", markers, want)
	}
}

func TestProberInfraBudget(t *testing.T) {
	t.Parallel()
	port := freeport.ForTest(t)
	sp := newStepProber(t, vllmSpec(), port)
	sp.write("INFO starting the container\n") // output, but no marker
	sp.at(2*time.Second, ServiceStarting)
	st := sp.at(time.Second, ServiceFailed)
	want := fmt.Sprintf("port %d not bound within 3s", port)
	if st.Class != FailInfraFatal || st.Reason != want {
		t.Fatalf("failed %+v, want infra_fatal %q", st, want)
	}
}

func TestProberFatalLine(t *testing.T) {
	t.Parallel()
	sp := newStepProber(t, vllmSpec(), freeport.ForTest(t))
	sp.write("INFO vLLM API server version 0.10.1\n")
	sp.at(time.Second, ServiceWarming)
	sp.write("\x1b[1;31m(EngineCore_0 pid=9) ERROR\x1b[0m torch.OutOfMemoryError: cuda OUT of memory. Tried to allocate 2.00 GiB\n")
	st := sp.at(time.Second, ServiceFailed)
	if st.Class != FailWorkloadFatal || st.Reason != "fatal log line: (EngineCore_0 pid=9) ERROR torch.OutOfMemoryError: cuda OUT of memory. Tried to allocate 2.00 GiB" {
		t.Fatalf("failed %+v, want workload_fatal with the line, ANSI stripped", st)
	}
}

func TestProberWrongModelKeepsWarming(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"facebook/opt-125m","object":"model"},{"id":"other"}]}`)
	}))
	t.Cleanup(srv.Close)
	spec := vllmSpec()
	spec.Infra, spec.Warmup, spec.Stall = time.Minute, 30*time.Second, 10*time.Second
	sp := newStepProber(t, spec, srv.Listener.Addr().(*net.TCPAddr).Port)
	st := sp.at(time.Second, ServiceWarming) // the port is bound
	want := `GET /v1/models: model "Qwen/Qwen2-VL-7B-Instruct" not served; listed: ["facebook/opt-125m", "other"]`
	if st.Reason != want {
		t.Fatalf("warming reason %q, want %q", st.Reason, want)
	}
	// No marker ever, yet an answering server is not stalled.
	for range 7 {
		sp.at(4*time.Second, ServiceWarming)
	}
	st = sp.at(2*time.Second, ServiceFailed)
	if st.Class != FailWarmup || st.Reason != "not ready within 30s of warm-up (no startup marker seen): "+want {
		t.Fatalf("failed %+v, want warmup listing the ids", st)
	}
}

func TestProberLiveness(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	healthy.Store(true)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"data":[{"id":%q}]}`, testModel)
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			http.Error(w, "EngineDeadError", http.StatusServiceUnavailable)
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	spec := vllmSpec()
	spec.LiveEvery = 10 * time.Second
	sp := newStepProber(t, spec, srv.Listener.Addr().(*net.TCPAddr).Port)
	sp.at(0, ServiceReady)
	healthy.Store(false)
	sp.at(10*time.Second, ServiceReady) // one failure
	sp.at(5*time.Second, ServiceReady)  // not probed: within LiveEvery
	st := sp.at(5*time.Second, ServiceUnready)
	if !strings.Contains(st.Reason, "liveness probe failed 2 times in a row: GET /health: status 503, want 200: EngineDeadError") {
		t.Fatalf("unready reason %q", st.Reason)
	}
	sp.at(10*time.Second, ServiceUnready)
	healthy.Store(true)
	sp.at(10*time.Second, ServiceReady)
	if got, want := sp.reports.phases(), []string{ServiceWarming, ServiceReady, ServiceUnready, ServiceReady}; !slices.Equal(got, want) {
		t.Fatalf("reported %v, want %v", got, want)
	}
}

func TestProberProcessExit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, log, class, reason string
	}{
		{"no cause", "INFO vLLM API server version 0.10.1\nTraceback: KeyError 'x'\n", FailUnknown,
			`process exited before ready (last marker "vLLM API server version")`},
		// The last line has no newline: it is read all the same.
		{"fatal last line", "INFO vLLM API server version 0.10.1\n/usr/bin/ld: cannot find -lcuda", FailInfraFatal,
			"process exited before ready: /usr/bin/ld: cannot find -lcuda"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log := filepath.Join(t.TempDir(), "out.log")
			if err := os.WriteFile(log, []byte(tc.log), 0o644); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			close(done)
			var r reports
			p, err := NewProber(ProberConfig{Spec: vllmSpec(), Port: freeport.ForTest(t), LogPath: log, Done: done, Report: r.add})
			if err != nil {
				t.Fatal(err)
			}
			st := p.Run(t.Context())
			if st.Phase != ServiceFailed || st.Class != tc.class || st.Reason != tc.reason {
				t.Fatalf("Run = %+v, want failed %s %q", st, tc.class, tc.reason)
			}
			if r.last() != st {
				t.Fatalf("last report %+v, Run returned %+v", r.last(), st)
			}
		})
	}
}

// TestProberNeverReportsAnExitedProcessReady: the process exits while a
// readiness probe is under way, and the probe passes all the same
// (something else answers on the port): the prober reports the exit, never
// ready.
func TestProberNeverReportsAnExitedProcessReady(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(done) }) // the process exits as the probe is answered
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	var r reports
	p, err := NewProber(ProberConfig{Spec: ReadinessSpec{Probe: ProbeSpec{Kind: "http", Path: "/"}}, Port: port,
		LogPath: filepath.Join(t.TempDir(), "out.log"), Done: done, Report: r.add})
	if err != nil {
		t.Fatal(err)
	}
	st := p.Run(t.Context())
	if st.Phase != ServiceFailed || st.Class != FailUnknown || !strings.Contains(st.Reason, "exited before ready") {
		t.Fatalf("Run = %+v, want failed unknown: exited before ready", st)
	}
	if slices.Contains(r.phases(), ServiceReady) {
		t.Fatalf("reported %v: an exited process reported ready", r.phases())
	}
}

func TestProberRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  ProberConfig
		want string
	}{
		{"port", ProberConfig{Port: 0}, "port 0"},
		{"kind", ProberConfig{Port: 80, Spec: ReadinessSpec{Probe: ProbeSpec{Kind: "grpc"}}}, `probe: kind "grpc"`},
		{"path", ProberConfig{Port: 80, Spec: ReadinessSpec{Liveness: ProbeSpec{Path: "health"}}}, "liveness: path"},
		{"negative", ProberConfig{Port: 80, Spec: ReadinessSpec{Stall: -1}}, "stall -1ns is negative"},
		{"fatal class", ProberConfig{Port: 80, Spec: ReadinessSpec{Fatal: []FatalPattern{{Substring: "x"}}}}, "needs a substring and a class"},
		{"marker", ProberConfig{Port: 80, Spec: ReadinessSpec{Markers: []string{" "}}}, "marker is empty"},
	} {
		if _, err := NewProber(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewProber error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestReadinessFakeVLLM runs the Prober against the fake vLLM server as a
// real child process writing its output to a log file.
func TestReadinessFakeVLLM(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the fake server:", err)
	}
	bin := filepath.Join(t.TempDir(), "fakevllm")
	if out, err := exec.Command(goBin, "build", "-o", bin, "./testdata/fakevllm").CombinedOutput(); err != nil {
		t.Fatalf("build fakevllm: %v\n%s", err, out)
	}

	// watch starts the fake with args and a Prober on it, and returns the
	// Prober's last status once it reports until (or fails).
	watch := func(t *testing.T, spec ReadinessSpec, until string, args ...string) (ServiceStatus, []string, int) {
		t.Helper()
		port := freeport.ForTest(t)
		log := filepath.Join(t.TempDir(), "out.log")
		f, err := os.Create(log)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd := exec.Command(bin, append([]string{"--port", strconv.Itoa(port), "--model", testModel}, args...)...)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })

		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		var r reports
		p, err := NewProber(ProberConfig{
			Spec: spec, Port: port, LogPath: log, Done: done,
			Interval: 50 * time.Millisecond, ProbeTimeout: time.Second,
			Report: func(s ServiceStatus) {
				r.add(s)
				if s.Phase == until {
					cancel()
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		st := p.Run(ctx)
		if st.Phase != until {
			out, _ := os.ReadFile(log)
			t.Fatalf("ended %+v after reporting %v, want %s; log:\n%s", st, r.phases(), until, out)
		}
		return st, r.phases(), port
	}

	t.Run("ready after a slow warm-up", func(t *testing.T) {
		t.Parallel()
		st, phases, _ := watch(t, vllmSpec(), ServiceReady, "--markers", "--warmup", "1s")
		if want := []string{ServiceStarting, ServiceWarming, ServiceReady}; !slices.Equal(phases, want) {
			t.Fatalf("reported %v, want %v", phases, want)
		}
		if !slices.Contains(vllmMarkers[len(vllmMarkers)-3:], st.Marker) {
			t.Fatalf("ready with last marker %q, want one of the last", st.Marker)
		}
	})
	t.Run("stall", func(t *testing.T) {
		t.Parallel()
		spec := vllmSpec()
		spec.Stall = 500 * time.Millisecond
		st, _, _ := watch(t, spec, ServiceFailed, "--stall")
		if st.Class != FailStall || !strings.Contains(st.Reason, `no startup progress for 500ms (last marker "Resolved architecture")`) {
			t.Fatalf("failed %+v, want stall after the second marker", st)
		}
	})
	t.Run("crash", func(t *testing.T) {
		t.Parallel()
		st, _, _ := watch(t, vllmSpec(), ServiceFailed, "--markers", "--warmup", "5s", "--crash-after", "300ms")
		if st.Class != FailWorkloadFatal || !strings.Contains(st.Reason, "torch.OutOfMemoryError: CUDA out of memory") {
			t.Fatalf("failed %+v, want workload_fatal for CUDA out of memory", st)
		}
	})
	t.Run("wrong model id", func(t *testing.T) {
		t.Parallel()
		spec := vllmSpec()
		spec.Warmup = 3 * time.Second // Stall (2s) would end first if an answering server did not count
		st, phases, _ := watch(t, spec, ServiceFailed, "--markers", "--warmup", "200ms", "--serve-id", "other/model")
		if want := []string{ServiceStarting, ServiceWarming, ServiceFailed}; !slices.Equal(phases, want) {
			t.Fatalf("reported %v, want %v", phases, want)
		}
		if st.Class != FailWarmup || !strings.Contains(st.Reason, `not ready within 3s of warm-up`) ||
			!strings.Contains(st.Reason, `model "Qwen/Qwen2-VL-7B-Instruct" not served; listed: ["other/model"]`) {
			t.Fatalf("failed %+v, want warmup listing the served id", st)
		}
	})
	t.Run("never binds", func(t *testing.T) {
		t.Parallel()
		spec := vllmSpec()
		spec.Infra = 500 * time.Millisecond
		st, phases, port := watch(t, spec, ServiceFailed, "--warmup", "1h")
		if want := []string{ServiceStarting, ServiceFailed}; !slices.Equal(phases, want) {
			t.Fatalf("reported %v, want %v", phases, want)
		}
		if want := fmt.Sprintf("port %d not bound within 500ms", port); st.Class != FailInfraFatal || st.Reason != want {
			t.Fatalf("failed %+v, want infra_fatal %q", st, want)
		}
	})
	t.Run("health fails after ready", func(t *testing.T) {
		t.Parallel()
		st, phases, _ := watch(t, vllmSpec(), ServiceUnready, "--health-fail-after", "300ms")
		if want := []string{ServiceStarting, ServiceWarming, ServiceReady, ServiceUnready}; !slices.Equal(phases, want) {
			t.Fatalf("reported %v, want %v", phases, want)
		}
		if !strings.Contains(st.Reason, "status 503, want 200: EngineDeadError") {
			t.Fatalf("unready %+v, want the 503 named", st)
		}
	})
}
