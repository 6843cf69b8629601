package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBenchReportsEveryFigure runs a small berth bench end to end: its own
// server and agents, real true processes, the no-op executor, the latency
// run and the bare starts. It checks that every figure is measured and
// consistent; how fast they are is for docs/performance.md, not a test.
// The CPU and memory profiles it is asked for are written.
func TestBenchReportsEveryFigure(t *testing.T) {
	t.Parallel()
	c := &cli{t: t}
	cpu, mem := filepath.Join(t.TempDir(), "cpu.pprof"), filepath.Join(t.TempDir(), "mem.pprof")
	res := runJSON[BenchResult](c, "bench", "--jobs", "30", "--noop-jobs", "200", "--latency", "5", "--bare", "10",
		"--agents", "1", "--slots", "4", "--cpuprofile", cpu, "--memprofile", mem, "-o", "json")
	for _, path := range []string{cpu, mem} {
		// A profile is gzipped protocol buffers.
		if data, err := os.ReadFile(path); err != nil || len(data) < 100 || data[0] != 0x1f || data[1] != 0x8b {
			t.Errorf("profile %s: %d bytes, %v; want a gzipped profile", path, len(data), err)
		}
	}
	if res.Store != "SQLite" || res.Jobs != 30 || res.Agents != 1 || res.CPUs < 1 {
		t.Errorf("bench describes its run as %+v", res)
	}
	if res.ProcessJobsPerSec <= 0 || res.NoopJobsPerSec <= 0 || res.BareStartsPerSec <= 0 {
		t.Errorf("throughputs: real %v, no-op %v, bare starts %v jobs/s; want all measured",
			res.ProcessJobsPerSec, res.NoopJobsPerSec, res.BareStartsPerSec)
	}
	if res.LatencySamples != 5 || res.StartP50Ms <= 0 || res.StartP99Ms < res.StartP50Ms {
		t.Errorf("latency: %d samples, p50 %v ms, p99 %v ms", res.LatencySamples, res.StartP50Ms, res.StartP99Ms)
	}
}

// TestBenchSteadyCountsTheWorkedJobs runs a small steady run (river
// bench's shape) on SQLite: the first backlog goes in before the clock,
// jobs are worked while it runs, and the figure is those jobs over the
// clock.
func TestBenchSteadyCountsTheWorkedJobs(t *testing.T) {
	t.Parallel()
	shape := steadyShape{duration: 2 * time.Second, batch: 200, backlog: 1_000, agents: 1}
	run, err := benchSteady(context.Background(), "", shape)
	if err != nil {
		t.Fatal(err)
	}
	if run.Worked == 0 || run.Elapsed < shape.duration {
		t.Fatalf("steady run %+v: want jobs worked over at least %v", run, shape.duration)
	}
	if run.Inserted < shape.backlog || run.Inserted%shape.batch != 0 || run.Worked > uint64(run.Inserted) {
		t.Errorf("steady run %+v: want arrays of %d, the first %d among them, and no more worked than submitted", run, shape.batch, shape.backlog)
	}
	if got, want := run.rate(), float64(run.Worked)/run.Elapsed.Seconds(); got != want {
		t.Errorf("rate = %v, want %v", got, want)
	}
}

// TestKeepBacklog drives the steady run's inserter against a backlog of
// 3 that starts at 1 and loses one job between wake-ups: it must submit
// twice at the first wake-up and once at each later one, and end without
// an error when its context does.
func TestKeepBacklog(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	level, reads, submitted := 1, []int{}, 0
	pending := func(context.Context) (int, error) {
		reads = append(reads, level)
		n := level
		if n >= 3 {
			level-- // a job worked before the next wake-up
		}
		return n, nil
	}
	submit := func(context.Context) error {
		level++
		if submitted++; submitted == 4 {
			cancel()
		}
		return nil
	}
	if err := keepBacklog(ctx, pending, submit, 3); err != nil {
		t.Fatalf("keepBacklog ended with %v, want nil once its context ended", err)
	}
	// Wake-ups: 1 → submit, 2 → submit, 3 full; 2 → submit, 3 full; 2 →
	// submit, the 4th, which ends the context: the next read sees it.
	if want := []int{1, 2, 3, 2, 3, 2, 3}; submitted != 4 || !slices.Equal(reads, want) {
		t.Errorf("%d submissions after reading pending %v; want 4 after %v", submitted, reads, want)
	}

	failing := func(context.Context) error { return errors.New("refused") }
	err := keepBacklog(context.Background(), func(context.Context) (int, error) { return 0, nil }, failing, 3)
	if err == nil || !strings.Contains(err.Error(), "keep the backlog: refused") {
		t.Errorf("keepBacklog with a failing submit = %v, want its error", err)
	}
}

func TestBenchBadFlags(t *testing.T) {
	t.Parallel()
	c := &cli{t: t}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bare", "-1"}, "--bare: must be between 0 and 1000000"},
		{[]string{"--noop-jobs", "100001"}, "--noop-jobs: must be between 0 and 100000"},
		{[]string{"--latency", "-3"}, "--latency: must be between 0"},
		{[]string{"--agents", "0"}, "--agents: must be between 1 and 64"},
		{[]string{"--steady", "10ms"}, "--steady: must be 0 or between 1s and 1h"},
		{[]string{"-o", "yaml"}, "-o: must be table or json"},
		{[]string{"--memprofile", "/no/such/dir/mem.pprof"}, "--memprofile: open /no/such/dir/mem.pprof: no such file"},
	} {
		code, out, errOut := c.run(append([]string{"bench"}, tc.args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("bench %s: exit %d, stdout %q, stderr %q; want 2 and one line with %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

// TestBenchFederationReportsEveryFigure runs a small berth bench
// federation: an origin and a peer in this process hand jobs over
// loopback, a backlog then a few one at a time. Every figure must be
// measured and consistent; how fast they are is for docs/performance.md.
func TestBenchFederationReportsEveryFigure(t *testing.T) {
	t.Parallel()
	c := &cli{t: t}
	res := runJSON[FederationBenchResult](c, "bench", "federation", "--jobs", "20", "--latency", "3", "-o", "json")
	if res.Jobs != 20 || res.Samples != 3 || res.CPUs < 1 {
		t.Errorf("bench describes its run as %+v", res)
	}
	for _, p := range []struct {
		name string
		jobs int
		f    FederationBenchFigures
	}{{"backlog", 20, res.Backlog}, {"idle", 3, res.Idle}} {
		f := p.f
		if f.HandoffP50Ms <= 0 || f.HandoffP99Ms < f.HandoffP50Ms || f.HandoffsPerSec <= 0 {
			t.Errorf("%s handoff: p50 %v ms, p99 %v ms, %v/s", p.name, f.HandoffP50Ms, f.HandoffP99Ms, f.HandoffsPerSec)
		}
		// Each job's end at least, whatever the pulls saw of its start.
		if f.DistinctChanges < p.jobs || f.Changes < f.DistinctChanges || f.SyncLagP50Ms <= 0 || f.SyncLagP99Ms < f.SyncLagP50Ms {
			t.Errorf("%s sync: %d rows, %d distinct, lag p50 %v ms, p99 %v ms", p.name, f.Changes, f.DistinctChanges, f.SyncLagP50Ms, f.SyncLagP99Ms)
		}
		if f.Pulls < 1 || f.FullPulls > f.Pulls || f.BytesPerPull <= 0 || f.BytesPerRow <= 0 || f.MirroredSeconds <= 0 {
			t.Errorf("%s: %d pulls (%d full), %v bytes per pull, %v bytes per row, mirrored in %v s",
				p.name, f.Pulls, f.FullPulls, f.BytesPerPull, f.BytesPerRow, f.MirroredSeconds)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--jobs", "0"}, "--jobs: must be between 1 and 100000"},
		{[]string{"--latency", "-1"}, "--latency: must be between 0 and 10000"},
	} {
		code, out, errOut := c.run(append([]string{"bench", "federation"}, tc.args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("bench federation %s: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

// TestBenchScaleReportsEveryFigure runs a small berth bench --scale: for
// each backlog a berth server process (this test binary, run as berth),
// two agents, real true processes, a kill -9 and a restart. Every figure
// of every row must be measured and consistent; how fast they are is for
// docs/performance.md, not a test. Not parallel: the server processes run
// this binary as berth through the environment.
func TestBenchScaleReportsEveryFigure(t *testing.T) {
	t.Setenv(asBerthEnv, "1")
	c := &cli{t: t}
	res := runJSON[ScaleBenchResult](c, "bench", "--scale", "--scale-backlogs", "0,2000", "--scale-array", "40",
		"--latency", "5", "--slots", "4", "--scale-idle", "100ms", "-o", "json")
	if res.Agents != 2 || res.Slots != 4 || res.ArrayJobs != 40 || res.LatencySamples != 5 || res.CPUs < 1 || len(res.Rows) != 2 {
		t.Fatalf("bench describes its run as %+v", res)
	}
	for i, r := range res.Rows {
		if want := []int{0, 2000}[i]; r.Backlog != want {
			t.Errorf("row %d: backlog %d, want %d", i, r.Backlog, want)
		}
		if r.ArrayJobsPerSec <= 0 || r.DoneP50Ms <= 0 || r.DoneP99Ms < r.DoneP50Ms || r.StartP50Ms <= 0 ||
			r.StartP99Ms < r.StartP50Ms || r.StartP50Ms > r.DoneP50Ms {
			t.Errorf("backlog %d: %v jobs/s, done p50 %v p99 %v ms, started p50 %v p99 %v ms",
				r.Backlog, r.ArrayJobsPerSec, r.DoneP50Ms, r.DoneP99Ms, r.StartP50Ms, r.StartP99Ms)
		}
		if r.Passes < 1 || r.PassMs <= 0 || r.MetricsMs <= 0 {
			t.Errorf("backlog %d: %d passes of %v ms on average, /metrics in %v ms", r.Backlog, r.Passes, r.PassMs, r.MetricsMs)
		}
		if r.RSSBytes < 1<<20 || (r.Backlog > 0) != (r.RSSPerQueuedJob > 0) ||
			(r.Backlog > 0 && r.RSSPerQueuedJob != float64(r.RSSBytes)/float64(r.Backlog)) {
			t.Errorf("backlog %d: RSS %d bytes, %v per queued job", r.Backlog, r.RSSBytes, r.RSSPerQueuedJob)
		}
		if r.RSSIdleBytes < 1<<20 || (r.Backlog > 0 && r.RSSIdlePerQueuedJob != float64(r.RSSIdleBytes)/float64(r.Backlog)) {
			t.Errorf("backlog %d: RSS at rest %d bytes, %v per queued job", r.Backlog, r.RSSIdleBytes, r.RSSIdlePerQueuedJob)
		}
		if (r.Backlog > 0) != (r.SeedSeconds > 0) {
			t.Errorf("backlog %d seeded in %v s", r.Backlog, r.SeedSeconds)
		}
		if r.RestartHealthzSeconds <= 0 || r.RestartJobSeconds < r.RestartHealthzSeconds {
			t.Errorf("backlog %d: restart → /healthz %v s, → a job run %v s", r.Backlog, r.RestartHealthzSeconds, r.RestartJobSeconds)
		}
	}

	code, out, errOut := c.run("bench", "--scale", "--scale-backlogs", "0", "--scale-array", "4", "--latency", "1", "--scale-idle", "0s")
	for _, col := range []string{"BACKLOG", "SEEDED IN", "ARRAY JOBS/S", "DONE P50", "DONE P99", "STARTED P99", "PASS (MEAN)",
		"/METRICS", "RSS (IDLE)", "RSS/QUEUED JOB (IDLE)", "RESTART→HEALTHZ", "RESTART→JOB"} {
		if code != 0 || !strings.Contains(out, col) {
			t.Errorf("bench --scale as a table: exit %d, %q, %q; want column %s", code, out, errOut, col)
		}
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[3], "0 ") {
		t.Errorf("bench --scale as a table: %q; want the run described, the header and the row of backlog 0", out)
	}

	code, out, errOut = c.run("bench", "--scale", "--scale-backlogs", "0,x")
	if code != exitUsage || out != "" || !strings.Contains(errOut, `--scale-backlogs: "x" is not a count`) {
		t.Errorf("bench --scale --scale-backlogs 0,x: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = c.run("bench", "--scale", "--scale-idle", "-1s")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "--scale-idle") {
		t.Errorf("bench --scale --scale-idle -1s: exit %d, %q, %q", code, out, errOut)
	}
}

// TestBenchAgentsReportsEveryFigure runs a small berth bench agents: a
// berth server process (this test binary, run as berth) and 50 simulated
// agents heartbeating every 200 ms with a trickle of jobs. Every agent
// must register and stay connected, heartbeats and jobs be counted, and
// the server's CPU and RSS be read; how fast is for docs/performance.md.
// Not parallel: the server is this binary, which runs as berth only with
// asBerthEnv set in its environment.
func TestBenchAgentsReportsEveryFigure(t *testing.T) {
	t.Setenv(asBerthEnv, "1")
	c := &cli{t: t}
	const agents = 50
	res := runJSON[AgentsBenchResult](c, "bench", "agents", "--agents", "50", "--duration", "2s", "--heartbeat", "200ms",
		"--jobs-per-sec", "20", "-o", "json")
	if res.Agents != agents || res.CPUs < 1 || res.HeartbeatMs != 200 || res.WindowSeconds < 2 {
		t.Errorf("bench describes its run as %+v", res)
	}
	if res.Registered != agents || res.ServerWorkers != agents || res.Disconnected != 0 {
		t.Errorf("%d agents registered, the server lists %d ready, %d dropped; want %d, %d, 0",
			res.Registered, res.ServerWorkers, res.Disconnected, agents, agents)
	}
	// Each agent sends about ten heartbeats in the window; an ack in it may
	// answer one sent just before it, and the last of each may be answered
	// just after.
	if res.HeartbeatsSent < agents || res.HeartbeatsAcked < res.HeartbeatsSent-agents || res.HeartbeatsAcked > res.HeartbeatsSent+agents {
		t.Errorf("heartbeats: %d sent, %d acknowledged", res.HeartbeatsSent, res.HeartbeatsAcked)
	}
	if res.HeartbeatP50Ms <= 0 || res.HeartbeatP99Ms < res.HeartbeatP50Ms {
		t.Errorf("heartbeat latency: p50 %v ms, p99 %v ms", res.HeartbeatP50Ms, res.HeartbeatP99Ms)
	}
	// Every job's submit and its result dirty the queue.
	if res.JobsSubmitted == 0 || res.JobsCompleted == 0 || res.JobsPerSec <= 0 || res.PassesPerSec <= 0 || res.PassMeanMs <= 0 {
		t.Errorf("jobs: %d submitted, %d completed, %v/s, %v passes/s of %v ms; want all measured",
			res.JobsSubmitted, res.JobsCompleted, res.JobsPerSec, res.PassesPerSec, res.PassMeanMs)
	}
	if res.ServerCPUCores <= 0 || res.ServerRSSMiB <= 0 || res.ServerCoresPer1000Agents != res.ServerCPUCores*1000/agents {
		t.Errorf("server: %v cores (%v per 1,000 agents), %v MiB", res.ServerCPUCores, res.ServerCoresPer1000Agents, res.ServerRSSMiB)
	}
}

func TestBenchAgentsBadFlags(t *testing.T) {
	t.Parallel()
	c := &cli{t: t}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--agents", "0"}, "--agents: must be between 1 and 1000000"},
		{[]string{"--duration", "0s"}, "--duration: must be positive"},
		{[]string{"--jobs-per-sec", "-1"}, "--jobs-per-sec: must be between 0"},
		{[]string{"--server-pid", "1"}, "--server-pid: needs --server"},
		{[]string{"--server", "http://127.0.0.1:1", "--server-cpus", "0"}, "--server-cpus: pins only the server the bench starts"},
		{[]string{"--agents", "100000000"}, "--agents: must be between 1 and 1000000"},
	} {
		code, out, errOut := c.run(append([]string{"bench", "agents"}, tc.args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("bench agents %s: exit %d, stdout %q, stderr %q; want 2 and one line with %q", tc.args, code, out, errOut, tc.want)
		}
	}
}
