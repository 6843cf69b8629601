package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/berth-dev/berth"
)

// ExecFunc runs a statement that changes rows, in a transaction of its
// own, and returns how many rows it changed.
type ExecFunc func(ctx context.Context, query string, args ...any) (int64, error)

// Credentials implements the token registry and the secrets of
// store.Store over a Reader's queries and a driver's ExecFunc; drivers
// embed it. Its methods are safe for concurrent use when the driver's
// functions are.
type Credentials struct {
	r    *Reader
	exec ExecFunc
}

// NewCredentials returns Credentials reading through r and writing with
// exec.
func NewCredentials(r *Reader, exec ExecFunc) *Credentials { return &Credentials{r: r, exec: exec} }

const tokenColumns = `id, name, role, worker, created_by, created_at, expires_at, revoked_at, models, rpm`

// sql rewrites the "?" placeholders of query into the dialect's.
func (c *Credentials) sql(query string) string { return c.r.dialect.rewrite(query) }

// CreateToken adds t to the registry; an id already there is ECodeConflict.
func (c *Credentials) CreateToken(ctx context.Context, t *berth.Token) error {
	models := ""
	if len(t.Models) > 0 {
		b, err := json.Marshal(t.Models)
		if err != nil {
			return fmt.Errorf("create token: models: %w", err)
		}
		models = string(b)
	}
	n, err := c.exec(ctx, c.sql(`INSERT INTO tokens (`+tokenColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`),
		t.ID, t.Name, t.Role, t.Worker, t.CreatedBy, nanos(t.CreatedAt), nanos(t.ExpiresAt), nanos(t.RevokedAt), models, t.RPM)
	if err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	if n == 0 {
		return berth.Errorf(berth.ECodeConflict, "token %s already exists", t.ID)
	}
	return nil
}

// Tokens returns the registry, oldest first.
func (c *Credentials) Tokens(ctx context.Context) ([]*berth.Token, error) {
	ts, err := collect(ctx, c.r, scanToken, `SELECT `+tokenColumns+` FROM tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return ts, nil
}

// RevokeToken marks token id revoked at at (one already revoked keeps its
// first time) and returns it; an unknown id is ECodeNotFound.
func (c *Credentials) RevokeToken(ctx context.Context, id string, at time.Time) (*berth.Token, error) {
	n, err := c.exec(ctx, c.sql(`UPDATE tokens SET revoked_at = CASE WHEN revoked_at = 0 THEN ? ELSE revoked_at END WHERE id = ?`), nanos(at), id)
	if err != nil {
		return nil, fmt.Errorf("revoke token %s: %w", id, err)
	}
	if n == 0 {
		return nil, berth.Errorf(berth.ECodeNotFound, "no token %s", id)
	}
	ts, err := collect(ctx, c.r, scanToken, c.sql(`SELECT `+tokenColumns+` FROM tokens WHERE id = ?`), id)
	if err != nil || len(ts) != 1 {
		return nil, fmt.Errorf("read revoked token %s: %w", id, err)
	}
	return ts[0], nil
}

func scanToken(row scanner) (*berth.Token, error) {
	var t berth.Token
	var created, expires, revoked, rpm int64
	var models string
	if err := row.Scan(&t.ID, &t.Name, &t.Role, &t.Worker, &t.CreatedBy, &created, &expires, &revoked, &models, &rpm); err != nil {
		return nil, err
	}
	if models != "" {
		if err := json.Unmarshal([]byte(models), &t.Models); err != nil {
			return nil, fmt.Errorf("token %s: models: %w", t.ID, err)
		}
	}
	t.RPM = int(rpm)
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = fromNanos(created), fromNanos(expires), fromNanos(revoked)
	return &t, nil
}

// PutSecret creates or replaces secret s.
func (c *Credentials) PutSecret(ctx context.Context, s *berth.Secret) error {
	_, err := c.exec(ctx, c.sql(`INSERT INTO secrets (owner, name, sealed, updated_by, updated_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (owner, name) DO UPDATE SET sealed = excluded.sealed, updated_by = excluded.updated_by, updated_at = excluded.updated_at`),
		s.Owner, s.Name, s.Sealed, s.UpdatedBy, nanos(s.UpdatedAt))
	if err != nil {
		return fmt.Errorf("put secret %s/%s: %w", s.Owner, s.Name, err)
	}
	return nil
}

// Secrets returns owner's secrets, or every owner's when owner is "", by
// owner, then name, with their sealed values.
func (c *Credentials) Secrets(ctx context.Context, owner string) ([]*berth.Secret, error) {
	query, args := `SELECT owner, name, sealed, updated_by, updated_at FROM secrets`, []any{}
	if owner != "" {
		query, args = query+` WHERE owner = ?`, append(args, owner)
	}
	ss, err := collect(ctx, c.r, scanSecret, c.sql(query+` ORDER BY owner, name`), args...)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return ss, nil
}

func scanSecret(row scanner) (*berth.Secret, error) {
	var s berth.Secret
	var updated int64
	if err := row.Scan(&s.Owner, &s.Name, &s.Sealed, &s.UpdatedBy, &updated); err != nil {
		return nil, err
	}
	s.UpdatedAt = fromNanos(updated)
	return &s, nil
}

// DeleteSecret deletes owner's secret name; an unknown one is
// ECodeNotFound.
func (c *Credentials) DeleteSecret(ctx context.Context, owner, name string) error {
	n, err := c.exec(ctx, c.sql(`DELETE FROM secrets WHERE owner = ? AND name = ?`), owner, name)
	if err != nil {
		return fmt.Errorf("delete secret %s/%s: %w", owner, name, err)
	}
	if n == 0 {
		return berth.Errorf(berth.ECodeNotFound, "no secret %s of %s", name, owner)
	}
	return nil
}
