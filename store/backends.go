package store

import (
	"context"

	"github.com/berth-dev/berth"
)

// BackendStore keeps the execution backends added through
// /api/v1/backends (docs/kubernetes.md): their specs, with their
// credentials sealed (SealedCredentials) and never in plain text. Each
// write is a transaction of its own.
type BackendStore interface {
	// AddBackend stores b with its SealedCredentials; its kind's plain
	// credentials (a Kubernetes backend's Kubeconfig) are not stored. A
	// name already stored is ECodeConflict, an empty one ECodeInvalid.
	AddBackend(ctx context.Context, b *berth.BackendSpec) error
	// Backends returns every stored backend, by name, with its
	// SealedCredentials.
	Backends(ctx context.Context) ([]*berth.BackendSpec, error)
	// RemoveBackend deletes backend name; an unknown name is
	// ECodeNotFound.
	RemoveBackend(ctx context.Context, name string) error
}
