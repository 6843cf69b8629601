package store

import (
	"context"

	"github.com/berth-dev/berth"
)

// ContractStore keeps the extraction contracts stored through the API
// (docs/contracts.md), by name. Each write is a transaction of its own.
type ContractStore interface {
	// CreateContract adds c; a name already there is ECodeConflict.
	CreateContract(ctx context.Context, c *berth.ContractRecord) error
	// ReplaceContract sets the Source and UpdatedAt of the stored
	// contract c.Name, keeping its CreatedBy and CreatedAt; an unknown
	// name is ECodeNotFound.
	ReplaceContract(ctx context.Context, c *berth.ContractRecord) error
	// Contract returns one contract; an unknown name is ECodeNotFound.
	Contract(ctx context.Context, name string) (*berth.ContractRecord, error)
	// Contracts returns every stored contract, by name.
	Contracts(ctx context.Context) ([]*berth.ContractRecord, error)
	// DeleteContract deletes contract name; an unknown name is
	// ECodeNotFound.
	DeleteContract(ctx context.Context, name string) error
}
