package agent

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/redact"
	"github.com/berth-dev/berth/wire"
)

// sendFunc queues one message for the server; it fails while the agent
// has no session (what matters is resent after the next register).
type sendFunc func(ctx context.Context, typ string, payload any) error

// supervisor supervises the agent's attempts: it starts each assigned
// attempt as a child process group, watches it (and a service's
// readiness), ships its output and progress, stops it for a cause, fences
// it when the server is lost past the lease, and reports its result until
// the server acknowledges it. It reports through send, which the server
// session owns.
type supervisor struct {
	cfg         *Config // read only
	log         *slog.Logger
	workerID    string
	attDir      string
	logs        *LogFiles // where attempts' log files come from and go back to
	groups      *GroupJournal
	ports       *PortAllocator
	models      *warmModels
	gpus        gpuState
	send        sendFunc
	adopted     []adoption // services a previous agent left running, followed once Run starts
	cgroups     *cgroups   // where attempts' cgroups are made; nil: none
	progressURL string     // the progress endpoint's base URL, set when Run starts

	mu       sync.Mutex
	attempts map[string]*attempt
	forgot   chan struct{} // closed and replaced when an attempt is forgotten (its result acknowledged)

	stopping atomic.Bool // Run's context has ended: nothing more is started; set under mu
	parked   atomic.Bool // the server last said that every queue of this worker is off
}

// attempt is one attempt the supervisor runs, from its start until the
// server acknowledges its result.
type attempt struct {
	id       string
	dir      string
	scratch  bool // dir was made as the working directory
	log      string
	logStart int64    // where its output begins in log
	streams  *Streams // which of log's bytes are stderr; nil: not told apart (a service's)
	queue    string
	gpus     []int
	token    string           // the secret of its progress URL
	secrets  *redact.Redactor // hides its secrets' values in what is shipped
	keep     bool             // a service left running when the agent shuts down, for the next agent to adopt
	proc     Process
	spec     *Spec // how proc was started, for execs into it; nil when it was not
	progress progress

	mu      sync.Mutex // serialises shipping and result sending
	sent    int64
	acked   int64
	scanned int64 // output scanned for progress lines
	lines   progressScanner
	result  *wire.JobResult // set once ended; kept until acknowledged
	file    *os.File
}

// shutdownReason is the reason of an attempt stopped because its agent is
// shutting down.
const shutdownReason = "agent shutting down"

// reassigned is the reason of an attempt killed because the server says
// it belongs elsewhere.
const reassigned = "reassigned: the server says this attempt now belongs elsewhere"

// resume implements supervision.
func (s *supervisor) resume(reg *wire.Register) {
	reg.Models, reg.Isolation = s.models.list(), s.isolation()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, at := range s.attempts {
		at.mu.Lock()
		if at.result != nil {
			reg.Finished = append(reg.Finished, id)
		} else {
			reg.Running = append(reg.Running, id)
		}
		at.sent = at.acked // the server has what it acknowledged; resend the rest
		at.mu.Unlock()
	}
}

// reportEnded implements supervision.
func (s *supervisor) reportEnded(sctx context.Context) {
	s.mu.Lock()
	var ended []*attempt
	for _, at := range s.attempts {
		if at.proc != nil && hasEnded(at.proc) {
			ended = append(ended, at)
		}
	}
	s.mu.Unlock()
	for _, at := range ended {
		s.report(sctx, at)
	}
}

// heartbeat implements supervision. It also keeps the service ports of
// running attempts and reclaims those of attempts no longer running.
func (s *supervisor) heartbeat() *wire.Heartbeat {
	hb := &wire.Heartbeat{Models: s.models.list()}
	hb.FaultyGPUs, hb.GPUStats = s.gpus.snapshot()
	s.mu.Lock()
	for id, at := range s.attempts {
		if at.proc != nil && !hasEnded(at.proc) {
			hb.Running = append(hb.Running, id)
			s.ports.Touch(id) // its ports are in use
		}
	}
	s.mu.Unlock()
	if freed, err := s.ports.Reclaim(s.cfg.Now()); err != nil || len(freed) > 0 {
		s.log.Warn("reclaimed service ports of attempts no longer running", "ports", freed, "err", err)
	}
	return hb
}

// prewarm implements supervision: nothing is prewarmed once the agent is
// stopping.
func (s *supervisor) prewarm(ctx context.Context, model string) {
	if !s.stopping.Load() {
		s.models.prewarm(ctx, model)
	}
}

// cancel implements supervision. A cause the agent does not know is
// logged and dropped.
func (s *supervisor) cancel(m *wire.JobCancel) {
	cause := m.Cause
	if _, known := berth.CauseExitCode(cause); cause != "" && !known {
		s.log.Warn("cancel with an unknown cause; cancelling without", "attempt", m.AttemptID, "cause", cause)
		cause = ""
	}
	if at := s.get(m.AttemptID); at != nil {
		at.proc.Stop(cause, m.Reason)
	}
}

// ackResult implements supervision: it drops the attempt, closes its log
// and removes its files.
func (s *supervisor) ackResult(id string) {
	s.mu.Lock()
	at := s.attempts[id]
	if at != nil {
		delete(s.attempts, id)
		close(s.forgot)
		s.forgot = make(chan struct{})
	}
	s.mu.Unlock()
	if at == nil {
		return
	}
	at.mu.Lock()
	if at.file != nil {
		_ = at.file.Close()
		at.file = nil
	}
	at.mu.Unlock()
	s.removeFiles(at)
}

// removeFiles releases the attempt's log and deletes, if Start made it,
// its scratch directory.
func (s *supervisor) removeFiles(at *attempt) {
	if p, ok := at.proc.(*doneProcess); ok && p.noFiles {
		return
	}
	s.logs.Release(at.log)
	if at.scratch {
		_ = os.RemoveAll(at.dir)
	}
}

// get returns attempt id, nil if unknown.
func (s *supervisor) get(id string) *attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts[id]
}

// kill implements supervision: it kills the attempts now.
func (s *supervisor) kill(ids []string) {
	for _, id := range ids {
		if at := s.get(id); at != nil {
			at.proc.Kill(berth.CauseReassigned, reassigned)
		}
	}
}

// control implements supervision: it remembers whether the worker is
// parked, logging the change, and stops every running attempt of a queue
// turned off with the hard policy (a safety net behind the server's own
// hard stop).
func (s *supervisor) control(c *wire.Control) {
	if s.parked.Swap(c.Parked) != c.Parked {
		if c.Parked {
			s.log.Warn("parked: every queue of this worker is off")
		} else {
			s.log.Info("resumed")
		}
	}
	var stops []stopRequest
	s.mu.Lock()
	for _, at := range s.attempts {
		if off, ok := c.OffFor(at.queue); ok && off.Policy == berth.StopHard {
			stops = append(stops, stopRequest{at, operatorStop(s.cfg.Host, off)})
		}
	}
	s.mu.Unlock()
	s.stopFor(berth.CauseOperator, "stopping attempt: its queue is off", stops)
}

// stopRequest is an attempt to stop, and why.
type stopRequest struct {
	at     *attempt
	reason string
}

// stopFor stops attempts for cause, logging msg for each it began to stop.
func (s *supervisor) stopFor(cause, msg string, stops []stopRequest) {
	for _, r := range stops {
		if r.at.proc.Stop(cause, r.reason) {
			s.log.Warn(msg, "attempt", r.at.id, "reason", r.reason)
		}
	}
}

// operatorStop says who stopped an attempt of host and why, in the
// server's words.
func operatorStop(host string, off wire.QueueOff) string {
	return berth.OperatorStopReason(host, off.Queue, off.Policy, off.RequestedBy)
}

// stopAll stops, with cause shutdown, every attempt but the services kept
// for the next agent, and waits for them to end. From then on the agent
// starts nothing more (see start).
func (s *supervisor) stopAll() {
	s.mu.Lock()
	s.stopping.Store(true)
	procs := make([]Process, 0, len(s.attempts))
	for _, at := range s.attempts {
		if at.proc != nil && !at.keep {
			procs = append(procs, at.proc)
		}
	}
	s.mu.Unlock()
	for _, p := range procs {
		p.Stop(berth.CauseShutdown, shutdownReason)
	}
	for _, p := range procs {
		<-p.Done()
	}
}

// awaitReported waits until the server has acknowledged the result of
// every attempt but the services left running for the next agent, or
// for at most timeout. It returns how many results are still
// unacknowledged.
func (s *supervisor) awaitReported(timeout time.Duration) int {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		left, forgot := 0, s.forgot
		for _, at := range s.attempts {
			if !at.keep || hasEnded(at.proc) {
				left++
			}
		}
		s.mu.Unlock()
		if left == 0 {
			return 0
		}
		select {
		case <-forgot:
		case <-t.C:
			return left
		}
	}
}

// hasEnded reports whether p has ended.
func hasEnded(p Process) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// fence kills every attempt, every ShipEvery until ctx ends, while lost
// says that the server has been silent past the lease.
func (s *supervisor) fence(ctx context.Context, lost func(now time.Time) bool) {
	every(ctx, s.cfg.ShipEvery, func() bool {
		if !lost(s.cfg.Now()) {
			return true
		}
		s.mu.Lock()
		for _, at := range s.attempts {
			if at.proc != nil && !hasEnded(at.proc) {
				s.log.Warn("self-fencing: server unreachable past the lease; killing attempt", "attempt", at.id)
				at.proc.Kill("", "self-fenced: the server was unreachable for longer than the lease")
			}
		}
		s.mu.Unlock()
		return true
	})
}

// start implements supervision: it starts the attempt (or, while the agent
// is stopping, refuses it), tells the server it accepted it and follows
// it. An attempt it already has is not started again.
func (s *supervisor) start(runCtx, sctx context.Context, m *wire.JobAssign) {
	if s.stopping.Load() {
		s.refuse(runCtx, m, berth.CauseShutdown, shutdownReason)
		return
	}
	if p := m.RendezvousPort; p > 0 && PortBound(p) {
		s.refuse(runCtx, m, berth.CausePortBusy, fmt.Sprintf("MASTER_PORT %d is in use on this machine", p))
		return
	}
	dir := filepath.Join(s.attDir, m.AttemptID)
	sb, err := s.sandbox(m)
	// A batch attempt appends to a kept file. A service has its own (a
	// restarted agent finds it by its name; readiness reads it), and so
	// has an attempt with secrets, whose values then leave the worker's
	// disk once its output is shipped (Release deletes the file), and one
	// run as its user's account, who owns the file.
	log, logStart := dir+".log", int64(0)
	if m.Service == nil && len(m.Secrets) == 0 && !sb.mapped() {
		log, logStart = s.logs.Take()
	}
	at := &attempt{id: m.AttemptID, dir: dir, scratch: m.Workdir == "", log: log, logStart: logStart,
		queue: m.Queue, gpus: m.GPUs, token: rand.Text(), secrets: secretRedactor(m)}
	if !adoptable(m) {
		at.streams = new(Streams) // a job that may outlive the agent writes its log itself
	}
	run := m
	if err == nil {
		run, err = expandSecrets(m)
	}
	var svc *serviceRun
	if err == nil && m.Service != nil {
		svc = &serviceRun{}
		run, err = s.prepareService(run, svc)
	}
	var proc Process
	if err != nil {
		proc = failedProcess(fmt.Sprintf("start: %v", err))
	} else {
		at.spec = &Spec{AttemptID: m.AttemptID, JobID: m.JobID, TaskIndex: m.TaskIndex,
			ArrayIndex: m.ArrayIndex, JobName: m.JobName, User: m.User, Attempt: m.Attempt, Host: s.cfg.Host, Server: s.cfg.Server,
			Command: run.Command, Env: run.Env, Workdir: run.Workdir, Dir: dir, LogPath: at.log, GPUs: m.GPUs,
			GPUDevices: gpuDevices(m.GPUs, s.cfg.GPUs), GPUShare: gpuShare(m, s.cfg.GPUs, s.cfg.MPSPipeDir),
			MaxRuntime: m.MaxRuntime, StallTimeout: m.StallTimeout, Grace: m.Grace, Groups: s.groups,
			ProgressURL: s.progressURL + url.PathEscape(m.AttemptID) + "/" + at.token, Detached: adoptable(m),
			Streams: at.streams, Sandbox: sb}
		if proc, err = s.cfg.Executor.Start(runCtx, *at.spec); err != nil {
			proc = failedProcess(fmt.Sprintf("start: %v", err))
		}
	}
	at.proc = proc
	if svc != nil && err == nil && adoptable(m) {
		at.keep = s.cfg.KeepServices
		if err := s.saveServiceRecord(m, svc.port); err != nil {
			s.log.Warn("keep a service's record for a restarted agent", "attempt", m.AttemptID, "err", err)
		}
	}
	s.mu.Lock()
	if orig, dup := s.attempts[m.AttemptID]; dup {
		s.mu.Unlock()
		proc.Kill("", "")
		if at.log != orig.log { // a file of its own: give it back once the process is gone
			go func() { <-proc.Done(); s.logs.Release(at.log) }()
		}
		return
	}
	s.attempts[m.AttemptID] = at
	missed := s.stopping.Load() && !at.keep // stopAll began after the check above
	s.mu.Unlock()
	if missed {
		proc.Stop(berth.CauseShutdown, shutdownReason)
	}
	_ = s.send(sctx, wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: m.AttemptID})
	if err != nil {
		svc = nil // never started: no readiness to watch
	}
	s.follow(runCtx, at, m, svc)
}

// refuse answers an assignment the agent does not start: while it is
// stopping (cause shutdown), or for rank 0 of a gang whose port is in use
// (cause port_busy). The attempt ends unstarted with cause, which spends
// no retry: the server places it again.
func (s *supervisor) refuse(runCtx context.Context, m *wire.JobAssign, cause, reason string) {
	code, _ := berth.CauseExitCode(cause)
	at := &attempt{id: m.AttemptID, proc: &doneProcess{noFiles: true, exit: Exit{State: stoppedState(cause),
		ExitCode: &code, Reason: "not started: " + reason, Cause: cause}}}
	s.mu.Lock()
	_, dup := s.attempts[m.AttemptID]
	if !dup {
		s.attempts[m.AttemptID] = at
	}
	s.mu.Unlock()
	if !dup {
		s.follow(runCtx, at, m, nil)
	}
}

// follow watches a started attempt (and a service's readiness, when svc
// is set) until it ends, then reports its result.
func (s *supervisor) follow(runCtx context.Context, at *attempt, m *wire.JobAssign, svc *serviceRun) {
	proc := at.proc
	if svc != nil {
		svc.watched = make(chan struct{})
		go s.watchService(runCtx, at, m, svc)
	}
	go func() {
		<-proc.Done()
		ex := proc.Exit()
		if svc != nil {
			if _, err := s.ports.Release(m.AttemptID); err != nil {
				s.log.Warn("release a service's port", "attempt", m.AttemptID, "err", err)
			}
			s.dropServiceRecord(m.AttemptID)
		}
		if ex.State == berth.AttemptSucceeded && m.Model != "" {
			s.models.add(m.Model) // before the result, so that a heartbeat after it reports the model
		}
		if ex.Cause == berth.CauseOperator {
			held := at.gpus
			if m.GPUMilli > 0 {
				held = nil // a shared GPU: other attempts' memory stays on it
			}
			ex.Reason += "; " + s.confirmStopped(runCtx, held, ex.Lingering)
		}
		class, why := svc.failure()
		if ex.Cause == berth.CauseOOM {
			class = berth.FailureOOM
		}
		at.mu.Lock()
		at.result = &wire.JobResult{AttemptID: at.id, State: ex.State, ExitCode: ex.ExitCode, Reason: at.secrets.Redact(cmp.Or(why, ex.Reason)),
			Cause: ex.Cause, Class: class}
		at.mu.Unlock()
		s.report(runCtx, at)
	}()
}
