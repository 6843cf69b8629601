// Package provision rents instances for Berth's cloud pools and takes
// each through its readiness phases: contract created, container
// running, SSH reachable, GPU sane, agent registered (docs/pools.md,
// "Readiness phases"). Each phase has its own budget; each failure is
// classified (cloud.Classify) and acted on by class ("Failure classes"):
// the machine of an infra-fatal failure is destroyed, quarantined and
// the next offer tried; a workload-fatal failure stops without blaming
// the host. The instance record is written to the store at every phase
// change before Berth acts on it, and nothing is ever paid for twice:
// what the provider already has under Berth's label is adopted, never
// created again.
package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud"
	"github.com/berth-dev/berth/redact"
	"github.com/berth-dev/berth/store"
	"golang.org/x/crypto/ssh"
)

// LabelPrefix starts the provider label of every instance Berth rents:
// the label is LabelPrefix + the instance's id.
const LabelPrefix = "berth-"

// DefaultImage is the container image of a pool that names none, as the
// server's Request gives it (cmd/berth): an
// official PyTorch CUDA runtime image, public, with python3 to fetch berth
// from the server (the onstart fetches it with curl, wget or python3
// when the image has no berth on its PATH).
const DefaultImage = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"

// Budgets are how long each readiness phase may take, from the moment
// the instance entered the phase before it (seed 004's infra readiness
// kept apart from the workload's warm-up).
type Budgets struct {
	Running time.Duration // created → container running (image pull, boot)
	SSH     time.Duration // running → SSH reachable with Berth's key
	GPU     time.Duration // ssh → nvidia-smi and libcuda checked
	Ready   time.Duration // gpu_ok → the agent registered with the server (warm-up)
}

// DefaultBudgets are the budgets of a Provisioner that sets none.
var DefaultBudgets = Budgets{Running: 10 * time.Minute, SSH: 5 * time.Minute, GPU: 2 * time.Minute, Ready: 10 * time.Minute}

// Registry tells whether the agent of a rented instance has registered
// with the server (the server's wiring provides it).
type Registry interface {
	Registered(host string) bool
}

// Provisioner rents and readies instances for cloud pools. Set the
// fields, then call Provision (and Reconcile, from time to time); its
// methods are safe for concurrent use.
type Provisioner struct {
	Provider cloud.Provider
	Store    store.PoolStore
	// Signer authenticates the SSH probes: the key EnsureSSHKey
	// registered with the provider's account.
	Signer ssh.Signer
	// Registry tells when an instance's agent has registered; nil: an
	// instance is ready once its GPU check passes.
	Registry Registry
	// Request returns what instance inst of pool is created with (image,
	// disk, env, the onstart that starts berth agent --host
	// inst.WorkerHost); Provision sets its Label. Nil: the pool's image
	// and nothing else.
	Request func(pool *berth.Pool, inst *berth.Instance) cloud.CreateRequest
	// Gone is told of an instance that vanished from the provider's
	// listing (Reconcile) or failed its readiness (its agent, started by
	// the onstart, may have joined and taken work), so that the work of
	// its agent is given to others. May be nil.
	Gone func(inst *berth.Instance)
	// GPUCheck is the GPU sanity check run over SSH (default
	// DefaultGPUCheck); it fails with a non-zero exit.
	GPUCheck string
	// Secrets are values redacted from the probes' output kept on the
	// records (the pool's API key is always).
	Secrets []string
	// Budgets are the phases' budgets; a zero field is DefaultBudgets'.
	Budgets Budgets
	// Poll is how often a phase checks again (default 5s); DialTimeout
	// bounds one SSH connection or command (default 10s); MaxOffers is
	// how many offers one Provision tries (default 5); SSHUser is who
	// the probes log in as (default root).
	Poll        time.Duration
	DialTimeout time.Duration
	MaxOffers   int
	SSHUser     string
	// Now and Sleep are the clock (default the wall clock): budgets are
	// measured with Now, waits between polls are Sleep.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	Log   *slog.Logger

	once     sync.Once
	ids      berth.IDGen
	mu       sync.Mutex
	creating map[int64]bool   // offers with a create in flight
	driving  map[string]bool  // instances a Provision of this process is taking through its phases
	drivers  map[int64]string // machine id → the driver version its offers said, for its host record
	hostsMu  sync.Mutex       // serialises read-modify-write of host records
}

// init fills in defaults, once.
func (p *Provisioner) init() {
	p.once.Do(func() {
		d := DefaultBudgets
		p.Budgets.Running = or(p.Budgets.Running, d.Running)
		p.Budgets.SSH = or(p.Budgets.SSH, d.SSH)
		p.Budgets.GPU = or(p.Budgets.GPU, d.GPU)
		p.Budgets.Ready = or(p.Budgets.Ready, d.Ready)
		p.Poll = or(p.Poll, 5*time.Second)
		p.DialTimeout = or(p.DialTimeout, 10*time.Second)
		if p.MaxOffers <= 0 {
			p.MaxOffers = 5
		}
		if p.SSHUser == "" {
			p.SSHUser = "root"
		}
		if p.Now == nil {
			p.Now = time.Now
		}
		if p.Sleep == nil {
			p.Sleep = berth.Sleep
		}
		if p.Log == nil {
			p.Log = slog.New(slog.DiscardHandler)
		}
		p.creating, p.driving, p.drivers = map[int64]bool{}, map[string]bool{}, map[int64]string{}
	})
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Failure is the error of an instance that did not become ready: its
// class (berth.Failure*) and why. Vanished says the provider no longer
// has the instance (spot loss, host offline): it is infra-fatal.
type Failure struct {
	Class    string
	Reason   string
	Vanished bool
}

func (f *Failure) Error() string { return f.Class + ": " + f.Reason }

// fail makes a *Failure.
func fail(class, format string, args ...any) *Failure {
	return &Failure{Class: class, Reason: fmt.Sprintf(format, args...)}
}

// Provision takes one instance of pool to ready and returns it: it
// resumes an instance of the pool that is part way (a restart
// mid-provisioning), else rents the best offer. An infra-fatal failure
// destroys the instance (unless pool.PreserveOnFailure), quarantines its
// machine and tries the next offer, up to MaxOffers; so does an instance
// that vanishes from the provider part way, noticed at the next poll of
// any phase (recorded destroyed: nothing is left to give back). Any
// other failure ends Provision with the instance and a *Failure; an
// outage of the provider's API is FailureUnknown once a phase's budget
// runs out, and blames no machine.
//
// When ctx ends part way, the instance is left where it stands for a
// later Provision to resume (a server stopping).
func (p *Provisioner) Provision(ctx context.Context, pool *berth.Pool) (*berth.Instance, error) {
	return p.provision(ctx, pool, false)
}

// ProvisionByHand is Provision for a caller waiting on it (berth
// provision): when ctx ends before the instance is ready (Ctrl-C, the
// client gone), the instance it was taking through its phases is given
// back — destroyed at the provider, recorded destroyed, its machine not
// blamed — rather than left part way, and billed, for a later Provision.
func (p *Provisioner) ProvisionByHand(ctx context.Context, pool *berth.Pool) (*berth.Instance, error) {
	return p.provision(ctx, pool, true)
}

// abandonTimeout bounds giving back an instance whose provisioning by
// hand was cancelled.
const abandonTimeout = 2 * time.Minute

// provision is Provision; byHand, an instance part way when ctx ends is
// given back (ProvisionByHand).
func (p *Provisioner) provision(ctx context.Context, pool *berth.Pool, byHand bool) (*berth.Instance, error) {
	p.init()
	var exclude []int64
	var last error = berth.Errorf(berth.ECodeUnavailable, "pool %s: no offer matches", pool.Name)
	cancelled := func(inst *berth.Instance, err error) error {
		if !byHand || inst == nil || ctx.Err() == nil {
			return err
		}
		if aerr := p.abandon(ctx, pool, inst); aerr != nil {
			return fmt.Errorf("%w (and giving back instance %s: %w)", err, inst.ID, aerr)
		}
		return err
	}
	for range p.MaxOffers {
		inst, err := p.next(ctx, pool, exclude)
		if err != nil {
			return nil, cancelled(inst, err)
		}
		if inst == nil {
			return nil, last
		}
		err = p.drive(ctx, pool, inst)
		if err != nil {
			err = cancelled(inst, err)
		}
		p.release(inst.ID)
		var f *Failure
		switch {
		case err == nil:
			return inst, nil
		case errors.As(err, &f) && f.Class == berth.FailureInfraFatal:
			exclude = append(exclude, inst.MachineID)
			last = fmt.Errorf("pool %s: instance %s: %w", pool.Name, inst.ID, err)
		default:
			return inst, fmt.Errorf("pool %s: instance %s: %w", pool.Name, inst.ID, err)
		}
	}
	return nil, last
}

// abandon gives back inst, part way when the provisioning by hand that
// drove it was cancelled: looked up by its label when its create's answer
// never came, written draining, destroyed at the provider, written
// destroyed. Its machine is not blamed. It works on after ctx ends, for
// abandonTimeout at most.
func (p *Provisioner) abandon(ctx context.Context, pool *berth.Pool, inst *berth.Instance) error {
	if !midway(inst.Phase) && !p.giveBack(inst, pool) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	const why = "provisioning by hand cancelled"
	if inst.ProviderID == 0 {
		if _, err := p.findByLabel(ctx, inst); err != nil {
			return err
		}
	}
	if midway(inst.Phase) {
		if err := p.phase(ctx, inst, berth.InstanceDraining, why); err != nil {
			return err
		}
	}
	p.Log.Info("provision: giving back the instance of a cancelled provisioning", "instance", inst.ID, "contract", inst.ProviderID)
	return p.destroy(ctx, inst, "", why)
}

// release says that this process no longer drives instance id.
func (p *Provisioner) release(id string) {
	p.mu.Lock()
	delete(p.driving, id)
	p.mu.Unlock()
}

// driven reports whether a Provision of this process drives instance id.
func (p *Provisioner) driven(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.driving[id]
}

// claim marks instance id driven by the caller, and reports false when
// another Provision drives it already.
func (p *Provisioner) claim(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.driving[id] {
		return false
	}
	p.driving[id] = true
	return true
}

// next returns the instance to drive: one of pool's that is part way and
// driven by no one (adopted), else a new one created on the best usable
// offer; nil when no offer is left.
func (p *Provisioner) next(ctx context.Context, pool *berth.Pool, exclude []int64) (*berth.Instance, error) {
	if inst, err := p.resume(ctx, pool); inst != nil || err != nil {
		return inst, err
	}
	return p.create(ctx, pool, exclude)
}

// midway reports whether phase is part way to ready.
func midway(ph berth.InstancePhase) bool {
	switch ph {
	case berth.InstanceCreating, berth.InstanceCreated, berth.InstanceRunning, berth.InstanceSSH, berth.InstanceGPUChecked:
		return true
	}
	return false
}

// resume claims pool's oldest instance part way to ready that no
// Provision drives. One still creating (the server stopped between the
// create and its answer) is looked up by its label: found, it is
// adopted; not found, nothing was made and it is ended.
func (p *Provisioner) resume(ctx context.Context, pool *berth.Pool) (*berth.Instance, error) {
	insts, err := p.Store.Instances(ctx, store.InstanceFilter{Pool: pool.Name, Live: true})
	if err != nil {
		return nil, fmt.Errorf("provision: instances of pool %s: %w", pool.Name, err)
	}
	for _, inst := range insts {
		if !midway(inst.Phase) || !p.claim(inst.ID) {
			continue
		}
		if inst.Phase != berth.InstanceCreating {
			p.Log.Info("provision: resuming instance", "instance", inst.ID, "phase", inst.Phase)
			return inst, nil
		}
		found, err := p.findByLabel(ctx, inst)
		if err != nil {
			p.release(inst.ID)
			return nil, err
		}
		if found {
			return inst, nil
		}
		if err := p.end(ctx, inst, berth.InstanceDestroyed, "", "its create reached no contract"); err != nil {
			p.release(inst.ID)
			return nil, err
		}
		p.release(inst.ID)
	}
	return nil, nil
}

// findByLabel looks inst up by its label at the provider; found, it
// records the contract (phase created) and reports true.
func (p *Provisioner) findByLabel(ctx context.Context, inst *berth.Instance) (bool, error) {
	list, err := p.Provider.List(ctx, Label(inst.ID))
	if err != nil {
		return false, fmt.Errorf("provision: listing %s: %w", Label(inst.ID), err)
	}
	for _, pi := range list {
		if pi.Label == Label(inst.ID) {
			inst.ProviderID, inst.MachineID = pi.ID, or64(pi.MachineID, inst.MachineID)
			return true, p.phase(ctx, inst, berth.InstanceCreated, fmt.Sprintf("contract %d adopted by its label", pi.ID))
		}
	}
	return false, nil
}

func or64(v, def int64) int64 {
	if v != 0 {
		return v
	}
	return def
}

// Label is the provider label of instance id.
func Label(id string) string { return LabelPrefix + strings.ToLower(id) }

// create rents the best usable offer for pool: the record is written
// (creating) before the create is sent, so that a restart finds it by
// its label. It returns nil when no offer is left; with an error, the
// instance it was making, if one was recorded.
func (p *Provisioner) create(ctx context.Context, pool *berth.Pool, exclude []int64) (*berth.Instance, error) {
	now := p.Now().UTC()
	live, err := p.Store.Instances(ctx, store.InstanceFilter{Pool: pool.Name, Live: true})
	if err != nil {
		return nil, fmt.Errorf("provision: instances of pool %s: %w", pool.Name, err)
	}
	left := math.MaxFloat64
	if pool.MaxPrice > 0 {
		left = pool.MaxPrice
		for _, i := range live {
			left -= i.PricePerH
		}
		if left <= 0 {
			return nil, berth.Errorf(berth.ECodeUnavailable, "pool %s: its $%.2f/h cap is spent", pool.Name, pool.MaxPrice)
		}
	}
	hosts, err := p.hosts(ctx)
	if err != nil {
		return nil, err
	}
	offers, err := p.Provider.SearchOffers(ctx, cloud.Query(pool, left, exclude))
	if err != nil {
		return nil, fmt.Errorf("provision: searching offers for pool %s: %w", pool.Name, err)
	}
	p.mu.Lock()
	for _, o := range offers {
		if o.DriverVersion != "" {
			p.drivers[o.MachineID] = o.DriverVersion
		}
	}
	p.mu.Unlock()
	for _, o := range cloud.Rank(offers, hosts, pool.Strictness, now) {
		if slices.Contains(exclude, o.MachineID) || !p.startCreate(o.ID) {
			continue
		}
		inst, err := p.createOn(ctx, pool, o)
		p.endCreate(o.ID)
		if err != nil {
			return inst, err
		}
		if inst != nil {
			return inst, nil
		}
		exclude = append(exclude, o.MachineID) // taken: the next offer
	}
	return nil, nil
}

// startCreate claims offer id for one create, and reports false when
// another is in flight on it.
func (p *Provisioner) startCreate(id int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.creating[id] {
		return false
	}
	p.creating[id] = true
	return true
}

// endCreate releases offer id.
func (p *Provisioner) endCreate(id int64) {
	p.mu.Lock()
	delete(p.creating, id)
	p.mu.Unlock()
}

// createOn creates an instance of pool on offer o, once: nil, nil when
// the offer was refused for the offer's or the machine's sake (it is
// gone, or the refusal's contract was destroyed); an error when it was
// refused for the request's. With an error, it returns the instance
// when its record was written (it may have a contract).
func (p *Provisioner) createOn(ctx context.Context, pool *berth.Pool, o cloud.Offer) (*berth.Instance, error) {
	now := p.Now().UTC()
	id := p.ids.New(now)
	inst := &berth.Instance{ID: id, Pool: pool.Name, OfferID: o.ID, MachineID: o.MachineID, GPUName: o.GPUName,
		GPUs: o.NumGPUs, PricePerH: o.PricePerHour, WorkerHost: Label(id), CreatedAt: now}
	if pool.Workload == berth.WorkloadVLLM {
		inst.WorkerHost = "" // no agent: no worker
	}
	req := cloud.CreateRequest{Image: pool.Image}
	if p.Request != nil {
		req = p.Request(pool, inst)
	}
	req.Label = Label(id)
	p.claim(id)
	if err := p.phase(ctx, inst, berth.InstanceCreating, fmt.Sprintf("offer %d on machine %d at $%.4f/h", o.ID, o.MachineID, o.PricePerHour)); err != nil {
		p.release(id)
		return nil, err
	}
	contract, err := p.Provider.Create(ctx, o.ID, req)
	var ce *cloud.CreateError
	switch {
	case err == nil:
		inst.ProviderID = contract
		if err := p.phase(ctx, inst, berth.InstanceCreated, fmt.Sprintf("contract %d", contract)); err != nil {
			p.release(id)
			return inst, err
		}
		return inst, nil
	case errors.As(err, &ce):
		inst.ProviderID = ce.Contract
		inst.LastError = ce.Error()
		if ce.Contract != 0 {
			// The machine made a contract it would not start: its fault.
			why := fmt.Sprintf("the refused create still made contract %d", ce.Contract)
			if err = p.record(ctx, pool, inst, berth.FailureInfraFatal); err == nil {
				err = p.destroy(ctx, inst, berth.FailureInfraFatal, why)
			}
		} else {
			err = p.end(ctx, inst, berth.InstanceDestroyed, "", "create refused: "+ce.Error())
		}
		p.release(id)
		if err == nil && ce.Contract == 0 && !ce.Unavailable {
			// Refused for the request's sake (bad arguments, rate
			// limited): another offer would be refused the same way.
			err = fmt.Errorf("provision: create on offer %d: %w", o.ID, ce)
		}
		if err != nil {
			return inst, err
		}
		return nil, nil
	}
	// The answer was lost: the create may have been made. Never retry
	// it; look it up by its label.
	inst.LastError = err.Error()
	found, lerr := p.findByLabel(ctx, inst)
	if lerr != nil {
		p.release(id)
		return inst, fmt.Errorf("provision: create on offer %d: %w (and then %w)", o.ID, err, lerr)
	}
	if found {
		return inst, nil
	}
	if err := p.end(ctx, inst, berth.InstanceDestroyed, "", "create failed: "+err.Error()); err != nil {
		p.release(id)
		return inst, err
	}
	p.release(id)
	return nil, nil
}

// phase moves inst to ph for reason and writes it, before the caller
// acts on the move.
func (p *Provisioner) phase(ctx context.Context, inst *berth.Instance, ph berth.InstancePhase, reason string) error {
	now := p.Now().UTC()
	inst.Phase = ph
	inst.Timeline = append(inst.Timeline, berth.PhaseChange{Phase: ph, At: now, Reason: reason})
	switch ph {
	case berth.InstanceReady:
		inst.ReadyAt, inst.IdleSince = now, now
	case berth.InstanceFailed, berth.InstanceDestroyed:
		if inst.EndedAt.IsZero() {
			inst.EndedAt = now
		}
	}
	if err := p.Store.PutInstance(ctx, inst); err != nil {
		return fmt.Errorf("provision: writing instance %s (%s): %w", inst.ID, ph, err)
	}
	return nil
}

// end ends inst in phase ph (failed or destroyed) with failure class
// class.
func (p *Provisioner) end(ctx context.Context, inst *berth.Instance, ph berth.InstancePhase, class, reason string) error {
	if class != "" {
		inst.Failure = class
	}
	return p.phase(ctx, inst, ph, reason)
}

// destroy gives inst back: it is written failed (with class, when not
// "") first, then destroyed at the provider, then written destroyed.
func (p *Provisioner) destroy(ctx context.Context, inst *berth.Instance, class, reason string) error {
	if class != "" {
		if err := p.end(ctx, inst, berth.InstanceFailed, class, reason); err != nil {
			return err
		}
	}
	if inst.ProviderID != 0 {
		if err := p.Provider.Destroy(ctx, inst.ProviderID); err != nil {
			return fmt.Errorf("provision: destroying instance %s (contract %d): %w", inst.ID, inst.ProviderID, err)
		}
	}
	return p.end(ctx, inst, berth.InstanceDestroyed, class, reason)
}

// hosts returns the provider's host records by machine id.
func (p *Provisioner) hosts(ctx context.Context) (map[int64]*berth.HostRecord, error) {
	hs, err := p.Store.Hosts(ctx, p.Provider.Name())
	if err != nil {
		return nil, fmt.Errorf("provision: host records: %w", err)
	}
	m := make(map[int64]*berth.HostRecord, len(hs))
	for _, h := range hs {
		m[h.MachineID] = h
	}
	return m, nil
}

// record counts an outcome (class "" for ready) on inst's machine.
func (p *Provisioner) record(ctx context.Context, pool *berth.Pool, inst *berth.Instance, class string) error {
	p.hostsMu.Lock()
	defer p.hostsMu.Unlock()
	hosts, err := p.hosts(ctx)
	if err != nil {
		return err
	}
	h := hosts[inst.MachineID]
	if h == nil {
		h = &berth.HostRecord{Provider: p.Provider.Name(), MachineID: inst.MachineID}
	}
	if inst.GPUName != "" {
		h.GPUName = inst.GPUName
	}
	p.mu.Lock()
	if d := p.drivers[inst.MachineID]; d != "" {
		h.Driver = d // so that a driver's workload failures down-rank its offers (cloud.Rank)
	}
	p.mu.Unlock()
	cloud.Record(h, pool.Strictness, class, p.Now().UTC())
	if err := p.Store.PutHost(ctx, h); err != nil {
		return fmt.Errorf("provision: host record of machine %d: %w", inst.MachineID, err)
	}
	return nil
}

// redactor hides pool's secrets in probe output.
func (p *Provisioner) redactor(pool *berth.Pool) *redact.Redactor {
	return redact.NewRedactor(append(slices.Clone(p.Secrets), pool.APIKey))
}

// probe appends one probe to inst's record (output redacted and cut),
// unless it repeats the last one (same phase, command, exit, output and
// class): a long wait keeps one line per change, not one per poll.
func (p *Provisioner) probe(inst *berth.Instance, r *redact.Redactor, cmd string, exit *int, out, class string) {
	pr := berth.Probe{Phase: inst.Phase, Command: r.Redact(cmd), ExitCode: exit, Output: cut(r.Redact(out)), Class: class, At: p.Now().UTC()}
	if n := len(inst.Probes); n > 0 {
		l := inst.Probes[n-1]
		if l.Phase == pr.Phase && l.Command == pr.Command && l.Output == pr.Output && l.Class == pr.Class && eqExit(l.ExitCode, pr.ExitCode) {
			return
		}
	}
	inst.Probes = append(inst.Probes, pr)
}

func eqExit(a, b *int) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}
