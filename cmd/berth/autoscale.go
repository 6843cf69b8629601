package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/audit"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/cloud"
	"github.com/berth-dev/berth/cloud/vast"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/provision"
	"github.com/berth-dev/berth/store"
)

// poolFleet is the server's provisioners, one per pool, each over the
// pool's provider account (its API key opened from the store's sealed
// copy): what the autoscaler rents and gives back through
// (provision.Renter), and what POST /api/v1/pools/NAME/provision runs.
type poolFleet struct {
	dataDir string
	store   store.PoolStore
	keys    interface {
		OpenPoolKey(pool string, sealed []byte) (string, error)
	}
	registry provision.Registry
	log      *slog.Logger
	// server is the URL the instances' agents join; credential issues
	// the credential of the agent of a host.
	server     string
	credential func(ctx context.Context, host string) (string, error)
	// gone is told of the worker host of an instance that vanished from
	// its provider, and why (controller.WorkerGone).
	gone func(ctx context.Context, host, why string) error
	// poll and budgets are the provisioners' (Provisioner.Poll and
	// Budgets; zero: their defaults).
	poll    time.Duration
	budgets provision.Budgets

	mu     sync.Mutex
	byPool map[string]*fleetEntry
}

// fleetEntry is one pool's provisioner and the account it was made for.
type fleetEntry struct {
	url    string
	sealed string
	p      *provision.Provisioner
}

// provisioner returns pool's provisioner, made again when its provider
// URL or key changed (a provisioner keeps which creates are in flight, so
// it is kept otherwise).
func (f *poolFleet) provisioner(ctx context.Context, pool *berth.Pool) (*provision.Provisioner, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.byPool[pool.Name]; e != nil && e.url == pool.URL && e.sealed == string(pool.SealedAPIKey) {
		return e.p, nil
	}
	if pool.Provider != "vast" {
		return nil, berth.Invalidf("provider", "pool %s: unknown provider %q (want vast)", pool.Name, pool.Provider)
	}
	key, err := f.keys.OpenPoolKey(pool.Name, pool.SealedAPIKey)
	if err != nil {
		return nil, fmt.Errorf("pool %s: open its API key: %w", pool.Name, err)
	}
	provider, err := vast.New(vast.Config{URL: pool.URL, APIKey: key})
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", pool.Name, err)
	}
	signer, err := provision.EnsureSSHKey(ctx, f.dataDir, provider)
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", pool.Name, err)
	}
	p := &provision.Provisioner{Provider: provider, Store: f.store, Signer: signer, Registry: f.registry,
		Request: f.request, Gone: f.vanished, Poll: f.poll, Budgets: f.budgets, Secrets: []string{key}, Log: f.log.With("pool", pool.Name)}
	if f.byPool == nil {
		f.byPool = map[string]*fleetEntry{}
	}
	f.byPool[pool.Name] = &fleetEntry{url: pool.URL, sealed: string(pool.SealedAPIKey), p: p}
	return p, nil
}

// vanished gives the work of the agent of an instance that vanished, or
// failed its readiness, back to the queue at once.
func (f *poolFleet) vanished(inst *berth.Instance) {
	if inst.WorkerHost == "" {
		return
	}
	if err := f.gone(context.Background(), inst.WorkerHost, inst.LastError); err != nil {
		f.log.Warn("cloud pool: the worker of an ended instance", "instance", inst.ID, "host", inst.WorkerHost, "err", err)
	}
}

// reconcile compares each pool's live instances with its provider
// account's listing (Provisioner.Reconcile: vanished instances are ended,
// their work given back, failed releases retried). A pool that fails to
// reconcile does not stop the others; the errors are joined.
func (f *poolFleet) reconcile(ctx context.Context) error {
	pools, err := f.store.Pools(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, pool := range pools {
		p, err := f.provisioner(ctx, pool)
		if err == nil {
			_, err = p.Reconcile(ctx, pool)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// instanceDiskGB is the disk an instance is created with.
const instanceDiskGB = 32

// request is what instance inst of pool is created with: the pool's
// image (provision.DefaultImage when it has none), a disk, and an
// onstart (agentOnstart) that starts berth agent as inst's worker host,
// serving the pool's queues with its labels, joined to this server
// (BERTH_SERVER) with a credential of its own bound to that host
// (BERTH_TOKEN, set in the onstart: an env value may not exceed 256
// characters at Vast, and a token does). Without a credential (its issue
// failed, and is logged) the agent cannot join and the instance fails its
// readiness. An instance of a vLLM pool is a bare vLLM node instead: the
// pool's image (provision.DefaultVLLMImage when it has none), its port
// exposed, and an onstart that runs vllm serve (provision.VLLMOnstart);
// it gets no credential.
func (f *poolFleet) request(pool *berth.Pool, inst *berth.Instance) cloud.CreateRequest {
	if pool.Workload == berth.WorkloadVLLM {
		image := pool.Image
		if image == "" {
			image = provision.DefaultVLLMImage
		}
		return cloud.CreateRequest{Image: image, DiskGB: instanceDiskGB, Env: provision.VLLMEnv(pool), Onstart: provision.VLLMOnstart(pool)}
	}
	args := []string{"agent", "--host", shellQuote(inst.WorkerHost)}
	if len(pool.Queues) > 0 {
		args = append(args, "--queues", shellQuote(strings.Join(pool.Queues, ",")))
	}
	if len(pool.Labels) > 0 {
		labels := make([]string, 0, len(pool.Labels))
		for _, k := range slices.Sorted(maps.Keys(pool.Labels)) {
			labels = append(labels, k+"="+pool.Labels[k])
		}
		args = append(args, "--labels", shellQuote(strings.Join(labels, ",")))
	}
	token, err := f.credential(context.Background(), inst.WorkerHost)
	if err != nil {
		f.log.Warn("cloud pool: no agent credential for the instance", "pool", pool.Name, "instance", inst.ID, "err", err)
	}
	image := pool.Image
	if image == "" {
		image = provision.DefaultImage
	}
	return cloud.CreateRequest{Image: image, DiskGB: instanceDiskGB, Env: map[string]string{"BERTH_SERVER": f.server},
		Onstart: agentOnstart(token, strings.Join(args, " "))}
}

// agentOnstart is the onstart script of a rented instance: with
// BERTH_TOKEN set to token (when not ""), it runs berth with args — the
// berth on the image's PATH when it has one, else the server's own
// executable fetched from $BERTH_SERVER's api.AgentBinaryPath with curl,
// else wget, else python3, into a temporary file. It is plain sh.
func agentOnstart(token, args string) string {
	var b strings.Builder
	if token != "" {
		b.WriteString("BERTH_TOKEN=" + shellQuote(token) + "; export BERTH_TOKEN\n")
	}
	b.WriteString(`B=$(command -v berth)
if [ -z "$B" ]; then
  B="${TMPDIR:-/tmp}/berth-agent.$$"; U="${BERTH_SERVER%/}` + api.AgentBinaryPath + `"; A="Authorization: Bearer $BERTH_TOKEN"
  if command -v curl >/dev/null; then curl -fsS -H "$A" -o "$B" "$U"
  elif command -v wget >/dev/null; then wget -q --header="$A" -O "$B" "$U"
  elif command -v python3 >/dev/null; then python3 -c 'import os,sys,urllib.request as u; open(sys.argv[2],"wb").write(u.urlopen(u.Request(sys.argv[1],headers={"Authorization":"Bearer "+os.environ.get("BERTH_TOKEN","")})).read())' "$U" "$B"
  else echo "berth: the image has no berth, curl, wget or python3 to fetch it with" >&2; exit 127; fi || { echo "berth: fetching $U failed" >&2; exit 1; }
  chmod +x "$B" || exit 1
fi
exec "$B" `)
	b.WriteString(args)
	b.WriteString("\n")
	return b.String()
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Provision rents one instance of pool through its provisioner.
func (f *poolFleet) Provision(ctx context.Context, pool *berth.Pool) (*berth.Instance, error) {
	p, err := f.provisioner(ctx, pool)
	if err != nil {
		return nil, err
	}
	return p.Provision(ctx, pool)
}

// byHand is the fleet as POST /api/v1/pools/NAME/provision runs it
// (api.Provisioner): a provisioning whose caller goes away gives back
// the instance it was making (Provisioner.ProvisionByHand), where the
// autoscaler's leaves it for the next to resume.
type byHand struct{ f *poolFleet }

// Provision rents one instance of pool through its provisioner, by hand.
func (h byHand) Provision(ctx context.Context, pool *berth.Pool) (*berth.Instance, error) {
	p, err := h.f.provisioner(ctx, pool)
	if err != nil {
		return nil, err
	}
	return p.ProvisionByHand(ctx, pool)
}

// Destroy gives inst back through its pool's provisioner.
func (f *poolFleet) Destroy(ctx context.Context, inst *berth.Instance, reason string) error {
	pools, err := f.store.Pools(ctx)
	if err != nil {
		return fmt.Errorf("give back instance %s: %w", inst.ID, err)
	}
	for _, pool := range pools {
		if pool.Name == inst.Pool {
			p, err := f.provisioner(ctx, pool)
			if err != nil {
				return err
			}
			return p.Destroy(ctx, inst, reason)
		}
	}
	return berth.Errorf(berth.ECodeNotFound, "give back instance %s: no pool %s", inst.ID, inst.Pool)
}

// newAutoscaler returns the autoscaler of the pools in st, with the
// pools read once and the instances left part way adopted, and makes ctl count what they could rent when it checks
// a submission (call it before the controller starts). It does nothing
// while there are no pools.
func newAutoscaler(ctx context.Context, ctl *controller.Controller, st store.PoolStore, fleet *poolFleet, cfg *serverConfig) (*provision.Autoscaler, error) {
	a := provision.New(provision.Config{Pools: st, View: ctl, Renter: fleet, ScaleAfter: cfg.PoolScaleAfter,
		Tick: cfg.PoolTick, DryRun: cfg.PoolDryRun, Log: cfg.Log})
	if _, err := a.Load(ctx); err != nil {
		return nil, err
	}
	if err := a.Adopt(ctx); err != nil {
		return nil, err
	}
	ctl.SetRentable(a)
	return a, nil
}

// runAutoscaler runs a, and reconciles the fleet's instances every
// reconcileEvery (30s when 0), until the returned func, which stops both and waits for
// the rentals and releases under way to end.
func runAutoscaler(a *provision.Autoscaler, fleet *poolFleet, reconcileEvery time.Duration, log *slog.Logger) (stop func()) {
	if reconcileEvery <= 0 {
		reconcileEvery = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		a.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		t := time.NewTicker(reconcileEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := fleet.reconcile(ctx); err != nil && ctx.Err() == nil {
					log.Warn("cloud pools: reconcile", "err", err)
				}
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// agentCredential issues the credential of a rented instance's agent,
// bound to host, audited as a token created for it.
func (rs *runningServer) agentCredential(ctx context.Context, host string) (string, error) {
	issued, err := rs.Tokens.Issue(ctx, auth.Grant{Name: host, Role: auth.RoleAgent, Worker: host, By: "autoscaler"},
		func(t *berth.Token) error {
			return rs.sec.audit.Append(audit.Entry{Action: "token.created", Actor: "autoscaler", Target: "token/" + t.ID,
				Fields: map[string]string{"name": t.Name, "role": t.Role, "worker": t.Worker, "why": "a cloud pool instance's agent"}})
		})
	if err != nil {
		return "", fmt.Errorf("agent credential for %s: %w", host, err)
	}
	return issued.Secret, nil
}
