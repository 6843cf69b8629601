package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/store"
)

// Cloud pools (docs/pools.md): operators and admins manage the pools that
// rent GPUs from a marketplace, read their instances and the host records
// of the marketplace's machines, block and unblock machines, and run one
// provisioning by hand. A pool's API key is sealed before it is stored and
// never answered; every change is audited without it.

// Provisioner runs one provisioning of an instance for a pool through
// every readiness phase; package provision's is one. It returns the
// instance as it ended (ready, or failed with its class) and, when it did
// not end ready, why.
type Provisioner interface {
	Provision(ctx context.Context, pool *berth.Pool) (*berth.Instance, error)
}

// Releaser gives a rented instance back: destroyed at its provider,
// recorded destroyed with reason, its machine not blamed; package
// provision's Provisioner (through the server's fleet) is one.
type Releaser interface {
	Destroy(ctx context.Context, inst *berth.Instance, reason string) error
}

// PoolKeys seals a pool's provider API key for the store; auth.Vault is
// one (its OpenPoolKey opens it again for the provisioner).
type PoolKeys interface {
	SealPoolKey(pool, key string) ([]byte, error)
}

// Pools is what the pool, instance and host endpoints work with.
type Pools struct {
	Store store.PoolStore
	Keys  PoolKeys
	// Provisioner runs POST /api/v1/pools/{name}/provision; nil: it
	// answers 503.
	Provisioner Provisioner
	// Releaser runs DELETE /api/v1/instances/{id}; nil: it answers 503.
	Releaser Releaser
	// Now is the clock the pools' updated_at is stamped with; time.Now
	// when nil.
	Now func() time.Time

	mu sync.Mutex // one pool write at a time: a replacement keeps the key it read
}

func (p *Pools) now() time.Time {
	if p.Now != nil {
		return p.Now().UTC()
	}
	return time.Now().UTC()
}

// poolRoutes registers the pool, instance and host endpoints.
func (s *Server) poolRoutes() {
	ops := func(pattern string, h http.HandlerFunc) {
		s.route(pattern, auth.Identity.ActsOnAllJobs, operators, func(w http.ResponseWriter, r *http.Request) {
			if s.Pools == nil {
				writeError(w, r, berth.Errorf(berth.ECodeNotFound, "cloud pools are not enabled on this server"))
				return
			}
			h(w, r)
		})
	}
	ops("GET /api/v1/pools", s.listPools)
	ops("GET /api/v1/pools/{name}", s.getPool)
	ops("PUT /api/v1/pools/{name}", s.putPool)
	ops("DELETE /api/v1/pools/{name}", s.deletePool)
	ops("POST /api/v1/pools/{name}/provision", s.provision)
	ops("GET /api/v1/instances", s.listInstances)
	ops("GET /api/v1/instances/{id}", s.getInstance)
	ops("DELETE /api/v1/instances/{id}", s.deleteInstance)
	ops("GET /api/v1/hosts", s.listHosts)
	ops("DELETE /api/v1/hosts", s.clearHosts)
	ops("POST /api/v1/hosts/{machine}/block", s.blockHost(true))
	ops("POST /api/v1/hosts/{machine}/unblock", s.blockHost(false))
}

// findPool returns the stored pool name (with its sealed key), or a
// not-found error.
func (p *Pools) findPool(ctx context.Context, name string) (*berth.Pool, error) {
	pools, err := p.Store.Pools(ctx)
	if err != nil {
		return nil, err
	}
	for _, pl := range pools {
		if pl.Name == name {
			return pl, nil
		}
	}
	return nil, &berth.Error{Code: berth.ECodeNotFound, Field: "name", Message: "no pool " + name}
}

// poolInfo returns pl as answered: its key cleared, with the sums of its
// live instances among live.
func poolInfo(pl *berth.Pool, live []*berth.Instance) *berth.PoolInfo {
	out := *pl
	out.APIKey, out.SealedAPIKey = "", nil
	info := &berth.PoolInfo{Pool: &out, APIKeySet: len(pl.SealedAPIKey) > 0}
	for _, in := range live {
		if in.Pool != pl.Name || !in.Live() {
			continue
		}
		info.SpendPerH += in.PricePerH
		switch {
		case in.Phase == berth.InstanceReady:
			info.Ready++
		case in.Starting():
			info.Starting++
		}
	}
	return info
}

// listPools answers GET /api/v1/pools: {"pools":[...]}, by name.
func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	pools, err := s.Pools.Store.Pools(r.Context())
	var live []*berth.Instance
	if err == nil {
		live, err = s.Pools.Store.Instances(r.Context(), store.InstanceFilter{Live: true})
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := berth.PoolList{Pools: make([]*berth.PoolInfo, len(pools))}
	for i, pl := range pools {
		out.Pools[i] = poolInfo(pl, live)
	}
	writeJSON(w, http.StatusOK, out)
}

// getPool answers GET /api/v1/pools/{name}: the pool, or 404.
func (s *Server) getPool(w http.ResponseWriter, r *http.Request) {
	pl, err := s.Pools.findPool(r.Context(), r.PathValue("name"))
	var live []*berth.Instance
	if err == nil {
		live, err = s.Pools.Store.Instances(r.Context(), store.InstanceFilter{Pool: pl.Name, Live: true})
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, poolInfo(pl, live))
}

// putPool answers PUT /api/v1/pools/{name}: it creates or replaces the
// pool from a berth.Pool (the body may repeat the name but not contradict
// it; created_at and updated_at are the server's). The API key is
// required to create a pool; a replacement without one keeps the stored
// key. Bad input is 400 naming the field, and nothing is stored. It
// answers the pool as stored, without its key.
func (s *Server) putPool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var in berth.Pool
	if err := decode(r, &in); err != nil {
		writeError(w, r, err)
		return
	}
	if in.Name != "" && in.Name != name {
		writeError(w, r, berth.Invalidf("name", "%q differs from the path's pool %q", in.Name, name))
		return
	}
	in.Name = name
	in.SetDefaults()
	if err := in.Validate(); err != nil {
		writeError(w, r, err)
		return
	}
	p := s.Pools
	p.mu.Lock()
	defer p.mu.Unlock()
	old, err := p.findPool(r.Context(), name)
	if err != nil && berth.ErrorCode(err) != berth.ECodeNotFound {
		writeError(w, r, err)
		return
	}
	switch {
	case in.APIKey != "":
		if p.Keys == nil {
			writeError(w, r, berth.Errorf(berth.ECodeUnavailable, "this server keeps no sealed credentials: pools cannot be stored"))
			return
		}
		if in.SealedAPIKey, err = p.Keys.SealPoolKey(name, in.APIKey); err != nil {
			writeError(w, r, err)
			return
		}
	case old == nil:
		writeError(w, r, berth.Invalidf("api_key", "is required to add a pool: the provider account's API key"))
		return
	default:
		in.SealedAPIKey = old.SealedAPIKey
	}
	in.APIKey = ""
	in.UpdatedAt = p.now()
	in.CreatedAt = in.UpdatedAt
	if old != nil {
		in.CreatedAt = old.CreatedAt
	}
	if err := s.sec.record(r, "pool.set", "pool/"+name, poolFields(&in)); err != nil {
		writeError(w, r, err)
		return
	}
	if err := p.Store.PutPool(r.Context(), &in); err != nil {
		writeError(w, r, err)
		return
	}
	live, err := p.Store.Instances(r.Context(), store.InstanceFilter{Pool: name, Live: true})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, poolInfo(&in, live))
}

// poolFields are what the audit log records of pl: its settings, never its
// key.
func poolFields(pl *berth.Pool) map[string]string {
	f := map[string]string{
		"provider": pl.Provider, "gpu_type": pl.GPUType, "gpus": strconv.Itoa(pl.GPUs),
		"max_instances": strconv.Itoa(pl.MaxInstances), "max_price": strconv.FormatFloat(pl.MaxPrice, 'f', -1, 64),
		"idle_timeout": time.Duration(pl.IdleTimeout).String(), "strictness": string(pl.Strictness),
	}
	if pl.URL != "" {
		f["url"] = pl.URL
	}
	if pl.Image != "" {
		f["image"] = pl.Image
	}
	if len(pl.Queues) > 0 {
		f["queues"] = strings.Join(pl.Queues, ",")
	}
	if pl.Workload == berth.WorkloadVLLM {
		f["workload"], f["model"], f["port"] = pl.Workload, pl.Model, strconv.Itoa(pl.Port)
		if pl.MaxModelLen > 0 {
			f["max_model_len"] = strconv.Itoa(pl.MaxModelLen)
		}
	}
	return f
}

// deletePool answers DELETE /api/v1/pools/{name}: 204; 404 for an unknown
// pool; 409 while it has live instances, unless ?force=true (they are then
// no longer managed: their records stay, and berth instances shows them).
func (s *Server) deletePool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	force, err := boolQuery(r, "force")
	if err != nil {
		writeError(w, r, err)
		return
	}
	p := s.Pools
	p.mu.Lock()
	defer p.mu.Unlock()
	pl, err := p.findPool(r.Context(), name)
	var live []*berth.Instance
	if err == nil {
		live, err = p.Store.Instances(r.Context(), store.InstanceFilter{Pool: name, Live: true})
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	if len(live) > 0 && !force {
		writeError(w, r, berth.Errorf(berth.ECodeConflict,
			"pool %s has %d live instances (berth instances --pool %s): wait until they are given back, or force", name, len(live), name))
		return
	}
	fields := poolFields(pl)
	fields["live_instances"] = strconv.Itoa(len(live))
	if err := s.sec.record(r, "pool.deleted", "pool/"+name, fields); err != nil {
		writeError(w, r, err)
		return
	}
	if err := p.Store.DeletePool(r.Context(), name); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// provision answers POST /api/v1/pools/{name}/provision: it rents one
// instance for the pool and takes it through every phase, answering once
// it is ready or has failed: 200 with the instance either way (its phase
// and failure say which); when no instance came of it, the provisioner's
// *berth.Error, or any other error as 503 with its text (every offer
// failed); 503 when the server has no provisioner. A client that goes away
// cancels it.
func (s *Server) provision(w http.ResponseWriter, r *http.Request) {
	if s.Pools.Provisioner == nil {
		writeError(w, r, berth.Errorf(berth.ECodeUnavailable, "no provisioner: this server does not rent instances"))
		return
	}
	pl, err := s.Pools.findPool(r.Context(), r.PathValue("name"))
	if err == nil {
		err = s.sec.record(r, "pool.provision", "pool/"+pl.Name, nil)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	inst, err := s.Pools.Provisioner.Provision(r.Context(), pl)
	if inst == nil {
		var be *berth.Error
		switch {
		case err == nil:
			err = berth.Errorf(berth.ECodeInternal, "the provisioner returned no instance")
		case !errors.As(err, &be) && r.Context().Err() == nil:
			// Every offer tried failed: what the marketplace or the
			// probes said is the user's to read.
			err = berth.Errorf(berth.ECodeUnavailable, "pool %s: no instance became ready: %s (berth instances --pool %s shows those tried)",
				pl.Name, err, pl.Name)
		}
		writeError(w, r, err)
		return
	}
	if err != nil && inst.LastError == "" {
		inst.LastError = err.Error()
	}
	writeJSON(w, http.StatusOK, inst)
}

// listInstances answers GET /api/v1/instances[?pool=P][&live=true]:
// {"instances":[...]}, oldest first.
func (s *Server) listInstances(w http.ResponseWriter, r *http.Request) {
	live, err := boolQuery(r, "live")
	var list []*berth.Instance
	if err == nil {
		list, err = s.Pools.Store.Instances(r.Context(), store.InstanceFilter{Pool: r.URL.Query().Get("pool"), Live: live})
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	if list == nil {
		list = []*berth.Instance{}
	}
	writeJSON(w, http.StatusOK, berth.InstanceList{Instances: list})
}

// getInstance answers GET /api/v1/instances/{id}: the instance with its
// timeline and probes, or 404.
func (s *Server) getInstance(w http.ResponseWriter, r *http.Request) {
	in, err := s.Pools.Store.Instance(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

// givenBackByHand is the reason an instance given back through DELETE
// /api/v1/instances/{id} is recorded with.
const givenBackByHand = "given back by hand"

// deleteInstance answers DELETE /api/v1/instances/{id}: it gives a ready
// (or failed and preserved) instance back — a bare vLLM node, which
// nothing gives back otherwise — and answers 200 with it, destroyed;
// audited (instance.destroyed). One destroyed already is answered as it
// is; one part way to ready is 409 (its provisioning ends it); unknown:
// 404; a server that rents no instances: 503.
func (s *Server) deleteInstance(w http.ResponseWriter, r *http.Request) {
	if s.Pools.Releaser == nil {
		writeError(w, r, berth.Errorf(berth.ECodeUnavailable, "no provisioner: this server does not rent instances"))
		return
	}
	in, err := s.Pools.Store.Instance(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	switch {
	case !in.Live():
		writeJSON(w, http.StatusOK, in)
		return
	case in.Starting():
		writeError(w, r, berth.Errorf(berth.ECodeConflict, "instance %s is being provisioned (%s): give it back once it is ready or has failed", in.ID, in.Phase))
		return
	}
	if err := s.sec.record(r, "instance.destroyed", "instance/"+in.ID, map[string]string{"pool": in.Pool,
		"contract": strconv.FormatInt(in.ProviderID, 10), "phase": string(in.Phase)}); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.Pools.Releaser.Destroy(r.Context(), in, givenBackByHand); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

// hostProvider reads ?provider=, the marketplace whose machines a host
// request names: vast when absent.
func hostProvider(r *http.Request) (string, error) {
	p := r.URL.Query().Get("provider")
	switch p {
	case "", berth.ProviderVast:
		return berth.ProviderVast, nil
	}
	return "", berth.Invalidf("provider", "%q: must be %q", p, berth.ProviderVast)
}

// listHosts answers GET /api/v1/hosts[?provider=vast]: {"hosts":[...]},
// by machine id.
func (s *Server) listHosts(w http.ResponseWriter, r *http.Request) {
	provider, err := hostProvider(r)
	var list []*berth.HostRecord
	if err == nil {
		list, err = s.Pools.Store.Hosts(r.Context(), provider)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	if list == nil {
		list = []*berth.HostRecord{}
	}
	writeJSON(w, http.StatusOK, berth.HostList{Hosts: list})
}

// blockHost returns the handler of POST /api/v1/hosts/{machine}/block
// (block) or .../unblock [?provider=vast]: block marks the machine so that
// no pool rents it until it is unblocked (a machine never seen gets a
// record); unblock lifts the block and any quarantine, its history kept.
// It answers the host record.
func (s *Server) blockHost(block bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { s.setBlocked(w, r, block) }
}

func (s *Server) setBlocked(w http.ResponseWriter, r *http.Request, block bool) {
	provider, err := hostProvider(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	machine, err := strconv.ParseInt(r.PathValue("machine"), 10, 64)
	if err != nil || machine <= 0 {
		writeError(w, r, berth.Invalidf("machine", "%q: must be the marketplace's machine id, a whole number (berth hosts list shows them)", r.PathValue("machine")))
		return
	}
	p := s.Pools
	p.mu.Lock()
	defer p.mu.Unlock()
	hosts, err := p.Store.Hosts(r.Context(), provider)
	if err != nil {
		writeError(w, r, err)
		return
	}
	h := &berth.HostRecord{Provider: provider, MachineID: machine}
	for _, old := range hosts {
		if old.MachineID == machine {
			h = old
		}
	}
	action := "host.blocked"
	h.Blocked = block
	if !block {
		action, h.QuarantinedUntil = "host.unblocked", time.Time{}
	}
	if err := s.sec.record(r, action, "host/"+provider+"/"+strconv.FormatInt(machine, 10), nil); err != nil {
		writeError(w, r, err)
		return
	}
	if err := p.Store.PutHost(r.Context(), h); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

// clearHosts answers DELETE /api/v1/hosts[?provider=vast]: it forgets
// every host record of the provider (history, quarantines, blocks) and
// answers how many it deleted.
func (s *Server) clearHosts(w http.ResponseWriter, r *http.Request) {
	provider, err := hostProvider(r)
	if err == nil {
		err = s.sec.record(r, "hosts.cleared", "hosts/"+provider, nil)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.Pools.mu.Lock()
	defer s.Pools.mu.Unlock()
	n, err := s.Pools.Store.DeleteHosts(r.Context(), provider)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, berth.HostsCleared{Deleted: n})
}
