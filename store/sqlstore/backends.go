package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// BackendRegistry implements store.BackendStore over a Reader's queries and a
// driver's ExecFunc; drivers embed it. Each write is one statement in a
// transaction of its own. Its methods are safe for concurrent use when
// the driver's functions are.
type BackendRegistry struct {
	r    *Reader
	exec ExecFunc
}

var _ store.BackendStore = (*BackendRegistry)(nil)

// NewBackendRegistry returns a BackendRegistry reading through r and
// writing with exec.
func NewBackendRegistry(r *Reader, exec ExecFunc) *BackendRegistry {
	return &BackendRegistry{r: r, exec: exec}
}

const backendColumns = `name, kind, queues, settings, sealed_credentials, created_at`

// backendSettings is a backend's settings column: its kind's settings, as
// JSON, without plain credentials.
type backendSettings struct {
	Kubernetes *berth.KubernetesBackend `json:"kubernetes,omitempty"`
}

// AddBackend stores b with its SealedCredentials (a Kubernetes backend's
// Kubeconfig is not stored). A name already stored is ECodeConflict, an
// empty one ECodeInvalid.
func (c *BackendRegistry) AddBackend(ctx context.Context, b *berth.BackendSpec) error {
	if b.Name == "" {
		return berth.Invalidf("name", "a backend needs a name")
	}
	queues, err := listJSON(b.Queues)
	if err != nil {
		return fmt.Errorf("add backend %s: queues: %w", b.Name, err)
	}
	var set backendSettings
	if b.Kubernetes != nil {
		k := *b.Kubernetes
		k.Kubeconfig = "" // sealed in SealedCredentials, never stored plain
		set.Kubernetes = &k
	}
	settings, err := json.Marshal(set)
	if err != nil {
		return fmt.Errorf("add backend %s: settings: %w", b.Name, err)
	}
	n, err := c.exec(ctx, c.r.dialect.rewrite(`INSERT INTO backends (`+backendColumns+`) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO NOTHING`),
		b.Name, b.Kind, queues, string(settings), b.SealedCredentials, nanos(b.CreatedAt))
	if err != nil {
		return fmt.Errorf("add backend %s: %w", b.Name, err)
	}
	if n == 0 {
		return &berth.Error{Code: berth.ECodeConflict, Field: "name", Message: fmt.Sprintf("backend %s exists (berth backend rm %s first)", b.Name, b.Name)}
	}
	return nil
}

// Backends returns every stored backend, by name, with its
// SealedCredentials.
func (c *BackendRegistry) Backends(ctx context.Context) ([]*berth.BackendSpec, error) {
	bs, err := collect(ctx, c.r, scanBackend, `SELECT `+backendColumns+` FROM backends ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	return bs, nil
}

func scanBackend(row scanner) (*berth.BackendSpec, error) {
	var (
		b                berth.BackendSpec
		queues, settings string
		created          int64
	)
	if err := row.Scan(&b.Name, &b.Kind, &queues, &settings, &b.SealedCredentials, &created); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(queues), &b.Queues); err != nil {
		return nil, fmt.Errorf("backend %s: queues: %w", b.Name, err)
	}
	if len(b.Queues) == 0 {
		b.Queues = nil
	}
	var set backendSettings
	if err := json.Unmarshal([]byte(settings), &set); err != nil {
		return nil, fmt.Errorf("backend %s: settings: %w", b.Name, err)
	}
	b.Kubernetes, b.CreatedAt = set.Kubernetes, fromNanos(created)
	return &b, nil
}

// RemoveBackend deletes backend name; an unknown name is ECodeNotFound.
func (c *BackendRegistry) RemoveBackend(ctx context.Context, name string) error {
	n, err := c.exec(ctx, c.r.dialect.rewrite(`DELETE FROM backends WHERE name = ?`), name)
	if err != nil {
		return fmt.Errorf("remove backend %s: %w", name, err)
	}
	if n == 0 {
		return &berth.Error{Code: berth.ECodeNotFound, Field: "name", Message: fmt.Sprintf("no backend %s", name)}
	}
	return nil
}
