package provision

import (
	"context"

	"github.com/berth-dev/berth"
)

// Destroy gives inst back for reason (the autoscaler's scale-down, the
// Renter's Destroy): written draining first, then destroyed at the
// provider, then written destroyed; no failure class is recorded.
func (p *Provisioner) Destroy(ctx context.Context, inst *berth.Instance, reason string) error {
	p.init()
	if err := p.phase(ctx, inst, berth.InstanceDraining, reason); err != nil {
		return err
	}
	return p.destroy(ctx, inst, "", reason)
}
