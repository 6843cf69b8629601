package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/wire"
)

// AgentsBenchResult is what berth bench agents measures: Agents simulated
// agent sessions on one server, each a WebSocket speaking the agent
// protocol, heartbeating and running a trickle of jobs, over a steady-state
// window after every agent registered.
type AgentsBenchResult struct {
	Agents int `json:"agents"`
	// CPUs is how many CPUs the bench process (the agents) may use; the
	// server shares them unless pinned elsewhere.
	CPUs int `json:"cpus"`
	// ServerCPUs is the CPU list the server was pinned to (taskset -c);
	// "" when it was not.
	ServerCPUs  string  `json:"server_cpus,omitempty"`
	HeartbeatMs float64 `json:"heartbeat_ms"` // the interval the server's register ack set
	// Registered is how many agents the server acknowledged; RegisterSeconds
	// the time from the first dial to the last acknowledgement.
	Registered      int     `json:"registered"`
	RegisterSeconds float64 `json:"register_seconds"`
	// ServerWorkers is how many workers the server listed as ready or busy
	// at the end of the window.
	ServerWorkers int     `json:"server_workers"`
	WindowSeconds float64 `json:"window_seconds"`
	// HeartbeatsSent and HeartbeatsAcked count the window's heartbeats and
	// their acknowledgements; the latency is send → the server's ack, as the
	// agent's process sees it.
	HeartbeatsSent  int     `json:"heartbeats_sent"`
	HeartbeatsAcked int     `json:"heartbeats_acked"`
	HeartbeatP50Ms  float64 `json:"heartbeat_p50_ms"`
	HeartbeatP99Ms  float64 `json:"heartbeat_p99_ms"`
	JobsSubmitted   int     `json:"jobs_submitted"` // in the window
	JobsCompleted   int     `json:"jobs_completed"` // results the server acknowledged in the window
	JobsPerSec      float64 `json:"jobs_per_sec"`
	// Disconnected counts agents whose session ended before the bench did.
	Disconnected int `json:"disconnected"`
	// ServerCPUCores is the server process's CPU time over the window per
	// second of it; ServerCoresPer1000Agents the same per 1,000 agents.
	// Both, and the RSS, are absent for a --server without --server-pid.
	ServerCPUCores           float64 `json:"server_cpu_cores,omitempty"`
	ServerCoresPer1000Agents float64 `json:"server_cores_per_1000_agents,omitempty"`
	ServerRSSMiB             float64 `json:"server_rss_mib,omitempty"`
	// PassesPerSec and PassMeanMs are the server's scheduling passes over
	// the window (berth_scheduler_pass_seconds in its /metrics): what a
	// job costs it grows with the workers every pass looks at.
	PassesPerSec float64 `json:"passes_per_sec"`
	PassMeanMs   float64 `json:"pass_mean_ms"`
	// BenchCPUCores is this process's (the simulated agents') CPU over the
	// window: on one machine it shares the CPUs with the server.
	BenchCPUCores float64 `json:"bench_cpu_cores"`
}

func runBenchAgents(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("bench agents", "[flags]")
	agents := fs.Int("agents", 1000, "simulated agents, each a WebSocket session of its own")
	var duration, heartbeat time.Duration
	durationVar(fs, &duration, "duration", 30*time.Second, "the steady-state window measured, after every agent registered and one heartbeat interval")
	durationVar(fs, &heartbeat, "heartbeat", 5*time.Second, "the heartbeat interval of the server the bench starts (agents heartbeat as the server's register ack says)")
	rate := fs.Float64("jobs-per-sec", 10, "jobs submitted a second, each run by an agent that reports it succeeded at once (0: none)")
	slots := fs.Int("slots", 4, "slots each agent registers")
	server := fs.String("server", "", "run against this server (an http:// URL) rather than one the bench starts")
	serverPID := fs.Int("server-pid", 0, "with --server, the process id of that server, for its CPU and RSS")
	serverCPUs := fs.String("server-cpus", "", "pin the server the bench starts to these CPUs (taskset -c LIST)")
	output := fs.String("o", "table", "output: table or json")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *agents < 1 || *agents > 1_000_000:
		return berth.Invalidf("--agents", "must be between 1 and 1000000")
	case duration <= 0:
		return berth.Invalidf("--duration", "must be positive")
	case heartbeat <= 0:
		return berth.Invalidf("--heartbeat", "must be positive")
	case *rate < 0 || *rate > 100_000:
		return berth.Invalidf("--jobs-per-sec", "must be between 0 and 100000")
	case *slots < 1:
		return berth.Invalidf("--slots", "must be at least 1")
	case *serverPID != 0 && *server == "":
		return berth.Invalidf("--server-pid", "needs --server")
	case *serverCPUs != "" && *server != "":
		return berth.Invalidf("--server-cpus", "pins only the server the bench starts, not a --server")
	case *output != "table" && *output != "json":
		return berth.Invalidf("-o", "must be table or json")
	}
	if err := checkFileLimit(*agents); err != nil {
		return err
	}
	url, pid := *server, *serverPID
	if url == "" {
		dir, err := os.MkdirTemp("", "berth-bench-agents-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		srv, err := startBenchServer(ctx, dir, heartbeat, *serverCPUs)
		if err != nil {
			return err
		}
		defer srv.stop()
		url, pid = srv.url, srv.pid
	}
	res, err := benchAgents(ctx, url, pid, *agents, *slots, duration, *rate)
	if err != nil {
		return err
	}
	res.ServerCPUs = *serverCPUs
	if *output == "json" {
		return printJSON(m.Stdout, res)
	}
	printAgentsBench(m, res, *rate, *server)
	return nil
}

func printAgentsBench(m *Main, res *AgentsBenchResult, rate float64, server string) {
	where := "the server at " + server
	if server == "" {
		where = "a berth server the bench started on loopback (SQLite)"
		if res.ServerCPUs != "" {
			where += ", pinned to CPUs " + res.ServerCPUs
		}
	}
	fmt.Fprintf(m.Stdout, "berth bench agents: %d simulated agents on %d CPUs, heartbeat %s, %g jobs/s, against %s\n",
		res.Agents, res.CPUs, time.Duration(res.HeartbeatMs*float64(time.Millisecond)), rate, where)
	fmt.Fprintf(m.Stdout, "  registered: %d of %d in %.1f s; the server lists %d workers ready or busy; %d sessions dropped\n",
		res.Registered, res.Agents, res.RegisterSeconds, res.ServerWorkers, res.Disconnected)
	fmt.Fprintf(m.Stdout, "  steady state over %.1f s:\n", res.WindowSeconds)
	if res.ServerCPUCores > 0 {
		fmt.Fprintf(m.Stdout, "    server CPU: %.3f cores = %.3f cores per 1,000 agents; RSS %.0f MiB\n",
			res.ServerCPUCores, res.ServerCoresPer1000Agents, res.ServerRSSMiB)
	}
	fmt.Fprintf(m.Stdout, "    scheduling passes: %.1f/s, %.2f ms each on average\n", res.PassesPerSec, res.PassMeanMs)
	fmt.Fprintf(m.Stdout, "    heartbeats: %d sent, %d acknowledged; send → ack p50 %.2f ms, p99 %.2f ms\n",
		res.HeartbeatsSent, res.HeartbeatsAcked, res.HeartbeatP50Ms, res.HeartbeatP99Ms)
	fmt.Fprintf(m.Stdout, "    jobs: %d submitted, %d completed = %.1f jobs/s\n", res.JobsSubmitted, res.JobsCompleted, res.JobsPerSec)
	fmt.Fprintf(m.Stdout, "    the bench's own process (the agents): %.3f cores\n", res.BenchCPUCores)
}

// checkFileLimit fails when this process may not open a descriptor for
// each of n agents' connections, and some to spare.
func checkFileLimit(n int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read the file descriptor limit: %w", err)
	}
	if need := uint64(n) + 256; lim.Cur < need {
		return berth.Invalidf("--agents", "%d agents need about %d file descriptors; this process may open %d (raise ulimit -n)", n, need, lim.Cur)
	}
	return nil
}

// benchServer is a berth server process the bench started.
type benchServer struct {
	cmd  *exec.Cmd
	url  string
	pid  int
	done chan struct{} // closed once the process has exited
}

// startBenchServer starts this binary as berth server on loopback with a
// fresh SQLite store in dir and no rate limit (every simulated agent is
// the one loopback identity, where real agents each have their own
// credential and so their own limit), pinned to cpus with taskset when cpus is set,
// and waits until it serves.
func startBenchServer(ctx context.Context, dir string, heartbeat time.Duration, cpus string) (*benchServer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this binary to start the server: %w", err)
	}
	argv := []string{exe, "server", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "server"), "--heartbeat", heartbeat.String(),
		"--rate-limit", "0"}
	if cpus != "" {
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the server: %w", err)
	}
	s := &benchServer{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), "berth server listening on "); ok {
				select {
				case listening <- url:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(s.done)
	}()
	select {
	case s.url = <-listening:
		return s, nil
	case <-s.done:
		log, _ := os.ReadFile(logFile.Name())
		return nil, fmt.Errorf("the server exited before serving: %s", bytes.TrimSpace(log))
	case <-time.After(time.Minute):
		s.stop()
		return nil, errors.New("the server did not serve within a minute")
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
}

// stop asks the server to stop, kills it if it has not within 30 s, and
// waits for it to exit.
func (s *benchServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// agentsBenchStats is what the simulated agents count; the counts and
// samples are taken only while recording.
type agentsBenchStats struct {
	recording    atomic.Bool
	registered   atomic.Int64
	disconnected atomic.Int64
	hbSent       atomic.Int64
	hbAcked      atomic.Int64
	completed    atomic.Int64

	mu        sync.Mutex
	latencies []time.Duration
}

func (st *agentsBenchStats) ackedHeartbeat(d time.Duration) {
	if !st.recording.Load() {
		return
	}
	st.hbAcked.Add(1)
	st.mu.Lock()
	st.latencies = append(st.latencies, d)
	st.mu.Unlock()
}

// registerParallel is how many simulated agents dial and register at once:
// enough that the server, not the bench, sets the pace, as when every
// agent of a cluster reconnects after a server's restart.
const registerParallel = 256

// benchAgents connects n simulated agents to the server at url, then
// submits jobs at rate and measures one window of steady state; pid, when
// not 0, is the server's process, whose CPU and RSS it reads.
func benchAgents(ctx context.Context, url string, pid, n, slots int, window time.Duration, rate float64) (*AgentsBenchResult, error) {
	res := &AgentsBenchResult{Agents: n, CPUs: runtime.NumCPU()}
	st := &agentsBenchStats{}
	actx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()

	// Register every agent, up to registerParallel dials at a time.
	start := time.Now()
	sem := make(chan struct{}, registerParallel)
	errs := make(chan error, 1)
	var interval atomic.Int64
	for i := range n {
		select {
		case sem <- struct{}{}:
		case err := <-errs:
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, hb, err := dialSimAgent(actx, url, i, slots)
			if err == nil {
				// Counted before the slot is given back: the wait for
				// every slot below is the wait for every registration.
				interval.Store(int64(hb))
				st.registered.Add(1)
			}
			<-sem
			if err != nil {
				select {
				case errs <- fmt.Errorf("agent %d: %w", i, err):
				default:
				}
				return
			}
			a.run(actx, hb, st)
		}()
	}
	for range cap(sem) {
		select {
		case sem <- struct{}{}:
		case err := <-errs:
			return nil, err
		}
	}
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	res.Registered = int(st.registered.Load())
	res.RegisterSeconds = time.Since(start).Seconds()
	hb := time.Duration(interval.Load())
	res.HeartbeatMs = float64(hb) / float64(time.Millisecond)

	c := client.New(url, "", nil)
	var submitted atomic.Int64
	if rate > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); trickleJobs(actx, c, rate, st, &submitted) }()
	}
	// Every agent has sent a heartbeat after one interval.
	if err := berth.Sleep(ctx, hb); err != nil {
		return nil, err
	}

	cpu0, err := processCPU(pid)
	if err != nil {
		return nil, err
	}
	passes0, err := passMetrics(ctx, url)
	if err != nil {
		return nil, err
	}
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	t0 := time.Now()
	st.recording.Store(true)
	if err := berth.Sleep(ctx, window); err != nil {
		return nil, err
	}
	st.recording.Store(false)
	elapsed := time.Since(t0)
	cpu1, err := processCPU(pid)
	if err != nil {
		return nil, err
	}
	passes1, err := passMetrics(ctx, url)
	if err != nil {
		return nil, err
	}
	if n := passes1.count - passes0.count; n > 0 {
		res.PassesPerSec = n / elapsed.Seconds()
		res.PassMeanMs = (passes1.seconds - passes0.seconds) * 1000 / n
	}
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)

	res.WindowSeconds = elapsed.Seconds()
	res.BenchCPUCores = (rusageCPU(&ru1) - rusageCPU(&ru0)).Seconds() / elapsed.Seconds()
	if pid != 0 {
		res.ServerCPUCores = (cpu1 - cpu0).Seconds() / elapsed.Seconds()
		res.ServerCoresPer1000Agents = res.ServerCPUCores * 1000 / float64(n)
		rss, err := processRSS(pid)
		if err != nil {
			return nil, err
		}
		res.ServerRSSMiB = float64(rss) / (1 << 20)
	}
	res.HeartbeatsSent, res.HeartbeatsAcked = int(st.hbSent.Load()), int(st.hbAcked.Load())
	res.JobsSubmitted, res.JobsCompleted = int(submitted.Load()), int(st.completed.Load())
	res.JobsPerSec = float64(res.JobsCompleted) / elapsed.Seconds()
	st.mu.Lock()
	lat := slices.Clone(st.latencies)
	st.mu.Unlock()
	if len(lat) > 0 {
		slices.Sort(lat)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		res.HeartbeatP50Ms, res.HeartbeatP99Ms = ms(lat[(len(lat)-1)/2]), ms(lat[(len(lat)-1)*99/100])
	}
	res.Disconnected = int(st.disconnected.Load())
	workers, err := c.Workers(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range workers {
		if w.State == berth.WorkerReady || w.State == berth.WorkerBusy {
			res.ServerWorkers++
		}
	}
	return res, nil
}

// trickleJobs submits one job every 1/rate seconds until ctx ends, counting
// those submitted while recording.
func trickleJobs(ctx context.Context, c *client.Client, rate float64, st *agentsBenchStats, submitted *atomic.Int64) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Command = berth.Argv{"true"}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := c.SubmitIDs(ctx, req); err == nil && st.recording.Load() {
			submitted.Add(1)
		}
	}
}

// passTotals are the server's scheduling passes so far: how many, and
// their seconds in all.
type passTotals struct{ count, seconds float64 }

// passMetrics reads the server's pass totals from its /metrics.
func passMetrics(ctx context.Context, url string) (passTotals, error) {
	var t passTotals
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return t, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return t, fmt.Errorf("server metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return t, fmt.Errorf("server metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, _ := strings.Cut(sc.Text(), " ")
		var into *float64
		switch name {
		case "berth_scheduler_pass_seconds_count":
			into = &t.count
		case "berth_scheduler_pass_seconds_sum":
			into = &t.seconds
		default:
			continue
		}
		if *into, err = strconv.ParseFloat(value, 64); err != nil {
			return t, fmt.Errorf("server metrics: %s: %w", name, err)
		}
	}
	return t, sc.Err()
}

// simAgent is one simulated agent: a session on the agent WebSocket that
// heartbeats and reports every assigned attempt succeeded at once.
type simAgent struct {
	conn *websocket.Conn
	// hbAt is when the heartbeat awaiting its ack was sent (unix nanos);
	// 0 when none is.
	hbAt atomic.Int64
}

// dialSimAgent connects agent i and registers it; it returns the agent
// and the heartbeat interval the server's ack set.
func dialSimAgent(ctx context.Context, url string, i, slots int) (*simAgent, time.Duration, error) {
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, _, err := websocket.Dial(dctx, url+"/api/v1/agent", nil) // it takes http:// URLs
	if err != nil {
		return nil, 0, fmt.Errorf("dial: %w", err)
	}
	conn.SetReadLimit(16 << 20)
	name := fmt.Sprintf("bench-agent-%06d", i)
	reg := &wire.Register{Version: wire.Version, WorkerID: name, Host: name, CPUs: 8, Memory: 32 << 30, Slots: slots, Agent: "bench"}
	frame, err := wire.Encode(wire.TypeRegister, reg)
	if err == nil {
		err = conn.Write(dctx, websocket.MessageText, frame)
	}
	if err != nil {
		conn.CloseNow()
		return nil, 0, fmt.Errorf("register: %w", err)
	}
	_, data, err := conn.Read(dctx)
	var msgs []wire.Message
	if err == nil {
		msgs, err = wire.DecodeFrame(data)
	}
	if err != nil {
		conn.CloseNow()
		return nil, 0, fmt.Errorf("register: %w", err)
	}
	ack, ok := msgs[0].Body.(*wire.Ack)
	switch {
	case !ok || ack.Of != wire.AckRegister:
		err = fmt.Errorf("register: answered %s", msgs[0].Type)
	case ack.Error != "":
		err = fmt.Errorf("register refused: %s", ack.Error)
	case ack.Heartbeat <= 0:
		err = errors.New("register: the ack sets no heartbeat interval")
	}
	if err == nil {
		frame, _ = wire.Encode(wire.TypeReadyForWork, &wire.ReadyForWork{})
		err = conn.Write(dctx, websocket.MessageText, frame)
	}
	if err != nil {
		conn.CloseNow()
		return nil, 0, err
	}
	return &simAgent{conn: conn}, ack.Heartbeat, nil
}

// heartbeatFrame is a simulated agent's heartbeat: it runs nothing (its
// attempts end as they start) and has no GPUs.
var heartbeatFrame, _ = wire.Encode(wire.TypeHeartbeat, &wire.Heartbeat{})

// run serves the agent's session until ctx ends or the session does: it
// heartbeats every interval, the first at a random point of the first
// interval so that the agents' heartbeats spread, and answers the server.
func (a *simAgent) run(ctx context.Context, interval time.Duration, st *agentsBenchStats) {
	defer a.conn.CloseNow()
	go a.heartbeat(ctx, interval, st)
	for {
		_, data, err := a.conn.Read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				st.disconnected.Add(1)
			}
			return
		}
		msgs, err := wire.DecodeFrame(data)
		if err != nil {
			st.disconnected.Add(1)
			return
		}
		for _, m := range msgs {
			if err := a.handle(ctx, m, st); err != nil {
				if ctx.Err() == nil {
					st.disconnected.Add(1)
				}
				return
			}
		}
	}
}

func (a *simAgent) handle(ctx context.Context, m wire.Message, st *agentsBenchStats) error {
	switch b := m.Body.(type) {
	case *wire.Ack:
		switch b.Of {
		case wire.AckHeartbeat:
			if at := a.hbAt.Swap(0); at != 0 {
				st.ackedHeartbeat(time.Duration(time.Now().UnixNano() - at))
			}
		case wire.AckResult:
			if st.recording.Load() {
				st.completed.Add(1)
			}
		}
	case *wire.JobAssign:
		zero := 0
		frame, err := wire.Encode(wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: b.AttemptID})
		if err == nil {
			frame, err = wire.AppendFrame(frame, wire.TypeJobResult, &wire.JobResult{AttemptID: b.AttemptID, State: berth.AttemptSucceeded, ExitCode: &zero})
		}
		if err != nil {
			return err
		}
		return a.conn.Write(ctx, websocket.MessageText, frame)
	}
	return nil
}

// heartbeat sends a heartbeat every interval until ctx ends or a write
// fails (the reader then sees the session end).
func (a *simAgent) heartbeat(ctx context.Context, interval time.Duration, st *agentsBenchStats) {
	t := time.NewTimer(rand.N(interval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(interval)
		a.hbAt.Store(time.Now().UnixNano())
		if st.recording.Load() {
			st.hbSent.Add(1)
		}
		if err := a.conn.Write(ctx, websocket.MessageText, heartbeatFrame); err != nil {
			a.conn.CloseNow()
			return
		}
	}
}

// clockTicks is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go runs on).
const clockTicks = 100

// processCPU returns the user and system CPU time process pid has used
// (0 for pid 0), from /proc/PID/stat.
func processCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("server CPU: %w", err)
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(data, ')')
	var f []string
	if i >= 0 {
		f = strings.Fields(string(data[i+1:]))
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("server CPU: /proc/%d/stat: unexpected format", pid)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("server CPU: /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// processRSS returns process pid's resident set in bytes, from
// /proc/PID/status.
func processRSS(pid int) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("server RSS: %w", err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("server RSS: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("server RSS: no VmRSS in /proc/%d/status", pid)
}

func rusageCPU(ru *syscall.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
