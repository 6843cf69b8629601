package service

import (
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// Catalog is a server's templates (the built-ins and those of its
// --templates directory): it expands submissions and tells agents how to
// run services (the controller's Expand and ServiceResolver).
type Catalog struct {
	Templates map[string]*Template
}

// Expand fills spec from its template and checks its variables; see the
// package function Expand. Its errors are ECodeInvalid.
func (c *Catalog) Expand(spec *berth.JobSpec) error { return Expand(spec, c.Templates) }

// Service returns how an agent runs j, a service job: whether it needs a
// port, its model and its readiness check — its template's, or, without a
// template, a TCP probe of its port when it has one, or none.
func (c *Catalog) Service(j *berth.Job) *wire.Service {
	svc := &wire.Service{NeedsPort: NeedsPort(&j.JobSpec), Model: j.Model}
	if svc.Model == "" {
		svc.Model = j.Vars["MODEL_NAME"]
	}
	var r Readiness
	switch t := c.Templates[j.Template]; {
	case t != nil:
		svc.NeedsPort = svc.NeedsPort || t.Port
		r = t.ReadinessFor(j.Vars)
	case svc.NeedsPort:
		r = Readiness{Probe: Probe{Kind: ProbeTCP}}.WithDefaults()
	default:
		return svc
	}
	svc.Readiness = &wire.Readiness{Probe: wireProbe(r.Probe), Liveness: wireProbe(r.Liveness),
		Infra: time.Duration(r.Infra), Warmup: time.Duration(r.Warmup), Stall: time.Duration(r.Stall),
		Markers: r.Markers, LiveEvery: time.Duration(r.LiveEvery), LiveFailures: r.LiveFailures}
	for _, f := range r.Fatal {
		svc.Readiness.Fatal = append(svc.Readiness.Fatal, wire.FatalPattern{Substring: f.Substring, Class: f.Class})
	}
	return svc
}

func wireProbe(p Probe) wire.Probe {
	return wire.Probe{Kind: p.Kind, Path: p.Path, Status: p.Status, ModelIn: p.ModelIn}
}
