package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/internal/freeport"
)

// benchScaleUsage is what berth bench -h says of --scale.
const benchScaleUsage = `--scale measures how Berth behaves with a backlog: for each of
--scale-backlogs it starts a berth server process (without a rate limit) on a
fresh SQLite store in a temporary directory, with --agents local agents
serving queue default, parks that many jobs (submitted through the API as
arrays of 100,000) in queue parked, which no worker serves, and measures in
queue default: the throughput of a --scale-array array of true jobs, the
submit → done latency of --latency jobs run one at a time, the mean scheduler
pass (berth_scheduler_pass_seconds) over both, the time GET /metrics takes,
the server's RSS (VmRSS) and RSS per parked job right after the runs and
again after --scale-idle idle (in parentheses), and a restart: kill -9 of
the server, then a new one on the same store, timed until /healthz answers
and until a new job has run. The other figures' flags (--jobs, --noop-jobs,
--bare, --store) do not apply.`

// scaleBacklogQueue is the queue the backlog is parked in: no agent of the
// bench serves it.
const scaleBacklogQueue = "parked"

// scaleFlags are berth bench's --scale flags.
type scaleFlags struct {
	on       bool
	backlogs []int
	array    int
	idle     time.Duration
}

// addScaleFlags adds the --scale flags to berth bench's fs.
func addScaleFlags(fs *flag.FlagSet) *scaleFlags {
	sf := &scaleFlags{backlogs: []int{0, 100_000, 1_000_000}}
	fs.BoolVar(&sf.on, "scale", false, "measure the curve over --scale-backlogs jobs parked in a queue no worker serves (see above)")
	fs.Func("scale-backlogs", "comma-separated `counts` of parked jobs, one row each (default 0,100000,1000000)", func(v string) error {
		sf.backlogs = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 || n > 10_000_000 {
				return fmt.Errorf("%q is not a count between 0 and 10000000", f)
			}
			sf.backlogs = append(sf.backlogs, n)
		}
		return nil
	})
	fs.IntVar(&sf.array, "scale-array", 1000, "jobs of the array whose throughput --scale measures")
	fs.DurationVar(&sf.idle, "scale-idle", 10*time.Second, "how long the server is left idle after the runs before its RSS at rest is read")
	return sf
}

// benchScaleSetup is what berth bench's other flags say of a --scale run.
type benchScaleSetup struct {
	agents, slots, samples int
	store, output          string
}

// ScaleBenchResult is what berth bench --scale measures: one row per
// backlog.
type ScaleBenchResult struct {
	CPUs           int             `json:"cpus"`
	Agents         int             `json:"agents"`
	Slots          int             `json:"slots"`
	ArrayJobs      int             `json:"array_jobs"`
	LatencySamples int             `json:"latency_samples"`
	Rows           []ScaleBenchRow `json:"rows"`
}

// ScaleBenchRow is the figures of one backlog.
type ScaleBenchRow struct {
	// Backlog is how many jobs were parked in a queue no worker serves.
	Backlog int `json:"backlog"`
	// SeedSeconds is how long submitting them took, through the API.
	SeedSeconds float64 `json:"seed_seconds"`
	// ArrayJobsPerSec is the throughput of the array in queue default,
	// from its submit to the last success.
	ArrayJobsPerSec float64 `json:"array_jobs_per_sec"`
	// DoneP50Ms and DoneP99Ms are the submit → done latency of one job at
	// a time; StartP50Ms and StartP99Ms, submit → process started.
	DoneP50Ms  float64 `json:"done_p50_ms"`
	DoneP99Ms  float64 `json:"done_p99_ms"`
	StartP50Ms float64 `json:"start_p50_ms"`
	StartP99Ms float64 `json:"start_p99_ms"`
	// PassMs is the mean scheduler pass over the array and latency runs,
	// Passes how many passes ran then (berth_scheduler_pass_seconds).
	PassMs float64 `json:"pass_ms"`
	Passes int     `json:"passes"`
	// MetricsMs is the median time of GET /metrics, of five.
	MetricsMs float64 `json:"metrics_ms"`
	// RSSBytes is the server's resident memory after the runs (VmRSS);
	// RSSPerQueuedJob is RSSBytes over Backlog (0 without a backlog).
	RSSBytes        int64   `json:"rss_bytes"`
	RSSPerQueuedJob float64 `json:"rss_per_queued_job"`
	// RSSIdleBytes is the server's resident memory once it has been idle
	// for --scale-idle after the runs, holding its backlog at rest: the
	// server returns memory to the operating system after two idle
	// seconds (idleWatch), which at a million jobs takes a few more.
	// RSSIdlePerQueuedJob is that over Backlog.
	RSSIdleBytes        int64   `json:"rss_idle_bytes"`
	RSSIdlePerQueuedJob float64 `json:"rss_idle_per_queued_job"`
	// RestartHealthzSeconds and RestartJobSeconds time a restart after
	// kill -9, from starting the new server process until /healthz
	// answers and until a job submitted then has succeeded.
	RestartHealthzSeconds float64 `json:"restart_healthz_seconds"`
	RestartJobSeconds     float64 `json:"restart_job_seconds"`
}

func runBenchScale(ctx context.Context, m *Main, sf *scaleFlags, setup benchScaleSetup) error {
	switch {
	case setup.store != "":
		return berth.Invalidf("--store", "--scale runs on a fresh SQLite store per backlog; leave --store out")
	case len(sf.backlogs) == 0:
		return berth.Invalidf("--scale-backlogs", "name at least one backlog")
	case sf.idle < 0:
		return berth.Invalidf("--scale-idle", "must not be negative")
	case sf.array < 1 || sf.array > berth.MaxArray:
		return berth.Invalidf("--scale-array", "must be between 1 and %d", berth.MaxArray)
	case setup.samples < 1:
		return berth.Invalidf("--latency", "--scale needs at least 1")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench --scale: find this binary to start its server: %w", err)
	}
	res := ScaleBenchResult{CPUs: runtime.NumCPU(), Agents: setup.agents, Slots: setup.slots, ArrayJobs: sf.array, LatencySamples: setup.samples}
	for _, backlog := range sf.backlogs {
		if setup.output == "table" {
			fmt.Fprintf(m.Stderr, "berth bench --scale: backlog %d…\n", backlog)
		}
		row, err := benchScaleRow(ctx, exe, backlog, sf, setup)
		if err != nil {
			return fmt.Errorf("bench --scale, backlog %d: %w", backlog, err)
		}
		res.Rows = append(res.Rows, row)
	}
	if setup.output == "json" {
		return printJSON(m.Stdout, res)
	}
	fmt.Fprintf(m.Stdout, "berth bench --scale: a berth server process, SQLite store, %d agents × %d slots serving queue default, %d CPUs;\n"+
		"  the backlog parked in queue %s (no worker serves it); an array of %d true jobs, %d jobs one at a time\n",
		res.Agents, res.Slots, res.CPUs, scaleBacklogQueue, res.ArrayJobs, res.LatencySamples)
	t := newTable(m.Stdout, "BACKLOG", "SEEDED IN", "ARRAY JOBS/S", "DONE P50", "DONE P99", "STARTED P99", "PASS (MEAN)",
		"/METRICS", "RSS (IDLE)", "RSS/QUEUED JOB (IDLE)", "RESTART→HEALTHZ", "RESTART→JOB")
	for _, r := range res.Rows {
		seeded, perJob := "-", "-"
		if r.Backlog > 0 {
			seeded, perJob = fmt.Sprintf("%.1f s", r.SeedSeconds), fmt.Sprintf("%.0f B (%.0f B)", r.RSSPerQueuedJob, r.RSSIdlePerQueuedJob)
		}
		t.row(strconv.Itoa(r.Backlog), seeded, fmt.Sprintf("%.0f", r.ArrayJobsPerSec),
			fmt.Sprintf("%.1f ms", r.DoneP50Ms), fmt.Sprintf("%.1f ms", r.DoneP99Ms), fmt.Sprintf("%.1f ms", r.StartP99Ms),
			fmt.Sprintf("%.2f ms", r.PassMs), fmt.Sprintf("%.1f ms", r.MetricsMs), fmt.Sprintf("%.0f MiB (%.0f MiB)", float64(r.RSSBytes)/(1<<20), float64(r.RSSIdleBytes)/(1<<20)),
			perJob, fmt.Sprintf("%.2f s", r.RestartHealthzSeconds), fmt.Sprintf("%.2f s", r.RestartJobSeconds))
	}
	return t.flush()
}

// benchScaleRow measures one backlog on a server of its own.
func benchScaleRow(ctx context.Context, exe string, backlog int, sf *scaleFlags, setup benchScaleSetup) (row ScaleBenchRow, err error) {
	row.Backlog = backlog
	dir, err := os.MkdirTemp("", "berth-bench-scale-")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)
	srv, err := newScaleServer(exe, dir)
	if err != nil {
		return row, err
	}
	defer func() {
		if e := srv.stop(); err == nil {
			err = e
		}
	}()
	if err := srv.start(ctx); err != nil {
		return row, err
	}
	c := client.New(srv.url, "", nil)

	stopAgents, err := startBenchAgents(ctx, setup.agents, agent.Config{Server: srv.url, DataDir: dir, Host: "scale",
		Slots: setup.slots, Queues: []string{berth.DefaultQueue}, Executor: agent.ProcessExecutor{}})
	if err != nil {
		return row, err
	}
	defer stopAgents()

	if backlog > 0 {
		start := time.Now()
		for left := backlog; left > 0; left -= berth.MaxArray {
			req := trueJob(dir)
			req.Queue, req.Array = scaleBacklogQueue, min(left, berth.MaxArray)
			if _, err := c.SubmitIDs(ctx, req); err != nil {
				return row, fmt.Errorf("park the backlog: %w", err)
			}
		}
		row.SeedSeconds = time.Since(start).Seconds()
	}

	sum0, n0, err := srv.passes(ctx)
	if err != nil {
		return row, err
	}
	if row.ArrayJobsPerSec, err = benchThroughput(ctx, c, sf.array, dir); err != nil {
		return row, err
	}
	started, done, err := benchLatency(ctx, c, setup.samples, dir)
	if err != nil {
		return row, err
	}
	row.StartP50Ms, row.StartP99Ms = percentile(started, 0.50), percentile(started, 0.99)
	row.DoneP50Ms, row.DoneP99Ms = percentile(done, 0.50), percentile(done, 0.99)
	sum1, n1, err := srv.passes(ctx)
	if err != nil {
		return row, err
	}
	if row.Passes = int(n1 - n0); row.Passes > 0 {
		row.PassMs = 1000 * (sum1 - sum0) / float64(row.Passes)
	}

	times := make([]float64, 5)
	for i := range times {
		t0 := time.Now()
		if _, _, err := srv.passes(ctx); err != nil {
			return row, err
		}
		times[i] = float64(time.Since(t0)) / float64(time.Millisecond)
	}
	sort.Float64s(times)
	row.MetricsMs = percentile(times, 0.5)

	if row.RSSBytes, err = srv.rss(); err != nil {
		return row, err
	}
	select { // the definition of idle: nothing asked of the server for this long
	case <-time.After(sf.idle):
	case <-ctx.Done():
		return row, ctx.Err()
	}
	if row.RSSIdleBytes, err = srv.rss(); err != nil {
		return row, err
	}
	if backlog > 0 {
		row.RSSPerQueuedJob = float64(row.RSSBytes) / float64(backlog)
		row.RSSIdlePerQueuedJob = float64(row.RSSIdleBytes) / float64(backlog)
	}

	if err := srv.kill(); err != nil {
		return row, err
	}
	restart := time.Now()
	if err := srv.start(ctx); err != nil {
		return row, fmt.Errorf("restart: %w", err)
	}
	row.RestartHealthzSeconds = time.Since(restart).Seconds()
	ids, err := c.SubmitIDs(ctx, trueJob(dir))
	if err != nil {
		return row, fmt.Errorf("after the restart: %w", err)
	}
	if res, err := c.Wait(ctx, ids, false, 0); err != nil || len(res.Failures) > 0 {
		return row, fmt.Errorf("after the restart, job %s: %v, failures %v", ids[0], err, res.Failures)
	}
	row.RestartJobSeconds = time.Since(restart).Seconds()
	return row, nil
}

// scaleServer is the berth server process of one --scale row, on a port
// of its own that a restart keeps.
type scaleServer struct {
	exe, dir, addr, url string
	cmd                 *exec.Cmd
	exited              chan error
	log                 *os.File
}

func newScaleServer(exe, dir string) (*scaleServer, error) {
	port, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	f, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	return &scaleServer{exe: exe, dir: dir, addr: addr, url: "http://" + addr, log: f}, nil
}

// scaleServerStart bounds how long a server may take to answer /healthz.
const scaleServerStart = 10 * time.Minute

// start starts the server process and returns once /healthz answers ok.
func (s *scaleServer) start(ctx context.Context) error {
	// No rate limit: the bench is one client making many requests, as
	// berth bench's own server has none.
	s.cmd = exec.Command(s.exe, "server", "--data-dir", filepath.Join(s.dir, "server"), "--listen", s.addr, "--rate-limit", "0")
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start berth server: %w", err)
	}
	exited := make(chan error, 1)
	s.exited = exited
	go func() { exited <- s.cmd.Wait() }()
	c := client.New(s.url, "", nil)
	deadline := time.Now().Add(scaleServerStart)
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Healthz(hctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("berth server exited (%v): %s", err, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("berth server did not answer /healthz in %s: %s", scaleServerStart, s.logTail())
		}
	}
}

// kill kills the server with SIGKILL and waits for it to be gone.
func (s *scaleServer) kill() error {
	if err := s.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill -9 the server: %w", err)
	}
	<-s.exited
	s.cmd = nil
	return nil
}

// stop ends the server, if it runs, with SIGTERM (SIGKILL after a minute),
// and closes its log.
func (s *scaleServer) stop() error {
	defer s.log.Close()
	if s.cmd == nil {
		return nil
	}
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		return s.kill()
	}
	select {
	case <-s.exited:
		s.cmd = nil
		return nil
	case <-time.After(time.Minute):
		return s.kill()
	}
}

// logTail is the end of the server's log, for an error.
func (s *scaleServer) logTail() string {
	b, _ := os.ReadFile(s.log.Name())
	return string(b[max(0, len(b)-2000):])
}

// passes reads /metrics and returns berth_scheduler_pass_seconds' sum and
// count.
func (s *scaleServer) passes(ctx context.Context) (sum float64, count uint64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("GET /metrics: %s, %v", resp.Status, err)
	}
	var found int
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		name, value, _ := strings.Cut(sc.Text(), " ")
		switch name {
		case "berth_scheduler_pass_seconds_sum":
			sum, err = strconv.ParseFloat(value, 64)
		case "berth_scheduler_pass_seconds_count":
			count, err = strconv.ParseUint(value, 10, 64)
		default:
			continue
		}
		if err != nil {
			return 0, 0, fmt.Errorf("/metrics: %s %q: %w", name, value, err)
		}
		found++
	}
	if found != 2 {
		return 0, 0, errors.New("/metrics has no berth_scheduler_pass_seconds sum and count")
	}
	return sum, count, nil
}

// rss returns the server process's resident memory (VmRSS).
func (s *scaleServer) rss() (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("server RSS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("server RSS: %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("server RSS: no VmRSS in %s", f.Name())
}
