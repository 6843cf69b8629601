// Package agent is the worker side of Berth: it registers with the server
// over the agent WebSocket, runs each assigned attempt as a child process
// group (the agent supervises, the job is a child), ships its output and
// progress, reports its end until the server acknowledges it, and kills its
// own attempts if it cannot reach the server for longer than its lease
// (self-fencing). Its watchdog, a process that outlives it
// (Config.Watchdog, watchdog.go), kills them if the agent dies.
//
// The agent also ends attempts for a cause, each reported with its own exit
// code (berth.CauseExitCode): past max_runtime (budget), silent past
// stall_timeout (stall), when the server says they belong elsewhere
// (reassigned), when a GPU of theirs fails its health check (gpu_health),
// and on a hard stop by an operator (operator), which it confirms: the
// processes are gone and the GPU memory was released. Where it can, it runs
// each attempt in a cgroup of its own (cgroup.go), which enforces the job's
// cpus and memory (an attempt the kernel kills at its memory limit ends
// with cause oom) and whose processes all die with the attempt; as root, it
// may run each attempt as its user's Unix account (runas.go, Config.RunAs).
//
// Asked to stop (the end of Run's context), the agent keeps its session
// while it stops its attempts (SIGTERM, then SIGKILL after their grace),
// ships the rest of their output and reports them ended with cause
// shutdown, which spends no retry: the server places their jobs again at
// once. It closes the session once the server has acknowledged them, or
// after ReportTimeout. Services kept for the next agent keep running.
//
// It reports the models warm on its worker (see Agent.Models) and, given a
// prewarm command, loads the models the server hints jobs will need.
package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/dirlock"
)

// Config configures an Agent. Server, DataDir and Host are required.
type Config struct {
	// Server is the server's URL (http://host:7070), or the
	// comma-separated URLs of the servers of a highly available control
	// plane: the agent keeps a session with the one that leads.
	Server string
	// Token is the agent's credential, bound to Host; empty: the one
	// saved in DataDir/credential, if any.
	Token string
	// JoinToken, when the agent has no credential yet, is traded for one
	// at the first connection, which is saved in DataDir/credential.
	JoinToken string
	// TLS verifies https:// servers (a pinned CA); nil: the system's roots.
	TLS     *tls.Config
	DataDir string
	Host    string
	// Advertise is the address (an IP or a host name, no port) others
	// reach this worker at: its services' endpoints, and MASTER_ADDR when
	// it runs rank 0 of a gang. Empty: the local address of its connection
	// to the server (127.0.0.1 for a server on loopback).
	Advertise string
	Queues    []string // empty: every queue
	GPUs      []berth.GPU
	CPUs      float64
	Memory    berth.Bytes
	Slots     int // most attempts at once; default 16
	Labels    map[string]string
	Executor  Executor // default ProcessExecutor
	Log       *slog.Logger
	Lease     time.Duration // self-fence until the server says otherwise; default 30s
	ShipEvery time.Duration // how often running output and progress are shipped; default 250ms
	Version   string
	// NvidiaSMI is the path of nvidia-smi, with which the agent checks the
	// health of GPUs and confirms that a hard stop released GPU memory;
	// empty: neither (GPUs declared rather than discovered).
	NvidiaSMI   string
	HealthEvery time.Duration // how often the GPUs' health is checked; default 30s
	// MPSPipeDir is the pipe directory of the CUDA MPS control daemon
	// running on this machine (nvidia-cuda-mps-control -d with
	// CUDA_MPS_PIPE_DIRECTORY set to it); empty: no MPS. With it, an
	// attempt holding a fraction of a GPU runs as an MPS client limited
	// to its share of the GPU's threads and memory (docs/gpu-sharing.md).
	MPSPipeDir     string
	ReleaseTimeout time.Duration // how long a hard stop waits for GPU memory to be released; default 30s
	// Models are the models already warm here (their weights cached) when
	// the agent starts; each must pass ValidModel.
	Models []string
	// Prewarm is the command, run with sh -c, that loads a model the
	// server hints at, with {model} replaced by the model's name
	// shell-quoted; empty: prewarm hints are ignored.
	Prewarm        string
	PrewarmTimeout time.Duration // how long a prewarm command may run; default 30m
	// PortLo and PortHi bound the ports given to services
	// ({{SERVICE_PORT}}); default 8000–9000.
	PortLo, PortHi int
	// KeepServices leaves services (without secrets) running when the
	// agent shuts down, for the next agent on this data dir to adopt;
	// otherwise shutting down stops them too. An agent that dies leaves
	// them running either way.
	KeepServices bool
	// ModelCache is where services keep model weights ({{MODEL_CACHE}});
	// default DataDir/models.
	ModelCache string
	// ReportTimeout is how long an agent that is stopping waits, once the
	// attempts it stopped have ended, for the server to acknowledge their
	// results before it closes its session anyway; default 5s.
	ReportTimeout time.Duration
	// Now is the clock the lease, service ports and readiness budgets are
	// measured with; nil: time.Now.
	Now func() time.Time
	// Watchdog is the command (argv, with DataDir appended) of the
	// process Run starts to outlive the agent: if the agent dies without
	// stopping cleanly, it kills every attempt the agent was running (its
	// process group and the processes that left the group) but the
	// services kept for the next agent, at once; see the function
	// Watchdog, which that process runs (berth agent-watchdog). Empty:
	// none, and only each attempt's leader dies with the agent.
	Watchdog []string
	// RunAs is whose Unix account attempts run as: RunAsAgent (empty:
	// the default) the agent's own; RunAsMap, for an agent running as
	// root, the account UserMap names for the job's Berth user, or the
	// account of the same name. An attempt whose user has no account, or
	// whose account is uid 0 unless AllowRootJobs, fails without
	// starting, saying why.
	RunAs         string
	UserMap       map[string]string // Berth user → Unix account; only with RunAsMap
	AllowRootJobs bool
}

// Agent runs attempts for one worker. Create it with New and call Run.
// Its server session (session.go) keeps it registered with the server and
// hands the server's messages to its supervisor (supervisor.go), which runs
// the attempts and reports them through the session.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	lock    *dirlock.Lock // on DataDir, held until Run returns
	groups  *GroupJournal
	session *session
	work    *supervisor
}

// New prepares an agent: it creates and locks DataDir (another process
// holding it is an error), loads or makes the worker id and kills process
// groups a previous agent left behind in DataDir. Run releases the lock.
func New(cfg Config) (*Agent, error) {
	if cfg.Server == "" || cfg.DataDir == "" || cfg.Host == "" {
		return nil, errors.New("agent: server, data dir and host are required")
	}
	if cfg.Advertise != "" {
		if err := berth.ValidAdvertise("advertise", cfg.Advertise); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 16
	}
	if cfg.Executor == nil {
		cfg.Executor = ProcessExecutor{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.ShipEvery <= 0 {
		cfg.ShipEvery = 250 * time.Millisecond
	}
	if cfg.HealthEvery <= 0 {
		cfg.HealthEvery = 30 * time.Second
	}
	if cfg.ReleaseTimeout <= 0 {
		cfg.ReleaseTimeout = 30 * time.Second
	}
	if cfg.PrewarmTimeout <= 0 {
		cfg.PrewarmTimeout = 30 * time.Minute
	}
	if cfg.ReportTimeout <= 0 {
		cfg.ReportTimeout = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := checkRunAs(&cfg); err != nil {
		return nil, err
	}
	lock, err := acquire(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("agent: data dir %w; stop the agent that uses it or give this one its own data dir", err)
	}
	a, err := prepare(cfg)
	if err != nil {
		lock.Release()
		return nil, err
	}
	a.lock = lock
	return a, nil
}

// lockWait is how long New waits for the data dir's lock: the watchdog of
// an agent that died holds it until it has killed what that agent left.
const lockWait = 3 * time.Second

// acquire locks dir, waiting at most lockWait while another process holds
// it (no event says when a process in another session lets go of it).
func acquire(dir string) (*dirlock.Lock, error) {
	deadline := time.Now().Add(lockWait)
	for {
		lock, err := dirlock.Acquire(dir)
		if !errors.Is(err, dirlock.ErrInUse) || time.Now().After(deadline) {
			return lock, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// prepare does New's work once the data dir is locked.
func prepare(cfg Config) (*Agent, error) {
	a := &Agent{cfg: cfg, log: cfg.Log}
	models, err := newWarmModels(&a.cfg)
	if err != nil {
		return nil, err
	}
	attDir := filepath.Join(cfg.DataDir, "attempts")
	if err := os.MkdirAll(attDir, 0o755); err != nil {
		return nil, fmt.Errorf("agent: data dir: %w", err)
	}
	id, err := loadWorkerID(cfg.DataDir, cfg.Now())
	if err != nil {
		return nil, err
	}
	var credFile string // the file the token was read from
	if a.cfg.Token == "" {
		if a.cfg.Token, err = SavedCredential(cfg.DataDir); err != nil {
			return nil, err
		}
		if a.cfg.Token != "" {
			credFile = credentialPath(cfg.DataDir)
		}
	}
	if a.cfg.ModelCache == "" {
		a.cfg.ModelCache = filepath.Join(cfg.DataDir, "models")
	}
	w := &supervisor{cfg: &a.cfg, log: cfg.Log, workerID: id, attDir: attDir, models: models,
		attempts: map[string]*attempt{}, forgot: make(chan struct{})}
	if w.cgroups, err = openCgroups(hostCgroups(), id); err != nil {
		a.log.Warn("the jobs' cpus and memory are not enforced, and processes that leave an attempt's process group outlive it",
			"isolation", berth.IsolationNone, "why", err)
	} else if w.cgroups.host.noCPU {
		a.log.Warn("each attempt runs in a cgroup of its own with its job's memory as its limit; the jobs' cpus are not enforced: "+
			"the cpu controller is not delegated to the agent's cgroup", "isolation", w.isolation())
	} else {
		a.log.Info("each attempt runs in a cgroup of its own, with its job's cpus and memory as limits", "isolation", w.isolation())
	}
	if w.ports, err = NewPortAllocator(PortConfig{Lo: cfg.PortLo, Hi: cfg.PortHi, Path: filepath.Join(cfg.DataDir, "ports.json"),
		Now: cfg.Now}); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	// What a previous agent left running: services are adopted (their
	// ports recovered), the rest killed.
	journal := filepath.Join(cfg.DataDir, "groups")
	stale, err := StaleGroups(journal)
	if err != nil {
		a.log.Warn("reading the process groups of a previous agent", "err", err)
	}
	if err := w.adoptServices(stale); err != nil {
		return nil, err
	}
	if n, escaped, err := KillAttempts(stale, id); err != nil {
		return nil, fmt.Errorf("agent: kill stale attempts: %w", err)
	} else if n+escaped > 0 {
		a.log.Warn("killed attempts left by a previous agent", "count", n, "escaped_processes", escaped)
	}
	entries, _ := os.ReadDir(attDir)
	for _, e := range entries {
		if _, kept := w.attempts[strings.TrimSuffix(e.Name(), ".log")]; !kept {
			_ = os.RemoveAll(filepath.Join(attDir, e.Name()))
		}
	}
	if a.groups, err = OpenGroupJournal(journal); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if w.logs, err = OpenLogFiles(filepath.Join(cfg.DataDir, "logs"), max(cfg.Slots, 1)); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	for _, ad := range w.adopted {
		if err := a.groups.Started(ad.at.id, ad.proc.pgid); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	w.groups, models.groups = a.groups, a.groups
	a.work = w
	a.session = newSession(&a.cfg, id, credFile, w)
	w.send = a.session.send
	return a, nil
}

// workerIDFile is the file in the data dir that holds the worker id.
const workerIDFile = "worker-id"

// savedWorkerID returns the worker id saved in dataDir, "" if none.
func savedWorkerID(dataDir string) string {
	data, _ := os.ReadFile(filepath.Join(dataDir, workerIDFile))
	return strings.TrimSpace(string(data))
}

// loadWorkerID returns the worker id saved in dataDir, or makes one at
// now and saves it there; it fails when the new id cannot be saved.
func loadWorkerID(dataDir string, now time.Time) (string, error) {
	if id := savedWorkerID(dataDir); id != "" {
		return id, nil
	}
	var ids berth.IDGen
	id := "w-" + strings.ToLower(ids.New(now))
	if err := os.WriteFile(filepath.Join(dataDir, workerIDFile), []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("agent: save worker id: %w", err)
	}
	return id, nil
}

// WorkerID returns the id this agent registers as.
func (a *Agent) WorkerID() string { return a.session.workerID }

// Registered is closed once the agent has registered with the server.
func (a *Agent) Registered() <-chan struct{} { return a.session.registered }

// Parked reports whether the server last said that every queue of this
// worker is off.
func (a *Agent) Parked() bool { return a.work.parked.Load() }

// Models returns the models warm on this worker, sorted: those it started
// with, those of attempts that succeeded here and those it prewarmed.
func (a *Agent) Models() []string { return a.work.models.list() }

// Run serves the progress endpoint on loopback, connects to the server (or
// to one of several, see session.connect) and serves assignments until ctx
// ends, reconnecting with backoff, or until the server refuses the agent's
// credential, which retrying would not change. When ctx ends it stops its
// attempts and reports them before it closes its session (see drain). On
// return every attempt has been stopped but the services kept for the
// next agent (Config.KeepServices). It returns nil when ctx ends;
// otherwise the refusal (a *RefusedError), or why the join token could
// not be traded, the progress endpoint cannot listen or the watchdog
// (Config.Watchdog) cannot start.
func (a *Agent) Run(ctx context.Context) error {
	defer a.lock.Release()
	if len(a.cfg.Watchdog) > 0 {
		wd, err := startWatchdog(a.cfg.Watchdog, a.cfg.DataDir, a.lock.File(), a.log)
		if err != nil {
			return err
		}
		defer func() { // before the lock is released: see watchdog.go
			if err := wd.release(); err != nil {
				a.log.Warn("stopping the agent's watchdog", "err", err)
			}
		}()
	}
	defer a.groups.Close()
	defer a.work.cgroups.close()
	defer a.work.models.prewarms.Wait() // the end of the session kills them
	if a.cfg.Token == "" && a.cfg.JoinToken != "" {
		if err := a.session.join(ctx); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("agent: progress endpoint: %w", err)
	}
	srv := &http.Server{Handler: a.work.progressHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	a.work.progressURL = "http://" + ln.Addr().String() + progressPath
	// The session, and what reports to the server, outlive ctx until the
	// attempts are reported.
	life, endSession := context.WithCancel(context.WithoutCancel(ctx))
	defer endSession()
	for _, ad := range a.work.adopted {
		ad.follow(life, a.work)
	}
	go a.work.fence(life, a.session.lost)
	go a.work.shipLoop(life)
	if a.cfg.NvidiaSMI != "" && len(a.cfg.GPUs) > 0 {
		go a.work.watchGPUs(life)
	}
	served := make(chan error, 1)
	go func() { served <- a.session.serve(life) }()
	select {
	case err = <-served: // refused: there is no server to report to
	case <-ctx.Done():
		a.drain()
		endSession()
		err = <-served
	}
	endSession() // prewarm commands and services' watchers stop with the session
	a.work.stopAll()
	return err
}

// drain stops the attempts (see supervisor.stopAll) while the session
// stays open, so that their last output and results reach the server, then
// waits, for at most ReportTimeout, until the server has acknowledged
// every result.
func (a *Agent) drain() {
	a.log.Info("stopping: stopping attempts and reporting them to the server")
	a.work.stopAll()
	if left := a.work.awaitReported(a.cfg.ReportTimeout); left > 0 {
		a.log.Warn("stopping without the server's acknowledgement of every result", "unacknowledged", left)
	}
}
