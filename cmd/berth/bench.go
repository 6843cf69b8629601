package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/client"
)

// BenchResult is what berth bench measures.
type BenchResult struct {
	Store             string  `json:"store"` // sqlite or postgres
	Jobs              int     `json:"jobs"`
	Agents            int     `json:"agents"`
	CPUs              int     `json:"cpus"`
	ProcessJobsPerSec float64 `json:"process_jobs_per_sec,omitempty"`
	// BareStartsPerSec is how many true processes this machine starts a
	// second with nothing else running: what ProcessJobsPerSec is measured
	// against.
	BareStartsPerSec float64 `json:"bare_starts_per_sec,omitempty"`
	NoopJobsPerSec   float64 `json:"noop_jobs_per_sec,omitempty"`
	// SteadyJobsPerSec is the no-op executor's rate in river bench's shape
	// (--steady): jobs worked a second while arrays keep a backlog.
	SteadyJobsPerSec float64 `json:"steady_jobs_per_sec,omitempty"`
	SteadyWorked     uint64  `json:"steady_worked,omitempty"`   // jobs succeeded while its clock ran
	SteadyInserted   int     `json:"steady_inserted,omitempty"` // jobs it submitted, the first backlog included
	SteadySeconds    float64 `json:"steady_seconds,omitempty"`  // how long its clock ran
	LatencySamples   int     `json:"latency_samples,omitempty"`
	StartP50Ms       float64 `json:"start_p50_ms,omitempty"`
	StartP99Ms       float64 `json:"start_p99_ms,omitempty"`
}

func runBench(ctx context.Context, m *Main, args []string) error {
	if len(args) > 0 && args[0] == "scheduler" {
		return runBenchScheduler(ctx, m, args[1:])
	}
	if len(args) > 0 && args[0] == "federation" {
		return runBenchFederation(ctx, m, args[1:])
	}
	if len(args) > 0 && args[0] == "agents" {
		return runBenchAgents(ctx, m, args[1:])
	}
	fs := m.flagSet("bench", "[scheduler|federation|agents] [flags]\n\n"+benchScaleUsage)
	jobs := fs.Int("jobs", 10000, "trivial jobs (true) submitted as one array per throughput run")
	noopJobs := fs.Int("noop-jobs", 50000, "jobs for the no-op executor run")
	agents := fs.Int("agents", 2, "local agents")
	slots := fs.Int("slots", 32, "slots per agent for real processes")
	samples := fs.Int("latency", 200, "jobs for the submit → process-started latency run (one at a time)")
	bare := fs.Int("bare", 2000, "true processes started without Berth, as many at once as the agents' slots, for\nthe real processes' reference (0: none)")
	steady := fs.Duration("steady", 0, "also run the no-op executor for this `duration` as river bench --duration runs River:\n"+
		"75,000 jobs submitted (arrays of 5,000) before the clock starts, then the agents start and\n"+
		"arrays of 5,000 keep 75,000 pending; prints the jobs worked a second (0: not run)")
	output := fs.String("o", "table", "output: table or json")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memProfile := fs.String("memprofile", "", "write a profile of the memory allocated over the whole run to this file")
	storeURL := fs.String("store", "", "store to run on: a postgres:// URL of an empty database (default: a fresh SQLite file)")
	scale := addScaleFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	for _, c := range []struct {
		flag     string
		n, limit int
	}{{"--jobs", *jobs, berth.MaxArray}, {"--noop-jobs", *noopJobs, berth.MaxArray}, {"--latency", *samples, 100_000}, {"--bare", *bare, 1_000_000}} {
		if c.n < 0 || c.n > c.limit {
			return berth.Invalidf(c.flag, "must be between 0 and %d", c.limit)
		}
	}
	switch {
	case *steady != 0 && (*steady < time.Second || *steady > time.Hour):
		return berth.Invalidf("--steady", "must be 0 or between 1s and 1h")
	case *agents < 1 || *agents > 64:
		return berth.Invalidf("--agents", "must be between 1 and 64")
	case *slots < 1:
		return berth.Invalidf("--slots", "must be at least 1")
	case *output != "table" && *output != "json":
		return berth.Invalidf("-o", "must be table or json")
	}
	if scale.on {
		return runBenchScale(ctx, m, scale, benchScaleSetup{agents: *agents, slots: *slots, samples: *samples, store: *storeURL, output: *output})
	}
	stop, err := startCPUProfile(*profile)
	if err != nil {
		return err
	}
	defer stop()
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return &berth.Error{Code: berth.ECodeInvalid, Field: "--memprofile", Err: err}
		}
		defer writeAllocProfile(f)
	}
	res := BenchResult{Store: storeKind(*storeURL), Jobs: *jobs, Agents: *agents, CPUs: runtime.NumCPU()}
	if *jobs > 0 || *samples > 0 {
		err := withBenchCluster(ctx, *storeURL, *agents, *slots, agent.ProcessExecutor{}, func(c *client.Client, dir string) error {
			if *samples > 0 {
				started, _, err := benchLatency(ctx, c, *samples, dir)
				if err != nil {
					return err
				}
				res.LatencySamples, res.StartP50Ms, res.StartP99Ms = *samples, percentile(started, 0.50), percentile(started, 0.99)
			}
			if *jobs > 0 {
				rate, err := benchThroughput(ctx, c, *jobs, dir)
				res.ProcessJobsPerSec = rate
				return err
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if *bare > 0 {
		rate, err := benchBareStarts(ctx, *bare, *agents**slots)
		if err != nil {
			return err
		}
		res.BareStartsPerSec = rate
	}
	if *noopJobs > 0 {
		err := withBenchCluster(ctx, *storeURL, *agents, 1024, agent.NoopExecutor{}, func(c *client.Client, dir string) error {
			rate, err := benchThroughput(ctx, c, *noopJobs, dir)
			res.NoopJobsPerSec = rate
			return err
		})
		if err != nil {
			return err
		}
	}
	if *steady > 0 {
		run, err := benchSteady(ctx, *storeURL, steadyShape{duration: *steady, batch: 5_000, backlog: 75_000, agents: *agents})
		if err != nil {
			return err
		}
		res.SteadyJobsPerSec, res.SteadyWorked, res.SteadyInserted, res.SteadySeconds = run.rate(), run.Worked, run.Inserted, run.Elapsed.Seconds()
	}
	if *output == "json" {
		return printJSON(m.Stdout, res)
	}
	fmt.Fprintf(m.Stdout, "berth bench: %d agents on %d CPUs, %s store\n", res.Agents, res.CPUs, res.Store)
	if res.ProcessJobsPerSec > 0 {
		fmt.Fprintf(m.Stdout, "  real processes: %d jobs, %.0f jobs/s submit → all succeeded\n", *jobs, res.ProcessJobsPerSec)
	}
	if res.BareStartsPerSec > 0 {
		fmt.Fprintf(m.Stdout, "  bare process starts: %d true processes, %.0f/s without Berth", *bare, res.BareStartsPerSec)
		if res.ProcessJobsPerSec > 0 {
			fmt.Fprintf(m.Stdout, " (real processes reached %.0f %% of it)", 100*res.ProcessJobsPerSec/res.BareStartsPerSec)
		}
		fmt.Fprintln(m.Stdout)
	}
	if res.NoopJobsPerSec > 0 {
		fmt.Fprintf(m.Stdout, "  no-op executor: %d jobs, %.0f jobs/s submit → all succeeded\n", *noopJobs, res.NoopJobsPerSec)
	}
	if res.SteadyWorked > 0 {
		fmt.Fprintf(m.Stdout, "  no-op executor, steady (river bench's shape): %d jobs worked in %.1f s, %.0f jobs/s (%d submitted)\n",
			res.SteadyWorked, res.SteadySeconds, res.SteadyJobsPerSec, res.SteadyInserted)
	}
	if res.LatencySamples > 0 {
		fmt.Fprintf(m.Stdout, "  submit → process started (idle cluster, %d jobs): p50 %.2f ms, p99 %.2f ms\n", res.LatencySamples, res.StartP50Ms, res.StartP99Ms)
	}
	return nil
}

// withBenchCluster runs fn against a fresh server and agents in a temporary
// directory, all in this process, talking over loopback.
func withBenchCluster(ctx context.Context, storeURL string, agents, slots int, exec agent.Executor, fn func(*client.Client, string) error) error {
	return withBenchServer(ctx, storeURL, func(rs *runningServer, c *client.Client, dir string) error {
		stop, err := startBenchAgents(ctx, agents, agent.Config{Server: rs.URL, DataDir: dir, Host: "bench", Slots: slots, Executor: exec})
		if err != nil {
			return err
		}
		defer stop()
		return fn(c, dir)
	})
}

// withBenchServer runs fn against a fresh server with no agent, in a
// temporary directory that fn may use too.
func withBenchServer(ctx context.Context, storeURL string, fn func(*runningServer, *client.Client, string) error) error {
	dir, err := os.MkdirTemp("", "berth-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rs, err := startServer(ctx, &serverConfig{DataDir: dir, Listen: "127.0.0.1:0", Store: storeURL})
	if err != nil {
		return err
	}
	defer rs.Close(context.Background())
	return fn(rs, client.New(rs.URL, "", nil), dir)
}

// startBenchAgents starts n agents in this process, each configured as
// base but for its host (base.Host-0, base.Host-1, …) and its data dir
// (base.DataDir/agent0, …), and returns once each has registered. The
// returned func stops them and waits until they have stopped.
func startBenchAgents(ctx context.Context, n int, base agent.Config) (func(), error) {
	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop := func() { cancel(); wg.Wait() }
	for i := range n {
		cfg := base
		cfg.Host, cfg.DataDir = base.Host+"-"+strconv.Itoa(i), filepath.Join(base.DataDir, "agent"+strconv.Itoa(i))
		a, err := agent.New(cfg)
		if err != nil {
			stop()
			return nil, err
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = a.Run(actx) }()
		<-a.Registered()
	}
	return stop, nil
}

func trueJob(dir string) *berth.SubmitRequest {
	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Command, req.Workdir = berth.Argv{"true"}, dir
	return req
}

// waitChunk is how many job ids one wait request names.
const waitChunk = 10_000

// benchThroughput submits n jobs as one array and returns jobs/s from the
// submit to the last success.
func benchThroughput(ctx context.Context, c *client.Client, n int, dir string) (float64, error) {
	req := trueJob(dir)
	req.Array = n
	start := time.Now()
	ids, err := c.SubmitIDs(ctx, req)
	if err != nil {
		return 0, err
	}
	// Wait in chunks so that each request stays under the body limit.
	var failures []string
	for start := 0; start < len(ids); start += waitChunk {
		res, err := c.Wait(ctx, ids[start:min(start+waitChunk, len(ids))], false, 0)
		if err != nil {
			return 0, err
		}
		failures = append(failures, res.Failures...)
	}
	elapsed := time.Since(start)
	if len(failures) > 0 {
		why := "unknown"
		if j, err := c.Job(ctx, failures[0]); err == nil {
			why = string(j.State) + ": " + j.Reason
		}
		return 0, fmt.Errorf("%d of %d bench jobs did not succeed; the first, %s, %s", len(failures), n, failures[0], why)
	}
	return float64(n) / elapsed.Seconds(), nil
}

// benchLatency submits jobs one at a time and returns, sorted, in
// milliseconds, the time from each submit to its process starting and to
// the wait for it returning succeeded.
func benchLatency(ctx context.Context, c *client.Client, n int, dir string) (started, done []float64, err error) {
	started, done = make([]float64, 0, n), make([]float64, 0, n)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for i := 0; i < n; i++ {
		start := time.Now()
		ids, err := c.SubmitIDs(ctx, trueJob(dir))
		if err != nil {
			return nil, nil, err
		}
		res, err := c.Wait(ctx, ids, false, 0)
		if err != nil {
			return nil, nil, err
		}
		done = append(done, ms(time.Since(start)))
		if len(res.Failures) > 0 {
			return nil, nil, fmt.Errorf("latency job %s did not succeed", ids[0])
		}
		d, err := c.Job(ctx, ids[0])
		if err != nil {
			return nil, nil, err
		}
		if len(d.AttemptList) == 0 || d.AttemptList[0].StartedAt.IsZero() {
			return nil, nil, fmt.Errorf("job %s has no started attempt", d.ID)
		}
		started = append(started, ms(d.AttemptList[0].StartedAt.Sub(start)))
	}
	sort.Float64s(started)
	sort.Float64s(done)
	return started, done, nil
}

// benchBareStarts starts n true processes, at most parallel at once, as
// a loop that does nothing else would, and returns processes/s: the most
// any executor could reach on this machine.
func benchBareStarts(ctx context.Context, n, parallel int) (float64, error) {
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	next := make(chan struct{})
	for range min(parallel, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				if err := exec.CommandContext(ctx, "true").Run(); err != nil {
					mu.Lock()
					failed = cmp.Or(failed, err)
					mu.Unlock()
				}
			}
		}()
	}
	for range n {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	if failed != nil {
		return 0, fmt.Errorf("bare process starts: %w", failed)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// writeAllocProfile writes the profile of the memory allocated since the
// process started to f, and closes it.
func writeAllocProfile(f *os.File) {
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		fmt.Fprintf(os.Stderr, "berth bench: memory profile: %v\n", err)
	}
}

func percentile(sorted []float64, p float64) float64 {
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

// startCPUProfile starts writing a CPU profile to path ("" for none); the
// returned func stops it.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, &berth.Error{Code: berth.ECodeInvalid, Field: "--cpuprofile", Err: err}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
