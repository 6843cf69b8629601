package provision

import (
	"context"
	"fmt"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// Reconcile compares the live instance records of pool with the
// provider's listing of Berth's instances on the pool's account (the
// Provisioner's): one the provider no longer has (spot loss, host
// offline) is ended as lost says. A listing that fails (the provider's
// API down) is returned as an error and changes nothing: no instance is
// taken for vanished, no machine blamed. Records still creating (no
// contract yet) and those a Provision is driving are left to Provision,
// which sees a vanished instance itself, at its next poll. An instance
// being given back whose destroy did not go through (failed, in a pool
// that does not preserve failed instances, or draining) is destroyed
// again, and one no longer listed is written destroyed: its destroy went
// through, which is no vanish. It returns the instances it found gone.
func (p *Provisioner) Reconcile(ctx context.Context, pool *berth.Pool) ([]*berth.Instance, error) {
	p.init()
	live, err := p.Store.Instances(ctx, store.InstanceFilter{Pool: pool.Name, Live: true})
	if err != nil {
		return nil, fmt.Errorf("provision: live instances of pool %s: %w", pool.Name, err)
	}
	if len(live) == 0 {
		return nil, nil
	}
	listed, err := p.Provider.List(ctx, LabelPrefix)
	if err != nil {
		return nil, fmt.Errorf("provision: pool %s: listing %s instances: %w", pool.Name, p.Provider.Name(), err)
	}
	have := map[int64]bool{}
	for _, pi := range listed {
		have[pi.ID] = true
	}
	var gone []*berth.Instance
	for _, inst := range live {
		if p.giveBack(inst, pool) && have[inst.ProviderID] && !p.driven(inst.ID) {
			if err := p.destroy(ctx, inst, "", "given back again: "+inst.LastError); err != nil {
				return gone, err
			}
			continue
		}
		if inst.ProviderID == 0 || inst.Phase == berth.InstanceCreating || have[inst.ProviderID] || p.driven(inst.ID) {
			continue
		}
		if p.giveBack(inst, pool) {
			// Its destroy went through; the record's last write is under
			// way, or was lost to a crash. It was given back, not lost:
			// no machine is blamed and its failure, if any, is kept.
			if err := p.end(ctx, inst, berth.InstanceDestroyed, "", "given back: no longer listed by "+p.Provider.Name()); err != nil {
				return gone, err
			}
			continue
		}
		why := fmt.Sprintf("contract %d vanished from %s's listing while %s", inst.ProviderID, p.Provider.Name(), inst.Phase)
		if err := p.lost(ctx, pool, inst, why); err != nil {
			return gone, err
		}
		gone = append(gone, inst)
	}
	return gone, nil
}

// lost ends inst, which its provider no longer has (spot loss, host
// offline), seen by Reconcile or by a readiness phase: it is written
// destroyed, infra-fatal, with why (there is nothing left to destroy or
// to preserve); its machine's record counts an infra-fatal failure (a
// vanish is the host's infrastructure failing); and Gone is told, so that
// the work of its agent goes back to the queue without spending a retry.
func (p *Provisioner) lost(ctx context.Context, pool *berth.Pool, inst *berth.Instance, why string) error {
	inst.LastError = why
	if err := p.end(ctx, inst, berth.InstanceDestroyed, berth.FailureInfraFatal, why); err != nil {
		return err
	}
	if err := p.record(ctx, pool, inst, berth.FailureInfraFatal); err != nil {
		return err
	}
	p.Log.Warn("provision: instance vanished", "instance", inst.ID, "machine", inst.MachineID, "host", inst.WorkerHost, "why", why)
	if p.Gone != nil {
		p.Gone(inst)
	}
	return nil
}

// giveBack reports whether inst, of pool, is on its way out: draining,
// or failed where failed instances are not kept.
func (p *Provisioner) giveBack(inst *berth.Instance, pool *berth.Pool) bool {
	switch inst.Phase {
	case berth.InstanceDraining:
		return true
	case berth.InstanceFailed:
		return !pool.PreserveOnFailure
	}
	return false
}
