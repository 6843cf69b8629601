package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/berth-dev/berth"
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
		Secrets: []string{key}, Log: f.log.With("pool", pool.Name)}
	if f.byPool == nil {
		f.byPool = map[string]*fleetEntry{}
	}
	f.byPool[pool.Name] = &fleetEntry{url: pool.URL, sealed: string(pool.SealedAPIKey), p: p}
	return p, nil
}

// Provision rents one instance of pool through its provisioner.
func (f *poolFleet) Provision(ctx context.Context, pool *berth.Pool) (*berth.Instance, error) {
	p, err := f.provisioner(ctx, pool)
	if err != nil {
		return nil, err
	}
	return p.Provision(ctx, pool)
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
		DryRun: cfg.PoolDryRun, Log: cfg.Log})
	if _, err := a.Load(ctx); err != nil {
		return nil, err
	}
	if err := a.Adopt(ctx); err != nil {
		return nil, err
	}
	ctl.SetRentable(a)
	return a, nil
}

// runAutoscaler runs a until the returned func, which stops it and waits
// for the rentals and releases under way to end.
func runAutoscaler(a *provision.Autoscaler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
