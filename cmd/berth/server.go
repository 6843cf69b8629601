package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/arbiter"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/contract"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/federation"
	"github.com/berth-dev/berth/gateway"
	"github.com/berth-dev/berth/internal/dirlock"
	"github.com/berth-dev/berth/kube"
	"github.com/berth-dev/berth/postgres"
	"github.com/berth-dev/berth/provision"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/service"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/web"
	"github.com/berth-dev/berth/webhook"
)

// serverConfig is what starting a server needs.
type serverConfig struct {
	DataDir       string
	Listen        string
	Store         string // "" or sqlite path / sqlite:// URL
	Security      securityConfig
	Templates     string // directory of user service templates; "": the built-ins only
	Contracts     string // directory of extraction contracts (*.yaml); "": those stored through the API only
	Catalog       string // the model catalog file of the GPU arbiter; "": none
	SwapWebhook   string // URL told of every real swap (seed 000)
	WebhookSecret string // signs the swap webhook's body; "": unsigned
	Lease         time.Duration
	Heartbeat     time.Duration
	AcceptTimeout time.Duration
	Grace         time.Duration // SIGTERM → SIGKILL when an attempt is stopped
	ControlPoll   time.Duration // how often worker controls are read back from the store
	Advertise     string        // URL other servers, clients and agents reach this one at; default http://LISTEN
	// OnStandby, when set, is called once the server listens as a standby
	// waiting to lead (stores several servers share).
	OnStandby    func(url string)
	Policy       string        // scheduling policy name
	ReserveAfter time.Duration // a blocked job waiting this long reserves workers
	PreemptAfter time.Duration // minimum runtime before an attempt may be preempted
	Log          *slog.Logger

	// PeerUsers maps a federation origin to the user its jobs run as here
	// (--peer-user); ChangelogRetention is how long changes are kept for
	// origins that have not pulled them (--federation-changelog-retention).
	PeerUsers          map[string]string
	ChangelogRetention time.Duration
	// FederationTick is how often the federation manager visits each
	// peer (--federation-tick).
	FederationTick time.Duration
	// PoolScaleAfter is how long jobs wait before a cloud pool rents for
	// them (--pool-scale-after); PoolDryRun only says what the pools
	// would rent and give back (--pool-dry-run).
	PoolScaleAfter time.Duration
	PoolDryRun     bool
	// PoolTick is how often the autoscaler looks at the pools
	// (--pool-tick); PoolPoll how often a readiness phase checks again
	// (--pool-poll); PoolReconcile how often the live instances are
	// compared with the provider's listing (--pool-reconcile);
	// PoolReadyBudget how long a rented instance's agent may take to
	// register (--pool-ready-budget). Zero: the default.
	PoolTick, PoolPoll, PoolReconcile, PoolReadyBudget time.Duration
	// BackendKinds builds the execution backends berth backend add adds,
	// by kind; nil: builtinBackendKinds.
	BackendKinds map[string]controller.BackendFactory
	// KubePending is how long a Kubernetes backend's pod may stay
	// pending for a reason it gives up on (--kube-pending-timeout); zero:
	// kube.DefaultDeadlines.
	KubePending time.Duration
}

// builtinBackendKinds are the kinds of execution backend this build can
// run (docs/kubernetes.md).
var builtinBackendKinds = map[string]controller.BackendFactory{berth.BackendKindKubernetes: kube.New}

// kubeWithPending is the Kubernetes kind whose pods may stay pending for
// d for any reason it gives up on.
func kubeWithPending(d time.Duration) controller.BackendFactory {
	return func(spec berth.BackendSpec, host controller.BackendHost) (controller.Backend, error) {
		return kube.NewWith(spec, host, kube.Options{Deadlines: kube.Deadlines{Unschedulable: d, ImagePull: d, Config: d}})
	}
}

func (m *Main) addServerFlags(fs *flag.FlagSet, cfg *serverConfig) {
	fs.StringVar(&cfg.DataDir, "data-dir", ".berth", "directory for the embedded store, keys, audit log and local agents")
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:7070", "address to serve on; beyond loopback, clients need a token or an --allow rule")
	addSecurityFlags(fs, &cfg.Security)
	fs.StringVar(&cfg.Catalog, "catalog", "", "the GPU arbiter's model catalog file (YAML: pools by labels, models by key); changes made\nthrough the API are written back to it (without it the catalog starts empty and lives in memory)")
	fs.StringVar(&cfg.SwapWebhook, "swap-webhook", "", "URL POSTed swap_complete or swap_failed after every real swap")
	fs.StringVar(&cfg.WebhookSecret, "swap-webhook-secret", m.Getenv("BERTH_SWAP_WEBHOOK_SECRET"), "signs the swap webhook's body (X-Spark-Signature) (default $BERTH_SWAP_WEBHOOK_SECRET)")
	fs.StringVar(&cfg.Templates, "templates", "", "directory of service templates (*.yaml), besides the built-in vllm, jupyterlab and notebook")
	fs.StringVar(&cfg.Contracts, "contracts", "", "directory of extraction contracts (*.yaml, docs/contracts.md), served at POST /v1/contracts/NAME\nbesides those stored through the API")
	durationVar(fs, &cfg.Lease, "lease", 30*time.Second, "how long (a `duration`) an agent may be unheard before it self-fences and its attempts are lost")
	durationVar(fs, &cfg.Heartbeat, "heartbeat", 5*time.Second, "agent heartbeat interval (a `duration`)")
	durationVar(fs, &cfg.AcceptTimeout, "accept-timeout", 30*time.Second, "how long (a `duration`) an agent has to accept an assignment before it is withdrawn")
	durationVar(fs, &cfg.KubePending, "kube-pending-timeout", 0, "how long (a `duration`) a Kubernetes backend's pod may stay Unschedulable, ImagePullBackOff or\nCreateContainerConfigError before its attempt fails with that class (default 5m, 3m and 1m)")
	durationVar(fs, &cfg.Grace, "grace", 10*time.Second, "how long (a `duration`) a stopped attempt gets between SIGTERM and SIGKILL")
	fs.StringVar(&cfg.Advertise, "advertise", "", "URL clients and agents reach this server at, told to them by standbys (default http://LISTEN-ADDRESS)")
	durationVar(fs, &cfg.ControlPoll, "control-poll", 5*time.Second, "how often (a `duration`) worker controls are read back from the store (picks up plain-SQL writes)")
	def := scheduler.DefaultConfig()
	fs.StringVar(&cfg.Policy, "policy", "berth", "scheduling policy: "+strings.Join(scheduler.PolicyNames(), ", "))
	durationVar(fs, &cfg.ReserveAfter, "reserve-after", def.ReserveAfter, "how long (a `duration`) a job that does not fit waits before it reserves workers (0: never)")
	durationVar(fs, &cfg.PreemptAfter, "preempt-min-runtime", def.PreemptMinRuntime, "how long (a `duration`) an attempt runs before a higher-priority job may preempt it")
	fs.Func("peer-user", "ORIGIN=USER: the jobs federation origin ORIGIN (its peer token's name) hands over run as USER;\nan origin not mapped: as ORIGIN (repeatable)", func(v string) error {
		origin, user, ok := strings.Cut(v, "=")
		switch {
		case !ok || strings.TrimSpace(origin) != origin || strings.TrimSpace(user) != user || origin == "" || user == "":
			return fmt.Errorf("want ORIGIN=USER, not %q", v)
		case cfg.PeerUsers[origin] != "":
			return fmt.Errorf("origin %s mapped twice", origin)
		case cfg.PeerUsers == nil:
			cfg.PeerUsers = map[string]string{}
		}
		cfg.PeerUsers[origin] = user
		return nil
	})
	durationVar(fs, &cfg.FederationTick, "federation-tick", federation.DefaultTick, "how often (a `duration`) each federation peer is visited: heartbeat, cancels, handoffs, changes (0: the default)")
	durationVar(fs, &cfg.PoolScaleAfter, "pool-scale-after", provision.DefaultScaleAfter, "how long (a `duration`) jobs wait for GPUs no worker has before a cloud pool that can supply them rents")
	durationVar(fs, &cfg.PoolTick, "pool-tick", 5*time.Second, "how often (a `duration`) the autoscaler looks at every cloud pool (0: the default)")
	durationVar(fs, &cfg.PoolPoll, "pool-poll", 5*time.Second, "how often (a `duration`) a rented instance's readiness phase checks again")
	durationVar(fs, &cfg.PoolReconcile, "pool-reconcile", 30*time.Second, "how often (a `duration`) the live instances are compared with the provider's listing")
	durationVar(fs, &cfg.PoolReadyBudget, "pool-ready-budget", provision.DefaultBudgets.Ready, "how long (a `duration`) a rented instance's agent may take to register once its GPU check passed")
	fs.BoolVar(&cfg.PoolDryRun, "pool-dry-run", false, "cloud pools only say what they would rent and give back (pool.scale_up and pool.scale_down events), renting nothing")
	durationVar(fs, &cfg.ChangelogRetention, "federation-changelog-retention", 24*time.Hour, "how long (a `duration`) changes to the jobs received from a federation origin are kept\nwhile it has not pulled them, and the ends of jobs even once it has (an origin away longer\nresyncs in full); 0: changes until pulled, ends for ever")
}

// schedulerConfig returns the policy the flags chose; nil (the default
// policy) when no policy is named.
func (cfg *serverConfig) schedulerConfig() (*scheduler.Config, error) {
	if cfg.Policy == "" {
		return nil, nil
	}
	sc, err := scheduler.PolicyConfig(cfg.Policy)
	if err != nil {
		return nil, &berth.Error{Code: berth.ECodeInvalid, Field: "--policy", Err: err}
	}
	if cfg.ReserveAfter < 0 {
		return nil, berth.Invalidf("--reserve-after", "must not be negative")
	}
	if cfg.PreemptAfter < 0 {
		return nil, berth.Invalidf("--preempt-min-runtime", "must not be negative")
	}

	if sc.ReserveAfter > 0 {
		sc.ReserveAfter = cfg.ReserveAfter
	}
	sc.PreemptMinRuntime = cfg.PreemptAfter
	return &sc, nil
}

// runningServer is a started control plane.
type runningServer struct {
	URL    string
	Ctl    *controller.Controller
	Tokens *auth.Registry
	// AdminToken is the first admin token, made at the store's first
	// start; "" on later starts.
	AdminToken string
	// CAFile and Fingerprint are the development CA's (--tls-self-signed).
	CAFile, Fingerprint string
	sec                 *security
	store               store.Store
	lock                *dirlock.Lock // on the data dir, held while serving
	http                *http.Server
	route               atomic.Pointer[http.Handler] // the API, or the standby's answers before leading
	done                chan error
	lost                <-chan struct{} // closed when leadership is lost; nil without leadership
	runner              *arbiter.Runner // submits the jobs of schedule entries that carry one

	// webhooks delivers events to the webhook subscriptions.
	webhooks *webhook.Dispatcher
	// federation talks to the federation peers (idle without any).
	federation *federation.Manager
	// dashboard serves the web pages and samples the cluster for them.
	dashboard *web.Handler
	// stopAutoscaler stops the cloud pools' autoscaler.
	stopAutoscaler func()
}

// ServeHTTP serves with the current route.
func (rs *runningServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*rs.route.Load()).ServeHTTP(w, r)
}

func (rs *runningServer) setRoute(h http.Handler) { rs.route.Store(&h) }

// openStore opens the store named by cfg.
func openStore(ctx context.Context, cfg *serverConfig) (store.Store, error) {
	spec := cfg.Store
	switch {
	case spec == "": // in the data dir, which startServer has made
		spec = filepath.Join(cfg.DataDir, "berth.db")
	case strings.HasPrefix(spec, "sqlite://"):
		spec = strings.TrimPrefix(spec, "sqlite://")
	case isPostgresURL(spec):
		return postgres.Open(ctx, spec)
	case strings.Contains(spec, "://"):
		return nil, berth.Invalidf("--store", "unknown store URL scheme in %q (want postgres://, sqlite:// or a file path)", spec)
	}
	return sqlite.Open(ctx, spec)
}

func isPostgresURL(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://")
}

// storeKind names the store a --store value selects.
func storeKind(spec string) string {
	if isPostgresURL(spec) {
		return "PostgreSQL"
	}
	return "SQLite"
}

// startServer opens the store, starts the controller and serves HTTP.
func startServer(ctx context.Context, cfg *serverConfig) (*runningServer, error) {
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, berth.Invalidf("--listen", "%q is not HOST:PORT", cfg.Listen)
	}
	if err := cfg.Security.check(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Grace < 0 || cfg.Grace > time.Hour {
		return nil, berth.Invalidf("--grace", "must be between 0 (the default, 10s) and 1h")
	}
	if cfg.ControlPoll < 0 {
		return nil, berth.Invalidf("--control-poll", "must not be negative")
	}
	if cfg.FederationTick < 0 {
		return nil, berth.Invalidf("--federation-tick", "must not be negative")
	}
	if cfg.PoolScaleAfter < 0 {
		return nil, berth.Invalidf("--pool-scale-after", "must not be negative")
	}
	for flag, d := range map[string]time.Duration{"--pool-tick": cfg.PoolTick, "--pool-poll": cfg.PoolPoll,
		"--pool-reconcile": cfg.PoolReconcile, "--pool-ready-budget": cfg.PoolReadyBudget} {
		if d < 0 {
			return nil, berth.Invalidf(flag, "must not be negative")
		}
	}
	if cfg.ChangelogRetention < 0 {
		return nil, berth.Invalidf("--federation-changelog-retention", "must not be negative")
	}
	sched, err := cfg.schedulerConfig()
	if err != nil {
		return nil, err
	}
	if cfg.Advertise != "" && !strings.HasPrefix(cfg.Advertise, "http://") && !strings.HasPrefix(cfg.Advertise, "https://") {
		return nil, berth.Invalidf("--advertise", "must be an http:// or https:// URL")
	}
	// The address first: a port in use leaves no data dir behind, whose
	// first start would then have passed without showing its admin token.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	lock, err := dirlock.Acquire(cfg.DataDir)
	if errors.Is(err, dirlock.ErrInUse) {
		err = berth.Invalidf("--data-dir", "another berth server uses it; stop that one or give this one its own --data-dir").WithCause(err)
	} else if err != nil {
		err = fmt.Errorf("data dir: %w", err)
	}
	if err != nil {
		ln.Close()
		return nil, err
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		ln.Close()
		lock.Release()
		return nil, err
	}
	keepHeapFloor(heapFloor)
	rs := &runningServer{store: st, lock: lock, done: make(chan error, 1)}
	if err := rs.start(ctx, cfg, sched, host, ln); err != nil {
		ln.Close()
		rs.release()
		return nil, err
	}
	return rs, nil
}

// start does startServer's work once the store is open, serving on ln; on
// error, release undoes what it did.
func (rs *runningServer) start(ctx context.Context, cfg *serverConfig, sched *scheduler.Config, host string, ln net.Listener) error {
	templates, err := service.LoadDir(cfg.Templates)
	if err != nil {
		return &berth.Error{Code: berth.ECodeInvalid, Field: "--templates", Err: err}
	}
	catalog := &service.Catalog{Templates: templates}
	models, err := arbiter.LoadCatalog(cfg.Catalog)
	if err != nil {
		return &berth.Error{Code: berth.ECodeInvalid, Field: "--catalog", Err: err}
	}
	var contractFiles map[string]*contract.Contract
	if cfg.Contracts != "" {
		if contractFiles, err = contract.LoadDir(cfg.Contracts); err != nil {
			return &berth.Error{Code: berth.ECodeInvalid, Field: "--contracts", Err: err}
		}
	}
	sec, err := openSecurity(cfg.DataDir, &cfg.Security)
	if err != nil {
		return err
	}
	rs.sec = sec
	hostname, _ := os.Hostname()
	tlsConfig, caFile, fingerprint, err := cfg.Security.serverTLS(cfg.DataDir, []string{host, hostname})
	if err != nil {
		return err
	}
	rs.URL = "http://" + ln.Addr().String()
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
		rs.URL = "https://" + ln.Addr().String()
		rs.CAFile, rs.Fingerprint = caFile, fingerprint
	}
	rs.http = &http.Server{Handler: rs, ReadHeaderTimeout: 10 * time.Second}
	self := cfg.Advertise
	if self == "" {
		self = rs.URL
	}
	if l, ok := rs.store.(store.Leadership); ok {
		// Stand by until this server leads; only the leader runs the controller.
		reg, err := auth.NewRegistry(ctx, rs.store, sec.keys, nil, time.Second)
		if err != nil {
			ln.Close()
			return err
		}
		rs.setRoute(api.Standby(rs.store, l.Leader, self, sec.api(reg, nil), cfg.Log))
		go func() { rs.done <- rs.http.Serve(ln) }()
		if cfg.OnStandby != nil {
			cfg.OnStandby(rs.URL)
		}
		if rs.lost, err = l.Lead(ctx, self); err != nil {
			return fmt.Errorf("wait to lead: %w", err)
		}
	}
	// Leading: the registry and secrets as they are now, read after
	// taking the lead, so that nothing the last leader changed is missed.
	if rs.Tokens, err = auth.NewRegistry(ctx, rs.store, sec.keys, nil, 0); err != nil {
		return err
	}
	vault, err := auth.NewVault(ctx, rs.store, sec.keys, nil)
	if err != nil {
		return err
	}
	if rs.AdminToken, err = sec.bootstrap(ctx, rs.Tokens, cfg.DataDir); err != nil {
		return err
	}
	if err := checkExposure(cfg.Listen, rs.Tokens, &cfg.Security); err != nil {
		return err
	}
	if err := sec.recordStart(cfg, self); err != nil {
		return err
	}
	_, shared := rs.store.(store.Leadership)
	kinds := cfg.BackendKinds
	if kinds == nil {
		kinds = builtinBackendKinds
	}
	if cfg.KubePending > 0 && cfg.BackendKinds == nil {
		kinds = map[string]controller.BackendFactory{berth.BackendKindKubernetes: kubeWithPending(cfg.KubePending)}
	}
	ctl := controller.New(controller.Config{Store: rs.store, Log: cfg.Log, Lease: cfg.Lease, Heartbeat: cfg.Heartbeat,
		AcceptTimeout: cfg.AcceptTimeout, Grace: cfg.Grace, ControlPoll: cfg.ControlPoll, Scheduler: sched,
		StoreEvents: shared, Audit: sec.audit, Secrets: vault, PeerTokens: vault, Expand: catalog.Expand, Services: catalog,
		PeerUsers: cfg.PeerUsers, ChangelogRetention: cfg.ChangelogRetention, BackendKinds: kinds})
	rs.federation = newFederation(ctl, vault, cfg.FederationTick, cfg.Log)
	ctl.SetFederation(rs.federation)
	fleet := &poolFleet{dataDir: cfg.DataDir, store: rs.store, keys: vault, registry: ctl, log: cfg.Log, server: self,
		credential: rs.agentCredential, gone: ctl.WorkerGone, poll: cfg.PoolPoll, budgets: provision.Budgets{Ready: cfg.PoolReadyBudget}}
	scaler, err := newAutoscaler(ctx, ctl, rs.store, fleet, cfg)
	if err != nil {
		return err
	}
	restore := deferCollection(startHeapGoal) // the load is nearly all live: no collection while it grows
	err = ctl.Start(ctx)
	restore() // collects on a goroutine of its own while the server starts serving
	if err != nil {
		return err
	}
	rs.stopAutoscaler = runAutoscaler(scaler, fleet, cfg.PoolReconcile, cfg.Log) // idle until a pool exists
	rs.Ctl = ctl
	rs.federation.Start(context.Background()) // idle until a peer exists
	rs.webhooks = webhook.NewDispatcher(webhook.DispatcherConfig{Store: rs.store, Events: ctl.Bus(), Log: cfg.Log})
	if err := rs.webhooks.Start(ctx); err != nil {
		return err
	}
	// Schedules that run jobs: only the leader runs them (claims in the
	// store keep a stale old leader from running one twice).
	rs.runner = &arbiter.Runner{Store: rs.store, Submit: ctl.Submit, Log: cfg.Log}
	if err := rs.runner.Start(ctx); err != nil {
		return err
	}
	apiSec := sec.api(rs.Tokens, vault)
	apiServer := api.New(ctl, rs.store, apiSec, cfg.Log)
	apiServer.Webhooks = rs.webhooks
	apiServer.Pools = &api.Pools{Store: rs.store, Keys: vault, Provisioner: byHand{fleet}, Releaser: fleet}
	// The execution backends the store holds run from the start.
	apiServer.Backends = &api.Backends{Store: rs.store, Keys: vault, Registry: ctl, Log: cfg.Log}
	if err := apiServer.Backends.Load(ctx); err != nil {
		return err
	}
	apiServer.PeerStatuses, apiServer.PeerLogs = rs.federation, rs.federation
	// The dashboard, at /; its sampler runs until Close.
	rs.dashboard = web.New(web.Config{Ctl: ctl, Store: rs.store, CheckToken: apiSec.Ingress.CheckToken, PeerStatuses: rs.federation,
		AuditPath: sec.auditPath, Limiter: apiSec.Limiter, Log: cfg.Log})
	rs.dashboard.Start(context.Background())
	apiServer.Web = rs.dashboard
	apiServer.Gateway = gateway.New(gateway.Config{Cluster: ctl, Authenticate: apiServer.GatewayCaller, Log: cfg.Log})
	if apiServer.Contracts, err = contract.NewRegistry(ctx, contractFiles, rs.store); err != nil {
		return &berth.Error{Code: berth.ECodeInvalid, Field: "--contracts", Err: err}
	}
	contract.Mount(apiServer.Gateway, apiServer.Contracts)
	apiServer.Swapper = &arbiter.Swapper{Catalog: models, Cluster: ctl, Lock: arbiter.NewLock(rs.store), Log: cfg.Log,
		Webhook: webhook.NewSender(cfg.SwapWebhook, []byte(cfg.WebhookSecret), cfg.Log)}
	if rs.lost != nil {
		apiServer.Leader = self
	}
	rs.setRoute(apiServer)
	if rs.lost == nil {
		go func() { rs.done <- rs.http.Serve(ln) }()
	}
	return nil
}

// release undoes a start that failed: it stops serving and closes the
// audit log and the store.
func (rs *runningServer) release() {
	if rs.http != nil {
		rs.http.Close()
	}
	if rs.sec != nil {
		rs.sec.audit.Close()
	}
	rs.store.Close()
	rs.lock.Release()
}

// Close stops serving, drains the controller's writes and closes the store.
func (rs *runningServer) Close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = rs.http.Shutdown(ctx)
	rs.http.Close() // long polls and agent sessions
	if rs.dashboard != nil {
		rs.dashboard.Stop()
	}
	// Webhooks before the controller, whose events they read.
	hooksErr := rs.webhooks.Stop(ctx)
	// The schedule runner and the federation first: they call the controller.
	rs.federation.Stop()
	if rs.stopAutoscaler != nil {
		rs.stopAutoscaler()
	}
	err := errors.Join(rs.runner.Stop(ctx), rs.Ctl.Stop(ctx))
	err = errors.Join(hooksErr, err)
	err = errors.Join(err, rs.sec.audit.Close(), rs.store.Close()) // closing the store gives up leadership
	return errors.Join(err, rs.lock.Release())
}

// checkpointEvery is how often the audit log's chain head is recorded
// apart from it (when records were added).
const checkpointEvery = time.Minute

// serve blocks until ctx ends or the server fails, recording the audit
// log's chain head every checkpointEvery meanwhile.
func (rs *runningServer) serve(ctx context.Context) error {
	tick := time.NewTicker(checkpointEvery)
	defer tick.Stop()
	for {
		var err error
		select {
		case <-tick.C:
			if err = rs.sec.audit.Checkpoint(); err == nil {
				continue
			}
			err = fmt.Errorf("audit log checkpoint: %w", err)
		case <-ctx.Done():
			return rs.Close(context.Background())
		case <-rs.Ctl.Failed():
			err = rs.Ctl.Err()
		case <-rs.lost:
			err = errors.New("lost leadership: the connection holding it broke; stopping so that another server leads")
		case err = <-rs.done:
		}
		_ = rs.Close(context.Background())
		return err
	}
}

func runServer(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("server", "[flags]")
	var cfg serverConfig
	m.addServerFlags(fs, &cfg)
	fs.StringVar(&cfg.Store, "store", m.Getenv("BERTH_STORE"), "store: postgres://USER@HOST/DB, a SQLite file path or sqlite://PATH (default $BERTH_STORE, else DATA-DIR/berth.db)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg.Log = slog.New(slog.NewTextHandler(m.Stderr, nil))
	cfg.OnStandby = func(url string) {
		fmt.Fprintf(m.Stdout, "berth server on %s: standby, waiting to lead (the store is shared)\n", url)
	}
	rs, err := startServer(ctx, &cfg)
	if err != nil {
		return err
	}
	if rs.CAFile != "" {
		fmt.Fprintf(m.Stdout, "TLS: development CA %s, fingerprint %s\n  (clients and agents: --ca %s or --ca-fingerprint %s)\n",
			rs.CAFile, rs.Fingerprint, rs.CAFile, rs.Fingerprint)
	}
	if rs.AdminToken != "" {
		fmt.Fprintf(m.Stdout, "first admin token (saved in %s):\n  %s\n", filepath.Join(cfg.DataDir, adminTokenFile), rs.AdminToken)
	}
	fmt.Fprintf(m.Stdout, "berth server listening on %s\n", rs.URL)
	for {
		err := rs.serve(ctx)
		if !diskFull(err) {
			return err
		}
		cfg.Log.Error("server stopped: the disk is full (nothing it could not persist was acknowledged); starting again once there is room", "err", err)
		if rs, err = restartWhenRoom(ctx, &cfg); err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "berth server listening on %s\n", rs.URL)
	}
}

// restartInterval is how often a server stopped by a full disk tries to
// start again.
const restartInterval = time.Second

// restartWhenRoom starts the server again every restartInterval until it
// starts, which it does not while the disk is full (it appends to the
// audit log on start). It returns the error of a start that failed for
// another reason, or ctx's.
func restartWhenRoom(ctx context.Context, cfg *serverConfig) (*runningServer, error) {
	tick := time.NewTicker(restartInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		rs, err := startServer(ctx, cfg)
		if !diskFull(err) {
			return rs, err
		}
		cfg.Log.Warn("server start: the disk is still full", "err", err)
	}
}

// diskFull reports whether err is a file system out of space or quota.
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
