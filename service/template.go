// Package service describes long-running service jobs: templates (vLLM,
// Jupyter, user-defined ones) with their variables, and the readiness rules
// the agent applies while a service starts and runs.
//
// A template's command and env may hold {{NAME}} references. User variables
// (declared by the template or given in the job's vars) are substituted when
// the job is submitted (Expand); system variables ({{SERVICE_PORT}} and the
// others of Runtime) are filled on the worker when it starts (Render);
// {{SECRET:NAME}} references are left verbatim for the agent's secret
// expansion.
package service

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// Failure classes of a service that did not become or stay ready: the
// root package's (berth.Failure*), named for templates.
const (
	ClassWarmup        = berth.FailureWarmup
	ClassWorkloadFatal = berth.FailureWorkloadFatal
	ClassInfraFatal    = berth.FailureInfraFatal
	ClassStall         = berth.FailureStall
	ClassUnknown       = berth.FailureUnknown
)

// Probe kinds.
const (
	ProbeTCP  = "tcp"  // the port accepts a connection
	ProbeHTTP = "http" // GET Path answers Status
)

// Readiness defaults, applied by WithDefaults.
const (
	DefaultInfra        = 2 * time.Minute
	DefaultWarmup       = 20 * time.Minute
	DefaultStall        = 10 * time.Minute
	DefaultStatus       = 200
	DefaultLiveEvery    = 10 * time.Second
	DefaultLiveFailures = 3
)

// Probe is one check of a service's port. The zero Probe (Kind "") means no
// probe: the service counts as ready once its process has started.
type Probe struct {
	Kind   string `json:"kind,omitempty"`   // "tcp" or "http"
	Path   string `json:"path,omitempty"`   // http: the path to GET, starting with "/"
	Status int    `json:"status,omitempty"` // http: the expected status (default 200)
	// ModelIn, for http, is a model id that must appear among data[].id of
	// the response, an OpenAI /v1/models list. It may hold variables
	// ("{{MODEL_NAME}}"); see Template.ReadinessFor.
	ModelIn string `json:"model_in,omitempty"`
}

// FatalPattern classifies a failure from a line of the service's log: a line
// containing Substring (compared case-insensitively) ends the service with
// Class.
type FatalPattern struct {
	Substring string `json:"substring"`
	Class     string `json:"class"` // ClassWorkloadFatal or ClassInfraFatal
}

// Readiness is how the agent decides that a service is up, still warming up,
// stuck, or dead. Zero fields take the defaults of WithDefaults.
type Readiness struct {
	Probe  Probe          `json:"probe,omitzero"`
	Infra  berth.Duration `json:"infra,omitempty"`  // budget for process started + port bound
	Warmup berth.Duration `json:"warmup,omitempty"` // budget for initialisation after the port is bound
	Stall  berth.Duration `json:"stall,omitempty"`  // no progress for this long during warm-up: failed, ClassStall
	// Markers are log substrings that count as progress, in the order they
	// normally appear.
	Markers []string       `json:"markers,omitempty"`
	Fatal   []FatalPattern `json:"fatal,omitempty"`
	// Liveness is probed every LiveEvery once the service is ready; after
	// LiveFailures consecutive failures it is no longer ready. Its default
	// is Probe without the ModelIn content check.
	Liveness     Probe          `json:"liveness,omitzero"`
	LiveEvery    berth.Duration `json:"live_every,omitempty"`
	LiveFailures int            `json:"live_failures,omitempty"`
}

// WithDefaults returns a copy of r with every zero budget, status and
// liveness setting replaced by its default. A Probe of Kind "" stays "" (no
// probe). Markers and Fatal are shared with r, not copied. It never fails.
func (r Readiness) WithDefaults() Readiness {
	def := func(d *berth.Duration, v time.Duration) {
		if *d == 0 {
			*d = berth.Duration(v)
		}
	}
	def(&r.Infra, DefaultInfra)
	def(&r.Warmup, DefaultWarmup)
	def(&r.Stall, DefaultStall)
	def(&r.LiveEvery, DefaultLiveEvery)
	if r.LiveFailures == 0 {
		r.LiveFailures = DefaultLiveFailures
	}
	if r.Liveness.Kind == "" {
		r.Liveness = r.Probe
		r.Liveness.ModelIn = ""
	}
	for _, p := range []*Probe{&r.Probe, &r.Liveness} {
		if p.Kind == ProbeHTTP && p.Status == 0 {
			p.Status = DefaultStatus
		}
	}
	return r
}

// Var is a user variable a template declares.
type Var struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Default     string `json:"default,omitempty"`
	Required    bool   `json:"required,omitempty"` // the job must give a non-empty value
	// Args makes the value a list of arguments: a command argument that is
	// exactly {{NAME}} becomes the value's whitespace-separated fields, none
	// when it is empty.
	Args bool `json:"args,omitempty"`
}

// Template describes how to run a kind of service.
type Template struct {
	Name        string            `json:"name"`
	Description string            `json:"description,omitempty"`
	Command     berth.Argv        `json:"command"`
	Env         map[string]string `json:"env,omitempty"`
	// Port says the service needs a port: {{SERVICE_PORT}}, allocated on
	// the worker, must appear in Command or Env.
	Port      bool      `json:"port,omitempty"`
	Vars      []Var     `json:"vars,omitempty"`
	Readiness Readiness `json:"readiness,omitzero"`
}

// lookup returns the declared variable called name, or nil.
func (t *Template) lookup(name string) *Var {
	for i := range t.Vars {
		if t.Vars[i].Name == name {
			return &t.Vars[i]
		}
	}
	return nil
}

// ReadinessFor returns the template's readiness for a job with the given
// vars: defaults applied, a missing probe made "tcp" when the template has a
// port, and user variables (vars over declared defaults) substituted in the
// probes' Path and ModelIn. System variables are left for Render. It never
// fails.
func (t *Template) ReadinessFor(vars map[string]string) Readiness {
	r := t.Readiness
	if r.Probe.Kind == "" && t.Port {
		r.Probe.Kind = ProbeTCP
	}
	r = r.WithDefaults()
	values := t.values(vars)
	for _, p := range []*Probe{&r.Probe, &r.Liveness} {
		p.Path = substitute(p.Path, values)
		p.ModelIn = substitute(p.ModelIn, values)
	}
	return r
}

// values returns the declared defaults overlaid with vars.
func (t *Template) values(vars map[string]string) map[string]string {
	values := make(map[string]string, len(t.Vars)+len(vars))
	for _, v := range t.Vars {
		values[v.Name] = v.Default
	}
	for k, v := range vars {
		values[k] = v
	}
	return values
}

func (t *Template) declared() string {
	if len(t.Vars) == 0 {
		return "no variables"
	}
	names := make([]string, len(t.Vars))
	for i, v := range t.Vars {
		names[i] = v.Name
	}
	return strings.Join(names, ", ")
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks t and returns an ECodeInvalid *berth.Error naming the
// first field that breaks a rule: the name, an empty command, an env name,
// a variable (syntax, duplicate, a system variable's name, required with a
// default), a {{NAME}} that is neither declared nor a system variable, Port
// disagreeing with the use of {{SERVICE_PORT}}, or a readiness setting.
func (t *Template) Validate() error {
	if !berth.ValidName(t.Name) {
		return berth.Invalidf("name", "%q must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", t.Name)
	}
	if len(t.Command) == 0 || t.Command[0] == "" {
		return berth.Invalidf("command", "must not be empty")
	}
	for _, k := range sortedKeys(t.Env) {
		if !envNameRE.MatchString(k) {
			return berth.Invalidf("env", "%q is not a valid variable name", k)
		}
	}
	for i, v := range t.Vars {
		field := "vars." + v.Name
		switch {
		case !varNameRE.MatchString(v.Name):
			return berth.Invalidf(fmt.Sprintf("vars[%d].name", i), "%q must be letters, digits and underscores, not starting with a digit", v.Name)
		case t.lookup(v.Name) != &t.Vars[i]:
			return berth.Invalidf(field, "is declared twice")
		case workerVars[v.Name]:
			return berth.Invalidf(field, "{{%s}} is a system variable, set on the worker at run time", v.Name)
		case v.Required && v.Default != "":
			return berth.Invalidf(field, "a required variable cannot have a default")
		}
	}
	known := func(name string) bool { return t.lookup(name) != nil || systemVars[name] }
	if err := checkRefs(t.Command, t.Env, known, func(ref, where string) error {
		return berth.Invalidf(where, "unknown variable %s: declare it under vars or use a system variable (%s)", ref, systemVarList)
	}); err != nil {
		return err
	}
	for _, p := range []struct {
		field string
		probe Probe
	}{{"readiness.probe", t.Readiness.Probe}, {"readiness.liveness", t.Readiness.Liveness}} {
		for _, ref := range refs(p.probe.Path + p.probe.ModelIn) {
			if !known(ref) {
				return berth.Invalidf(p.field, "unknown variable {{%s}}: declare it under vars", ref)
			}
		}
	}
	uses := usesPort(t.Command, t.Env)
	if uses && !t.Port {
		return berth.Invalidf("port", "must be true: the command or env uses {{SERVICE_PORT}}")
	}
	if t.Port && !uses {
		return berth.Invalidf("port", "is true but neither command nor env uses {{SERVICE_PORT}}, the port allocated on the worker")
	}
	return t.Readiness.validate(t.Port)
}

func (r *Readiness) validate(port bool) error {
	if err := r.Probe.validate("readiness.probe"); err != nil {
		return err
	}
	if err := r.Liveness.validate("readiness.liveness"); err != nil {
		return err
	}
	if !port && (r.Probe.Kind != "" || r.Liveness.Kind != "") {
		return berth.Invalidf("readiness.probe.kind", "a probe needs port: true")
	}
	for _, d := range []struct {
		field string
		d     berth.Duration
	}{{"readiness.infra", r.Infra}, {"readiness.warmup", r.Warmup}, {"readiness.stall", r.Stall}, {"readiness.live_every", r.LiveEvery}} {
		if d.d < 0 {
			return berth.Invalidf(d.field, "must not be negative")
		}
	}
	if r.LiveFailures < 0 {
		return berth.Invalidf("readiness.live_failures", "must not be negative")
	}
	for i, m := range r.Markers {
		if strings.TrimSpace(m) == "" {
			return berth.Invalidf(fmt.Sprintf("readiness.markers[%d]", i), "must not be empty")
		}
	}
	for i, f := range r.Fatal {
		if strings.TrimSpace(f.Substring) == "" {
			return berth.Invalidf(fmt.Sprintf("readiness.fatal[%d].substring", i), "must not be empty")
		}
		if f.Class != ClassWorkloadFatal && f.Class != ClassInfraFatal {
			return berth.Invalidf(fmt.Sprintf("readiness.fatal[%d].class", i), "%q must be %q or %q", f.Class, ClassWorkloadFatal, ClassInfraFatal)
		}
	}
	return nil
}

func (p *Probe) validate(field string) error {
	switch p.Kind {
	case "":
		if *p != (Probe{}) {
			return berth.Invalidf(field+".kind", "is required when the probe has other settings (%q or %q)", ProbeTCP, ProbeHTTP)
		}
	case ProbeTCP:
		if p.Path != "" || p.Status != 0 || p.ModelIn != "" {
			return berth.Invalidf(field+".kind", "a tcp probe takes no path, status or model_in")
		}
	case ProbeHTTP:
		if !strings.HasPrefix(p.Path, "/") {
			return berth.Invalidf(field+".path", "must start with /")
		}
		if p.Status != 0 && (p.Status < 100 || p.Status > 599) {
			return berth.Invalidf(field+".status", "must be an HTTP status between 100 and 599")
		}
	default:
		return berth.Invalidf(field+".kind", "%q must be %q or %q", p.Kind, ProbeTCP, ProbeHTTP)
	}
	return nil
}
