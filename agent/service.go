package agent

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/service"
	"github.com/berth-dev/berth/wire"
)

// serviceRun is a service attempt's port and readiness as the agent runs
// it.
type serviceRun struct {
	port    int
	watched chan struct{} // closed once watchService returns

	mu     sync.Mutex
	class  string // the failure class once it failed its readiness check
	reason string // why, when it replaces the exit's reason (it exited before ready)
}

// prepareService gives a service attempt its port (when it needs one) and
// fills in the system variables of its command, env and workdir
// ({{SERVICE_PORT}}, {{WORKER_ID}}, {{GPU_DEVICES}}…). It returns m's
// copy to run, or the error of allocating the port (svc then says it is
// the machine's fault: class infra_fatal).
func (s *supervisor) prepareService(m *wire.JobAssign, svc *serviceRun) (*wire.JobAssign, error) {
	if m.Service.NeedsPort {
		port, err := s.ports.Allocate(m.AttemptID)
		if err != nil {
			svc.class = berth.FailureInfraFatal
			return nil, err
		}
		svc.port = port
	}
	gpus := gpuDevices(m.GPUs, s.cfg.GPUs)
	if gpus == nil {
		gpus = make([]string, len(m.GPUs))
		for i, g := range m.GPUs {
			gpus[i] = strconv.Itoa(g)
		}
	}
	rt := service.Runtime{ServicePort: svc.port, WorkerID: s.workerID, TaskID: fmt.Sprintf("%s-%d", m.JobID, m.TaskIndex),
		ModelName: m.Service.Model, GPUCount: len(m.GPUs), GPUDevices: strings.Join(gpus, ","), GPUMilli: m.GPUMilli,
		ModelCache: s.cfg.ModelCache, Workspace: m.Workdir}
	if rt.Workspace == "" {
		rt.Workspace = filepath.Join(s.attDir, m.AttemptID)
	}
	out := *m
	out.Command = make([]string, len(m.Command))
	for i, arg := range m.Command {
		out.Command[i] = service.Render(arg, rt)
	}
	out.Env = maps.Clone(m.Env)
	if out.Env == nil {
		out.Env = map[string]string{}
	}
	for k, v := range out.Env {
		out.Env[k] = service.Render(v, rt)
	}
	if svc.port > 0 {
		out.Env["BERTH_SERVICE_PORT"] = strconv.Itoa(svc.port)
	}
	out.Workdir = service.Render(m.Workdir, rt)
	return &out, nil
}

// startedGrace is how long the process of a service without a readiness
// check (no port to probe) must run to be ready: one that exits sooner,
// such as a shell that cannot find its command, was never ready.
const startedGrace = time.Second

// watchService runs a service attempt's readiness check until it ends,
// reporting every phase to the server; a service that fails its check is
// stopped (cause readiness) with its failure class. A process that has
// exited is never reported ready, and one whose program could not be
// started (exit code 126 or 127 before ready) fails with class
// cannot_start and what it printed last. The end of a service that was
// ready, or that was stopped, is no readiness failure: the attempt just
// ends.
func (s *supervisor) watchService(ctx context.Context, at *attempt, m *wire.JobAssign, svc *serviceRun) {
	defer close(svc.watched)
	wasReady := false
	report := func(st ServiceStatus) {
		switch {
		case st.Phase == ServiceReady:
			wasReady = true
		case st.Phase == ServiceFailed && (wasReady || stopped(at.proc)):
			return
		}
		st = exitStatus(at, st)
		_ = s.send(ctx, wire.TypeServiceStatus, &wire.ServiceStatus{AttemptID: m.AttemptID, Phase: st.Phase,
			Port: svc.port, Class: st.Class, Reason: at.secrets.Redact(st.Reason), Marker: st.Marker})
	}
	failed := func(st ServiceStatus) {
		if st.Phase != ServiceFailed || wasReady || stopped(at.proc) {
			return
		}
		st = exitStatus(at, st)
		svc.mu.Lock()
		svc.class = st.Class
		switch {
		case st.Class == FailCannotStart:
			svc.reason = st.Reason
		case hasEnded(at.proc): // it exited by itself: its result says how, and what the check saw
			svc.reason = fmt.Sprintf("%s (%s): %s", at.proc.Exit().Reason, st.Class, st.Reason)
		}
		svc.mu.Unlock()
		at.proc.Stop(berth.CauseReadiness, fmt.Sprintf("not ready (%s): %s", st.Class, st.Reason))
	}
	if m.Service.Readiness == nil || svc.port == 0 {
		t := time.NewTimer(startedGrace)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-at.proc.Done():
			st := ServiceStatus{Phase: ServiceFailed, Class: FailUnknown, Reason: "process exited before ready"}
			report(st)
			failed(st)
		case <-t.C:
			report(ServiceStatus{Phase: ServiceReady, Reason: "started; no port to probe"})
		}
		return
	}
	p, err := NewProber(ProberConfig{Spec: *m.Service.Readiness, Host: "127.0.0.1", Port: svc.port, LogPath: at.log,
		Done: at.proc.Done(), Report: report, Now: s.cfg.Now})
	if err != nil {
		report(ServiceStatus{Phase: ServiceFailed, Class: berth.FailureInfraFatal, Reason: err.Error()})
		at.proc.Stop(berth.CauseReadiness, "readiness check: "+err.Error())
		return
	}
	failed(p.Run(ctx))
}

// exitStatus is st, how a service attempt stands, with class
// cannot_start and the reason when its process has ended because its
// program could not be started: exit code 126 (not executable) or 127
// (not found), whether the agent's exec or a shell said so. The reason is
// the exit's with the last line the process printed (a shell's "sh: 1:
// vllm: not found"), which the agent's own exec failure already says.
func exitStatus(at *attempt, st ServiceStatus) ServiceStatus {
	if st.Phase != ServiceFailed || !hasEnded(at.proc) {
		return st
	}
	ex := at.proc.Exit()
	if ex.Cause != "" || ex.ExitCode == nil || (*ex.ExitCode != exitNotExecutable && *ex.ExitCode != exitNotFound) {
		return st
	}
	st.Class, st.Reason = FailCannotStart, ex.Reason
	if strings.HasPrefix(ex.Reason, "start: ") {
		return st // the agent's exec failed, and says why
	}
	var last string
	t := logTail{path: at.log}
	keep := func(line string) {
		if line = strings.TrimSpace(line); line != "" {
			last = line
		}
	}
	t.read(keep)
	t.flush(keep)
	if last != "" {
		st.Reason += ": " + berth.Clip(last, 300)
	}
	return st
}

// stopped reports whether p has ended because it was stopped (cancelled,
// or a watchdog's or an operator's stop) rather than by itself.
func stopped(p Process) bool {
	select {
	case <-p.Done():
		ex := p.Exit()
		return ex.State == berth.AttemptCancelled || ex.Cause != ""
	default:
		return false
	}
}

// failure returns the class of the service's failed readiness check, or
// "", once its check has ended (it ends when the process does), and the
// reason its result gives instead of the exit's ("" for the exit's own).
func (svc *serviceRun) failure() (class, reason string) {
	if svc == nil {
		return "", ""
	}
	if svc.watched != nil {
		<-svc.watched
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	return svc.class, svc.reason
}
