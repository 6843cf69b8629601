package store

import (
	"context"

	"github.com/berth-dev/berth"
)

// PoolStore keeps cloud pools, their rented instances and the host
// records (reputation and quarantine) of marketplace machines
// (docs/pools.md). Each write is a transaction of its own.
type PoolStore interface {
	// PutPool creates or replaces pool p (by name), with SealedAPIKey.
	PutPool(ctx context.Context, p *berth.Pool) error
	// Pools returns every pool, by name, with SealedAPIKey.
	Pools(ctx context.Context) ([]*berth.Pool, error)
	// DeletePool deletes pool name; an unknown name is ECodeNotFound.
	// Its instances' records stay.
	DeletePool(ctx context.Context, name string) error
	// PutInstance creates or replaces instance i (by ID), timeline and
	// probes included.
	PutInstance(ctx context.Context, i *berth.Instance) error
	// Instance returns one instance; an unknown id is ECodeNotFound.
	Instance(ctx context.Context, id string) (*berth.Instance, error)
	// Instances returns the instances f selects, oldest first.
	Instances(ctx context.Context, f InstanceFilter) ([]*berth.Instance, error)
	// PutHost creates or replaces the record of (h.Provider, h.MachineID).
	PutHost(ctx context.Context, h *berth.HostRecord) error
	// Hosts returns provider's host records, by machine id.
	Hosts(ctx context.Context, provider string) ([]*berth.HostRecord, error)
	// DeleteHosts deletes every host record of provider and returns how
	// many it deleted.
	DeleteHosts(ctx context.Context, provider string) (int, error)
}

// InstanceFilter selects instances.
type InstanceFilter struct {
	Pool string // "": every pool
	Live bool   // only those not destroyed
}
