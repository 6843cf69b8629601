// Package web serves Berth's dashboard: server-rendered HTML pages over the
// controller and the store (overview, jobs, workers, services, schedules,
// events, audit), a sign-in page that keeps a token in a cookie, and a
// little embedded JavaScript that streams logs, calls the JSON API for
// actions and keeps each page live from the server-sent events. It runs
// behind api.Server, which authenticates every request but the sign-in
// page and the static files before passing it here.
package web

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/arbiter"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Store is what a dashboard reads from the store itself: the swap lock,
// the schedule registry and the worker controls; store.Store is one.
type Store interface {
	arbiter.LockStore
	arbiter.ScheduleStore
	store.ControlReader
}

// Config is what a dashboard reads and how.
type Config struct {
	// Ctl is the controller whose cluster the pages show.
	Ctl *controller.Controller
	// Store is Ctl's store, read for the swap lock, the schedule registry
	// and the worker controls.
	Store Store
	// CheckToken validates a token typed on the sign-in page
	// ((*auth.Ingress).CheckToken); nil: no token is accepted.
	CheckToken func(string) (auth.Identity, error)
	// AuditPath is the audit log's file, for the admins' audit page; "":
	// none.
	AuditPath string
	// Limiter, when set, bounds sign-in attempts per client address (under
	// the key the API uses for refused requests, "refused:" + address).
	Limiter *auth.Limiter
	// SampleEvery is how often the sampler records capacity and queue
	// depth for the overview's plots; 0: every 30 s.
	SampleEvery time.Duration
	// PeerStatuses is the federation peers' live status, for the peers
	// page; nil: every peer shows as new.
	PeerStatuses api.PeerStatuses
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Log gets the failures of the sampler and of rendering; nil: none.
	Log *slog.Logger
}

// DefaultSampleEvery is how often the sampler records when
// Config.SampleEvery is 0; the ring keeps SampleWindow of samples.
const (
	DefaultSampleEvery = 30 * time.Second
	SampleWindow       = 24 * time.Hour
)

// JobsPerPage is how many jobs a page of /jobs lists.
const JobsPerPage = 50

// Handler serves the dashboard (an http.Handler). It is safe for
// concurrent use.
type Handler struct {
	cfg     Config
	mux     *http.ServeMux
	pages   map[string]*template.Template
	login   *template.Template
	samples *ring

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns the dashboard for cfg. It panics if the embedded templates
// do not parse (a build defect, caught by the tests). Start its sampler
// with Start.
func New(cfg Config) *Handler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), samples: newRing(int(SampleWindow / cfg.SampleEvery))}
	h.parseTemplates()
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	files := http.StripPrefix(api.StaticPath, http.FileServerFS(static))
	h.mux.Handle("GET "+api.StaticPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache") // revalidated: the binary's build may change them
		files.ServeHTTP(w, r)
	}))
	h.mux.HandleFunc("GET "+api.LoginPath, h.loginForm)
	h.mux.HandleFunc("POST "+api.LoginPath, h.loginSubmit)
	h.mux.HandleFunc("POST /logout", h.logout)
	h.mux.HandleFunc("GET /{$}", h.page("overview", "Overview", auth.Identity.IsPerson, h.overview))
	h.mux.HandleFunc("GET /jobs", h.page("jobs", "Jobs", auth.Identity.IsPerson, h.jobs))
	h.mux.HandleFunc("GET /jobs/{id}", h.page("job", "Jobs", auth.Identity.IsPerson, h.job))
	h.mux.HandleFunc("GET /workers", h.page("workers", "Workers", auth.Identity.IsPerson, h.workers))
	h.mux.HandleFunc("GET /services", h.page("services", "Services", auth.Identity.IsPerson, h.services))
	h.mux.HandleFunc("GET /schedules", h.page("schedules", "Schedules", auth.Identity.IsPerson, h.schedules))
	h.mux.HandleFunc("GET /events", h.page("events", "Events", auth.Identity.IsPerson, h.events))
	h.mux.HandleFunc("GET /audit", h.page("audit", "Audit", auth.Identity.IsAdmin, h.audit))
	h.mux.HandleFunc("GET /peers", h.page("peers", "Peers", auth.Identity.IsAdmin, h.peers))
	h.mux.HandleFunc("/", h.page("error", "", auth.Identity.IsPerson, func(r *http.Request) (string, any, error) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return "", nil, berth.Errorf(berth.ECodeNotFound, "no such page: %s %s (the dashboard's pages are read with GET; actions go through /api/)", r.Method, r.URL.Path)
		}
		return "", nil, berth.Errorf(berth.ECodeNotFound, "no such page: %s", r.URL.Path)
	}))
	return h
}

// ServeHTTP serves a dashboard page, the sign-in page or a static file,
// with headers that keep the pages from being framed or running scripts
// from anywhere but /static/.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

// Start starts the sampler: it records the cluster's busy GPUs, capacity,
// queue depth and finished jobs now and every SampleEvery until ctx ends
// or Stop. Starting a started Handler does nothing.
func (h *Handler) Start(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		return
	}
	ctx, h.cancel = context.WithCancel(ctx)
	done := make(chan struct{})
	h.done = done
	go func() {
		defer close(done)
		t := time.NewTicker(h.cfg.SampleEvery)
		defer t.Stop()
		for {
			if err := h.sample(ctx); err != nil && ctx.Err() == nil {
				h.cfg.Log.Warn("dashboard sampler", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop stops the sampler and waits for it to end; it does nothing when
// the sampler is not running.
func (h *Handler) Stop() {
	h.mu.Lock()
	cancel, done := h.cancel, h.done
	h.cancel, h.done = nil, nil
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// eventTypes are the server-sent events a page listens for (EventSource
// needs each named); the pages also refresh on a timer for anything else.
var eventTypes = []string{
	berth.EventJobSubmitted, berth.EventJobRunning, berth.EventJobRequeued,
	berth.EventJobPreempted, berth.EventJobSucceeded, berth.EventJobFailed,
	berth.EventJobCancelled, berth.EventQuotaExceeded, berth.EventQuotaSet,
	berth.EventQuotaDeleted, berth.EventWorkerRegistered, berth.EventWorkerLost,
	berth.EventWorkerDisconnects, berth.EventWorkerControl, berth.EventServiceReady,
	berth.EventServiceUnready, berth.EventServiceFailed, berth.EventPeerSet, berth.EventPeerDeleted, "missed",
}

// view is what the layout renders around a page's main section.
type view struct {
	Title      string
	Nav        string // the navigation entry of the page
	Who        auth.Identity
	SignedIn   bool // by the sign-in cookie: sign-out is offered
	Operator   bool // acts on every job, worker and the swap lock
	Admin      bool
	SeesAll    bool // sees every user's jobs
	Lock       berth.SwapLockState
	LockError  string
	Error      string // the page failed: why
	Status     int
	EventTypes string
	After      string // the events page: replay events after this seq
	Data       any
}

// navEntry is one link of the navigation.
type navEntry struct{ Name, Href string }

// nav lists the navigation for who.
func nav(who auth.Identity) []navEntry {
	out := []navEntry{{"Overview", "/"}, {"Jobs", "/jobs"}, {"Workers", "/workers"}, {"Services", "/services"},
		{"Schedules", "/schedules"}, {"Events", "/events"}}
	if who.IsAdmin() {
		out = append(out, navEntry{"Audit", "/audit"}, navEntry{"Peers", "/peers"})
	}
	return out
}

// page returns the handler of a page: it checks who may see it (403
// otherwise), reads the swap lock for the banner, calls fn for the page's
// data and renders the page — or, with ?fragment=main, only the inner
// HTML of its <main>, for the live refresh. fn's errors render as an
// error page with the status of their code; fn may set the title.
func (h *Handler) page(name, navName string, allow func(auth.Identity) bool, fn func(r *http.Request) (title string, data any, err error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who := api.IdentityOf(r)
		v := &view{Title: navName, Nav: navName, Who: who, SignedIn: who.Via == auth.ViaToken, Operator: who.ActsOnAllJobs(),
			Admin: who.IsAdmin(), SeesAll: who.SeesAllJobs(), EventTypes: strings.Join(eventTypes, " "), Status: http.StatusOK}
		var err error
		if !allow(who) {
			need := "a person's role (viewer, user, operator or admin)"
			if who.IsPerson() {
				need = "the admin role"
			}
			err = berth.Errorf(berth.ECodeForbidden, "%s (role %s) may not see %s: that needs %s", who.Name, who.Role, r.URL.Path, need)
		} else {
			var title string
			title, v.Data, err = fn(r)
			if title != "" {
				v.Title = title
			}
		}
		tpl := h.pages[name]
		if err != nil {
			pub := api.PublicError(r, err) // logs an internal error with the request id
			v.Status = api.Status(pub.Code)
			v.Error = pub.Error()
			v.Title = http.StatusText(v.Status)
			tpl = h.pages["error"]
		}
		if who.IsPerson() {
			lock := arbiter.NewLock(h.cfg.Store)
			lock.Now = h.cfg.Now
			if v.Lock, err = lock.Status(r.Context()); err != nil {
				v.LockError = api.PublicError(r, err).Text() // a store failure is logged, not shown
			}
		}
		h.render(w, r, tpl, v)
	}
}

// render writes v through tpl: the whole page, or with ?fragment=main the
// "main" template only.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, tpl *template.Template, v *view) {
	entry := "layout"
	if r.URL.Query().Get("fragment") == "main" {
		entry = "main"
	}
	h.write(w, r, tpl, entry, v, v.Status)
}

// write renders template entry of tpl with v and, once it rendered
// whole, sends it with status. A failed render is a 500 that names only
// the request; its cause is logged with the request id.
func (h *Handler) write(w http.ResponseWriter, r *http.Request, tpl *template.Template, entry string, v any, status int) {
	var buf strings.Builder
	if err := tpl.ExecuteTemplate(&buf, entry, v); err != nil {
		pub := api.PublicError(r, fmt.Errorf("render dashboard page %s: %w", entry, err))
		http.Error(w, pub.Message, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(buf.String()))
}

// parseTemplates parses the layout with each page.
func (h *Handler) parseTemplates() {
	base := template.Must(template.New("").Funcs(h.funcs()).ParseFS(templateFS, "templates/layout.html"))
	h.pages = map[string]*template.Template{}
	for _, name := range []string{"overview", "jobs", "job", "workers", "services", "schedules", "events", "audit", "peers", "error"} {
		h.pages[name] = template.Must(template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html"))
	}
	h.login = template.Must(template.New("").Funcs(h.funcs()).ParseFS(templateFS, "templates/login.html"))
}

// funcs are the templates' helpers.
func (h *Handler) funcs() template.FuncMap {
	return template.FuncMap{
		"nav":   nav,
		"ts":    formatTime,
		"iso":   func(t time.Time) string { return isoTime(t) },
		"ago":   func(t time.Time) string { return ago(h.cfg.Now(), t) },
		"since": func(t time.Time) string { return formatDuration(h.cfg.Now().Sub(t)) },
		"ran":   func(a *berth.Attempt) string { return durationOf(a, h.cfg.Now()) },
		"bdur":  func(d berth.Duration) string { return time.Duration(d).String() },
		"secs":  func(n int64) string { return formatDuration(time.Duration(n) * time.Second) },
		"exit": func(p *int) string {
			if p == nil {
				return ""
			}
			return fmt.Sprint(*p)
		},
		"join":  strings.Join,
		"cmd":   commandLine,
		"gpus":  gpuSummary,
		"load":  gpuLoad,
		"ints":  formatInts,
		"until": func(t time.Time) string { return until(h.cfg.Now(), t) },
		"dur":   func(d berth.Duration) string { return formatDuration(time.Duration(d)) },
	}
}

// formatTime is t in UTC to the second, "" for the zero time.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// isoTime is t as RFC 3339 for a <time datetime>, "" for the zero time.
func isoTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// ago says how long before now t was ("3m 20s ago"); "" for the zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + formatDuration(-d)
	}
	return formatDuration(d) + " ago"
}

// until says how long after now t is ("in 5m"); "" for the zero time.
func until(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := t.Sub(now)
	if d < 0 {
		return formatDuration(-d) + " ago"
	}
	return "in " + formatDuration(d)
}

// formatDuration is d to the second in at most two units, leaving out a
// second unit of zero: "45s", "3m 20s", "10m", "2h 5m", "6h", "3d 4h".
func formatDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d < 0 {
		d = -d
	}
	s := int64(d / time.Second)
	two := func(a int64, au string, b int64, bu string) string {
		if b == 0 {
			return fmt.Sprintf("%d%s", a, au)
		}
		return fmt.Sprintf("%d%s %d%s", a, au, b, bu)
	}
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return two(s/60, "m", s%60, "s")
	case s < 86400:
		return two(s/3600, "h", s%3600/60, "m")
	}
	return two(s/86400, "d", s%86400/3600, "h")
}

// commandLine shows a command as typed: a shell command's script, or the
// arguments with those that need it quoted.
func commandLine(argv berth.Argv) string {
	if len(argv) == 3 && argv[0] == "sh" && argv[1] == "-c" {
		return argv[2]
	}
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = a
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`;&|<>()*?[]{}#~") {
			parts[i] = strconv.Quote(a)
		}
	}
	return strings.Join(parts, " ")
}

// gpuSummary groups a worker's GPUs by model and memory: "4× H100 80GiB".
// gpuLoad says each GPU's utilization and memory in use, as its agent
// last read them: "GPU 0: 57%, 1GiB used; GPU 1: 3%, 0 used".
func gpuLoad(stats []berth.GPUStat) string {
	parts := make([]string, len(stats))
	for i, s := range stats {
		parts[i] = fmt.Sprintf("GPU %d: %d%%, %s used", s.Index, s.Utilization, s.MemoryUsed)
	}
	return strings.Join(parts, "; ")
}

func gpuSummary(gpus []berth.GPU) string {
	if len(gpus) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range berth.GPUKinds(gpus) {
		parts = append(parts, fmt.Sprintf("%d× %s %s", k.Count, k.Model, k.Memory))
	}
	return strings.Join(parts, ", ")
}

// formatInts is a list of GPU indexes: "0,1,3".
func formatInts(list []int) string {
	parts := make([]string, len(list))
	for i, n := range list {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, ",")
}
