package controller

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/wire"
)

// ServiceResolver says how an agent runs a service job's attempts: its
// port, model and readiness check (from the job's template).
type ServiceResolver interface {
	// Service returns the service spec of j, a service job.
	Service(j *berth.Job) *wire.Service
}

// onServiceStatus records a service attempt's readiness phase, lists or
// withdraws its endpoint, and publishes the change.
func (c *Controller) onServiceStatus(s *session, m *wire.ServiceStatus) {
	as := c.attemptOf(s, m.AttemptID)
	if as == nil {
		return // fenced
	}
	switch m.Phase {
	case berth.PhaseStarting, berth.PhaseWarming, berth.PhaseReady, berth.PhaseUnready, berth.PhaseFailed:
	default:
		c.protocolError(s, "service_status phase %q", m.Phase)
		return
	}
	if m.Port < 0 || m.Port > 65535 {
		c.protocolError(s, "service_status port %d", m.Port)
		return
	}
	as.marker = m.Marker
	a, now := as.a, c.now().UTC()
	if a.Phase == m.Phase && a.ServicePort == m.Port {
		return
	}
	a.Phase, a.ServicePort = m.Phase, m.Port
	if m.Phase == berth.PhaseFailed {
		a.FailureClass = m.Class
	}
	ev := berth.Event{Time: now, JobID: a.JobID, WorkerID: a.WorkerID, Host: a.Host, Reason: m.Reason, Attempts: []string{a.ID}}
	switch m.Phase {
	case berth.PhaseReady:
		as.readySince, as.leaseUntil = now, now.Add(c.cfg.Lease)
		ev.Type = berth.EventServiceReady
	case berth.PhaseUnready:
		as.leaseUntil = time.Time{}
		ev.Type = berth.EventServiceUnready
	case berth.PhaseFailed:
		as.leaseUntil = time.Time{}
		ev.Type, ev.Reason = berth.EventServiceFailed, m.Class+": "+m.Reason
	}
	c.write(&store.Batch{Attempts: []*berth.Attempt{as.copy()}})
	if ev.Type != "" {
		c.emit(ev)
	}
}

// renewEndpoints extends the leases of the ready services of a worker just
// heard from. Loop only.
func (c *Controller) renewEndpoints(ws *workerState, now time.Time) {
	for _, as := range ws.attempts {
		if as.a.Phase == berth.PhaseReady {
			as.leaseUntil = now.Add(c.cfg.Lease)
		}
	}
}

// Endpoints returns the endpoints of the ready services whose lease runs
// and that are not being stopped: each where a service attempt serves,
// newest first.
func (c *Controller) Endpoints(ctx context.Context) ([]*berth.Endpoint, error) {
	var out []*berth.Endpoint
	err := c.do(ctx, func() {
		now := c.now()
		for _, as := range c.attempts {
			if as.a.Phase != berth.PhaseReady || as.a.ServicePort == 0 || !as.leaseUntil.After(now) || as.stopReason() != "" {
				continue
			}
			j := as.job.view()
			addr := as.worker.w.Address()
			out = append(out, &berth.Endpoint{JobID: as.job.id, Name: j.Name, User: j.User, AttemptID: as.a.ID,
				Host: as.a.Host, Address: addr, Port: as.a.ServicePort,
				URL:   "http://" + net.JoinHostPort(addr, strconv.Itoa(as.a.ServicePort)),
				Model: serviceModel(j), ReadySince: as.readySince, LeaseUntil: as.leaseUntil.UTC()})
		}
	})
	slices.SortFunc(out, func(a, b *berth.Endpoint) int { return b.ReadySince.Compare(a.ReadySince) })
	return out, err
}

// serviceModel is the model a service serves: its model, or its template's
// MODEL_NAME.
func serviceModel(j *berth.Job) string {
	if j.Model != "" {
		return j.Model
	}
	return j.Vars["MODEL_NAME"]
}

// Services returns the active service jobs, each with its current
// attempt's host, port and readiness phase, by job id.
func (c *Controller) Services(ctx context.Context) ([]*berth.Service, error) {
	var out []*berth.Service
	err := c.do(ctx, func() {
		for _, js := range c.services {
			j := js.clone()
			svc := &berth.Service{Job: *j}
			js.active(func(as *attemptState) {
				if as.a.TaskIndex == 0 {
					svc.AttemptID, svc.Host, svc.Port, svc.Phase, svc.Marker = as.a.ID, as.a.Host, as.a.ServicePort, as.a.Phase, as.marker
					svc.Stopping = as.stopReason() != ""
					svc.Address = as.worker.w.Address()
				}
			})
			if at := js.restartAt(); !at.IsZero() {
				svc.RestartAt = at.UTC()
			}
			out = append(out, svc)
		}
	})
	slices.SortFunc(out, func(a, b *berth.Service) int { return strings.Compare(a.ID, b.ID) })
	return out, err
}
