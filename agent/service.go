package agent

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/service"
	"github.com/berth-dev/berth/wire"
)

// serviceRun is a service attempt's port and readiness as the agent runs
// it.
type serviceRun struct {
	port    int
	watched chan struct{} // closed once watchService returns

	mu    sync.Mutex
	class string // the failure class once it failed its readiness check
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
	gpus := make([]string, len(m.GPUs))
	for i, g := range m.GPUs {
		gpus[i] = strconv.Itoa(g)
	}
	rt := service.Runtime{ServicePort: svc.port, WorkerID: s.workerID, TaskID: fmt.Sprintf("%s-%d", m.JobID, m.TaskIndex),
		ModelName: m.Service.Model, GPUCount: len(m.GPUs), GPUDevices: strings.Join(gpus, ","),
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

// watchService runs a service attempt's readiness check until it ends,
// reporting every phase to the server; a service that fails its check is
// stopped (cause readiness) with its failure class. The end of a service
// that was ready, or that was stopped, is no readiness failure: the
// attempt just ends.
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
		_ = s.send(ctx, wire.TypeServiceStatus, &wire.ServiceStatus{AttemptID: m.AttemptID, Phase: st.Phase,
			Port: svc.port, Class: st.Class, Reason: at.secrets.Redact(st.Reason), Marker: st.Marker})
	}
	if m.Service.Readiness == nil || svc.port == 0 {
		report(ServiceStatus{Phase: ServiceReady, Reason: "started; no port to probe"})
		return
	}
	p, err := NewProber(ProberConfig{Spec: *m.Service.Readiness, Host: "127.0.0.1", Port: svc.port, LogPath: at.log,
		Done: at.proc.Done(), Report: report, Now: s.cfg.Now})
	if err != nil {
		report(ServiceStatus{Phase: ServiceFailed, Class: berth.FailureInfraFatal, Reason: err.Error()})
		at.proc.Stop(berth.CauseReadiness, "readiness check: "+err.Error())
		return
	}
	st := p.Run(ctx)
	if st.Phase != ServiceFailed || wasReady || stopped(at.proc) {
		return
	}
	svc.mu.Lock()
	svc.class = st.Class
	svc.mu.Unlock()
	at.proc.Stop(berth.CauseReadiness, fmt.Sprintf("not ready (%s): %s", st.Class, st.Reason))
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

// failureClass returns the class of the service's failed readiness check,
// or "", once its check has ended (it ends when the process does).
func (svc *serviceRun) failureClass() string {
	if svc == nil {
		return ""
	}
	if svc.watched != nil {
		<-svc.watched
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	return svc.class
}
