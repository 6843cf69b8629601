package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// A service attempt (vLLM, Jupyter…) is watched by a Prober from start to
// ready and then for liveness (seed 004 §6–8). Its readiness has two
// windows: the infra window, until the workload shows it started (its port
// accepts connections, or it prints a first startup marker), and the
// warm-up window, until the readiness probe passes (for vLLM: /v1/models
// lists the expected model). Within warm-up only semantic progress (a new
// startup marker in the log) holds off the stall verdict; raw log growth
// does not. Fatal log lines fail it at once with their class.

// Phases of a service attempt, ServiceStatus.Phase.
const (
	ServiceStarting = berth.PhaseStarting // the process runs; no sign of the workload yet
	ServiceWarming  = berth.PhaseWarming  // the workload started; the readiness probe does not pass yet
	ServiceReady    = berth.PhaseReady    // the readiness probe passed; liveness probes pass
	ServiceUnready  = berth.PhaseUnready  // was ready; LiveFailures liveness probes in a row failed
	ServiceFailed   = berth.PhaseFailed   // will not become ready; Class says why
)

// Failure classes, ServiceStatus.Class and FatalPattern.Class.
const (
	FailWarmup        = berth.FailureWarmup        // the warm-up budget ended before the probe passed
	FailWorkloadFatal = berth.FailureWorkloadFatal // the workload cannot run (out of memory, bad image…): not the host's fault
	FailInfraFatal    = berth.FailureInfraFatal    // the host or its setup is at fault
	FailStall         = berth.FailureStall         // no semantic progress for the stall budget
	FailUnknown       = berth.FailureUnknown       // the process exited with no known cause
	FailCannotStart   = berth.FailureCannotStart   // its program could not be started (exit 126 or 127)
)

// Defaults of ReadinessSpec and ProberConfig fields left zero.
const (
	DefaultLiveEvery     = 10 * time.Second
	DefaultLiveFailures  = 3
	DefaultProbeInterval = 250 * time.Millisecond
	DefaultProbeTimeout  = 5 * time.Second
)

// ProbeSpec, FatalPattern and ReadinessSpec are the wire's: how the
// server says a service attempt becomes and stays ready (see wire.Readiness:
// a probe Kind "" is "http" when Path is set, else "tcp"; an http Path ""
// is "/", Status 0 is 200; zero budgets are none; a zero Liveness is
// Probe; without Markers there is no stall verdict).
type (
	ProbeSpec     = wire.Probe
	FatalPattern  = wire.FatalPattern
	ReadinessSpec = wire.Readiness
)

// ServiceStatus is where a service attempt stands.
type ServiceStatus struct {
	Phase  string // ServiceStarting, ServiceWarming, ServiceReady, ServiceUnready or ServiceFailed
	Class  string // the failure class when failed
	Reason string // what the prober last saw, or why it failed
	Marker string // the last startup marker seen
}

// ProberConfig configures a Prober.
type ProberConfig struct {
	Spec ReadinessSpec
	// Host is the address the service listens on; empty: 127.0.0.1.
	Host string
	// Port is the service's port.
	Port int
	// LogPath is the attempt's combined output file, read as it grows; it
	// need not exist yet.
	LogPath string
	// Done is closed when the attempt's process has exited; nil: never.
	Done <-chan struct{}
	// Now is the clock the budgets are measured with; nil: time.Now.
	Now func() time.Time
	// Report is called, from Run's goroutine, with every new phase; nil:
	// nothing is called.
	Report func(ServiceStatus)
	// Interval is how often the port is probed and the log read until
	// ready; 0: DefaultProbeInterval.
	Interval time.Duration
	// ProbeTimeout bounds one probe; 0: DefaultProbeTimeout.
	ProbeTimeout time.Duration
}

// Prober watches one service attempt from start to ready, then for
// liveness, and reports its phases. Until the port accepts a connection or
// the log shows a first marker it is starting (Infra bounds that, failing
// infra_fatal); then warming until the readiness probe passes (Warmup
// bounds that, failing warmup; Stall bounds the time between new markers,
// failing stall); a fatal log line fails it at once. Once ready, LiveFailures
// failed liveness probes in a row make it unready, and a passing one ready
// again. Polling the port and the log is its event source. Status is safe
// for concurrent use; Run is called once.
type Prober struct {
	cfg       ProberConfig
	spec      ReadinessSpec
	addr      string
	markers   []string // lower case
	fatal     []FatalPattern
	client    *http.Client
	log       logTail
	seen      map[string]bool // markers seen, lower case
	fatalSeen *FatalPattern   // the first fatal pattern matched
	fatalLine string

	start        time.Time // Run began
	warmStart    time.Time // warming began
	lastProgress time.Time // last semantic progress in warm-up
	lastLive     time.Time // last liveness probe
	liveFails    int

	mu     sync.Mutex
	status ServiceStatus
}

// NewProber returns a Prober for cfg. It returns an error when the port is
// outside 1–65535, a probe kind is not "tcp" or "http", a duration is
// negative, LiveFailures is negative, a fatal pattern is empty or has no
// class, or a marker is empty.
func NewProber(cfg ProberConfig) (*Prober, error) {
	s := cfg.Spec
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, fmt.Errorf("prober: port %d is outside 1–65535", cfg.Port)
	}
	for name, d := range map[string]time.Duration{
		"infra": s.Infra, "warmup": s.Warmup, "stall": s.Stall, "live_every": s.LiveEvery,
		"interval": cfg.Interval, "probe_timeout": cfg.ProbeTimeout,
	} {
		if d < 0 {
			return nil, fmt.Errorf("prober: %s %v is negative", name, d)
		}
	}
	if s.LiveFailures < 0 {
		return nil, fmt.Errorf("prober: live_failures %d is negative", s.LiveFailures)
	}
	if s.Liveness == (ProbeSpec{}) {
		s.Liveness = s.Probe
	}
	for _, p := range []struct {
		name string
		spec *ProbeSpec
	}{{"probe", &s.Probe}, {"liveness", &s.Liveness}} {
		if err := normalizeProbe(p.spec); err != nil {
			return nil, fmt.Errorf("prober: %s: %w", p.name, err)
		}
	}
	if s.LiveEvery == 0 {
		s.LiveEvery = DefaultLiveEvery
	}
	if s.LiveFailures == 0 {
		s.LiveFailures = DefaultLiveFailures
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Report == nil {
		cfg.Report = func(ServiceStatus) {}
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultProbeInterval
	}
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	p := &Prober{
		cfg: cfg, spec: s,
		addr:   net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)),
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		log:    logTail{path: cfg.LogPath},
		seen:   map[string]bool{},
		status: ServiceStatus{Phase: ServiceStarting},
	}
	for _, m := range s.Markers {
		if strings.TrimSpace(m) == "" {
			return nil, errors.New("prober: a marker is empty")
		}
		p.markers = append(p.markers, strings.ToLower(m))
	}
	for _, f := range s.Fatal {
		if strings.TrimSpace(f.Substring) == "" || f.Class == "" {
			return nil, fmt.Errorf("prober: fatal pattern %q: needs a substring and a class", f.Substring)
		}
		p.fatal = append(p.fatal, FatalPattern{Substring: strings.ToLower(f.Substring), Class: f.Class})
	}
	return p, nil
}

func normalizeProbe(ps *ProbeSpec) error {
	if ps.Kind == "" {
		ps.Kind = "tcp"
		if ps.Path != "" {
			ps.Kind = "http"
		}
	}
	switch ps.Kind {
	case "tcp":
	case "http":
		if ps.Path == "" {
			ps.Path = "/"
		}
		if !strings.HasPrefix(ps.Path, "/") {
			return fmt.Errorf("path %q does not start with /", ps.Path)
		}
		if ps.Status == 0 {
			ps.Status = http.StatusOK
		}
		if ps.Status < 100 || ps.Status > 599 {
			return fmt.Errorf("status %d is not an HTTP status", ps.Status)
		}
	default:
		return fmt.Errorf("kind %q is not tcp or http", ps.Kind)
	}
	return nil
}

// Status returns where the service stands now, including the latest
// marker and reason, which Report is not called for. It is safe to call
// from any goroutine.
func (p *Prober) Status() ServiceStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Run watches the service until ctx ends or it fails, and returns its last
// status. It reports ServiceStarting first and then every phase change
// once. The process exiting (Done) fails it, with the class of a fatal log
// line if there is one, else unknown. Run is called once.
func (p *Prober) Run(ctx context.Context) ServiceStatus {
	defer p.client.CloseIdleConnections()
	p.start = p.cfg.Now()
	p.cfg.Report(p.Status())
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return p.Status()
		case <-p.cfg.Done:
			p.exited()
			return p.Status()
		case <-timer.C:
		}
		if p.step(ctx) {
			return p.Status()
		}
		if ph := p.Status().Phase; ph == ServiceReady || ph == ServiceUnready {
			timer.Reset(p.spec.LiveEvery)
		} else {
			timer.Reset(p.cfg.Interval)
		}
	}
}

// step reads the log and probes once, and reports whether the service
// failed.
func (p *Prober) step(ctx context.Context) bool {
	marker := p.readLog()
	now := p.cfg.Now()
	st := p.Status()
	if marker != "" {
		st.Marker = marker
		p.setMarker(marker)
	}
	switch st.Phase {
	case ServiceStarting, ServiceWarming:
		if p.fatalSeen != nil {
			p.fail(p.fatalSeen.Class, "fatal log line: "+p.fatalLine)
			return true
		}
	}
	switch st.Phase {
	case ServiceStarting:
		if marker == "" {
			if err := p.dial(ctx); err != nil {
				if p.spec.Infra > 0 && now.Sub(p.start) >= p.spec.Infra {
					p.fail(FailInfraFatal, fmt.Sprintf("port %d not bound within %s", p.cfg.Port, shortDuration(p.spec.Infra)))
					return true
				}
				p.setReason(fmt.Sprintf("port %d not bound yet", p.cfg.Port))
				return false
			}
		}
		p.warmStart, p.lastProgress = now, now
		p.set(ServiceStatus{Phase: ServiceWarming, Marker: st.Marker, Reason: "workload started"})
		return p.warm(ctx, now)
	case ServiceWarming:
		if marker != "" {
			p.lastProgress = now
		}
		return p.warm(ctx, now)
	case ServiceReady, ServiceUnready:
		if now.Sub(p.lastLive) < p.spec.LiveEvery {
			return false
		}
		p.lastLive = now
		r := p.probe(ctx, p.spec.Liveness)
		switch {
		case r.ok:
			p.liveFails = 0
			if st.Phase == ServiceUnready {
				p.set(ServiceStatus{Phase: ServiceReady, Marker: st.Marker, Reason: "liveness probe passes again"})
			}
		default:
			p.liveFails++
			reason := fmt.Sprintf("liveness probe failed %d times in a row: %s", p.liveFails, r.reason)
			if st.Phase == ServiceReady && p.liveFails >= p.spec.LiveFailures {
				p.set(ServiceStatus{Phase: ServiceUnready, Marker: st.Marker, Reason: reason})
			} else {
				p.setReason(reason)
			}
		}
	}
	return false
}

// warm probes a warming service once and reports whether it failed.
func (p *Prober) warm(ctx context.Context, now time.Time) bool {
	r := p.probe(ctx, p.spec.Probe)
	st := p.Status()
	if r.ok {
		select {
		case <-p.cfg.Done: // it exited while the probe ran (something else answered): never ready
			p.exited()
			return true
		default:
		}
		p.lastLive = now
		p.set(ServiceStatus{Phase: ServiceReady, Marker: st.Marker, Reason: "readiness probe passed"})
		return false
	}
	if r.answered {
		p.lastProgress = now
	}
	switch {
	case p.spec.Warmup > 0 && now.Sub(p.warmStart) >= p.spec.Warmup:
		p.fail(FailWarmup, fmt.Sprintf("not ready within %s of warm-up%s: %s", shortDuration(p.spec.Warmup), p.lastMarkerNote(), r.reason))
		return true
	case p.spec.Stall > 0 && len(p.markers) > 0 && now.Sub(p.lastProgress) >= p.spec.Stall:
		p.fail(FailStall, fmt.Sprintf("no startup progress for %s%s: %s", shortDuration(p.spec.Stall), p.lastMarkerNote(), r.reason))
		return true
	}
	p.setReason(r.reason)
	return false
}

func (p *Prober) lastMarkerNote() string {
	if m := p.Status().Marker; m != "" {
		return fmt.Sprintf(" (last marker %q)", m)
	}
	if len(p.markers) > 0 {
		return " (no startup marker seen)"
	}
	return ""
}

// exited fails the service after its process exited, unless it had failed
// already.
func (p *Prober) exited() {
	if p.Status().Phase == ServiceFailed {
		return
	}
	m := p.readLog()
	p.log.flush(func(line string) {
		if lm := p.scanLine(line); lm != "" {
			m = lm
		}
	})
	if m != "" {
		p.setMarker(m)
	}
	what := "process exited before ready"
	if ph := p.Status().Phase; ph == ServiceReady || ph == ServiceUnready {
		what = "process exited"
	}
	if p.fatalSeen != nil {
		p.fail(p.fatalSeen.Class, what+": "+p.fatalLine)
		return
	}
	p.fail(FailUnknown, what+p.lastMarkerNote())
}

func (p *Prober) set(st ServiceStatus) {
	p.mu.Lock()
	changed := st.Phase != p.status.Phase
	p.status = st
	p.mu.Unlock()
	if changed {
		p.cfg.Report(st)
	}
}

func (p *Prober) setReason(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status.Reason = reason
}

// setMarker records the last startup marker seen; a new one while the
// service warms is reported (the gateway names a warming model's phase
// after it: loading weights, KV cache, CUDA graphs).
func (p *Prober) setMarker(marker string) {
	p.mu.Lock()
	changed := p.status.Marker != marker
	p.status.Marker = marker
	st := p.status
	p.mu.Unlock()
	if changed && st.Phase == ServiceWarming {
		p.cfg.Report(st)
	}
}

func (p *Prober) fail(class, reason string) {
	p.set(ServiceStatus{Phase: ServiceFailed, Class: class, Reason: reason, Marker: p.Status().Marker})
}

// readLog reads what the log gained, and returns the last marker not seen
// before, if any. It records the first fatal line.
func (p *Prober) readLog() string {
	var marker string
	p.log.read(func(line string) {
		if m := p.scanLine(line); m != "" {
			marker = m
		}
	})
	return marker
}

// scanLine matches one log line (ANSI codes stripped) against the markers
// and fatal patterns; it returns the line's marker if it is one not seen
// before.
func (p *Prober) scanLine(line string) string {
	lower := strings.ToLower(line)
	if p.fatalSeen == nil {
		for i, f := range p.fatal {
			if strings.Contains(lower, f.Substring) {
				p.fatalSeen = &p.spec.Fatal[i]
				p.fatalLine = berth.Clip(strings.TrimSpace(line), 300)
				break
			}
		}
	}
	for i, m := range p.markers {
		if strings.Contains(lower, m) && !p.seen[m] {
			p.seen[m] = true
			return p.spec.Markers[i]
		}
	}
	return ""
}

// dial reports whether the service's port accepts a TCP connection.
func (p *Prober) dial(ctx context.Context) error {
	d := net.Dialer{Timeout: p.cfg.ProbeTimeout}
	c, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return err
	}
	_ = c.Close()
	return nil
}

// probeResult is the outcome of one probe.
type probeResult struct {
	ok       bool   // the probe passed
	answered bool   // an HTTP probe got the expected status (ok, or the model is missing)
	reason   string // why it did not pass
}

func (p *Prober) probe(ctx context.Context, ps ProbeSpec) probeResult {
	if ps.Kind == "tcp" {
		if err := p.dial(ctx); err != nil {
			return probeResult{reason: p.dialReason(err)}
		}
		return probeResult{ok: true}
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ProbeTimeout)
	defer cancel()
	url := "http://" + p.addr + ps.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return probeResult{reason: err.Error()}
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return probeResult{reason: "GET " + ps.Path + ": " + p.dialReason(err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != ps.Status {
		return probeResult{reason: fmt.Sprintf("GET %s: status %d, want %d%s", ps.Path, resp.StatusCode, ps.Status, bodyNote(body))}
	}
	if err != nil {
		return probeResult{reason: fmt.Sprintf("GET %s: reading the answer: %v", ps.Path, err)}
	}
	if ps.ModelIn == "" {
		return probeResult{ok: true, answered: true}
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return probeResult{answered: true, reason: fmt.Sprintf("GET %s: not a model list: %v", ps.Path, err)}
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID == ps.ModelIn {
			return probeResult{ok: true, answered: true}
		}
		ids = append(ids, strconv.Quote(m.ID))
	}
	if len(ids) > 10 {
		ids = append(ids[:10], "…")
	}
	return probeResult{answered: true, reason: fmt.Sprintf("GET %s: model %q not served; listed: [%s]", ps.Path, ps.ModelIn, strings.Join(ids, ", "))}
}

// dialReason says why connecting failed, briefly.
func (p *Prober) dialReason(err error) string {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Sprintf("port %d not bound yet", p.cfg.Port)
	}
	return err.Error()
}

func bodyNote(body []byte) string {
	b := strings.TrimSpace(string(body))
	if b == "" {
		return ""
	}
	return ": " + berth.Clip(b, 200)
}

// shortDuration writes d without zero trailing units: 2m, 1m30s, 500ms.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// maxLogLine is the longest log line kept whole; a longer one is matched
// in pieces of this size.
const maxLogLine = 64 << 10

// logTail reads a growing file line by line ('\n' or '\r' ends a line).
type logTail struct {
	path    string
	off     int64
	partial []byte
}

// read calls line for each complete line the file gained since the last
// read, ANSI codes stripped. A missing file has gained nothing; a file
// shorter than what was read (truncated) is read again from its start.
func (t *logTail) read(line func(string)) {
	if t.path == "" {
		return
	}
	f, err := os.Open(t.path)
	if err != nil {
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() < t.off {
		t.off, t.partial = 0, t.partial[:0]
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := f.ReadAt(buf, t.off)
		t.off += int64(n)
		data := buf[:n]
		for len(data) > 0 {
			end := bytes.IndexAny(data, "\r\n")
			if end < 0 {
				t.partial = append(t.partial, data...)
				if len(t.partial) >= maxLogLine {
					t.flush(line)
				}
				break
			}
			t.partial = append(t.partial, data[:end]...)
			t.flush(line)
			data = data[end+1:]
		}
		if err != nil || n == 0 {
			return
		}
	}
}

// flush passes the line read so far, if any, to line.
func (t *logTail) flush(line func(string)) {
	if len(t.partial) > 0 {
		line(berth.StripANSI(string(t.partial)))
	}
	t.partial = t.partial[:0]
}
