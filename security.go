package berth

import (
	"context"
	"slices"
	"strings"
	"time"
)

// Token is a row of the token registry: an issued bearer token, by id. The
// token itself (a signed JWT) is shown once, when created, and not stored;
// a token is honoured only while its row exists, is not revoked and has
// not expired.
type Token struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`             // the identity it stands for (a person, a worker, a peer)
	Role      string    `json:"role"`             // viewer, user, operator, admin, agent or peer
	Worker    string    `json:"worker,omitempty"` // an agent credential's host; empty for a join token
	CreatedBy string    `json:"created_by,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at,omitzero"` // zero: never
	RevokedAt time.Time `json:"revoked_at,omitzero"` // zero: not revoked
	Models    []string  `json:"models,omitempty"`    // the models it may use through the inference gateway; empty: every one
	RPM       int       `json:"rpm,omitempty"`       // its requests per minute through the gateway; 0: no limit
}

// Live reports whether t may still be used at now: not revoked, not
// expired.
func (t *Token) Live(now time.Time) bool {
	return t.RevokedAt.IsZero() && (t.ExpiresAt.IsZero() || now.Before(t.ExpiresAt))
}

// TokenList is the response of GET /api/v1/tokens.
type TokenList struct {
	Tokens []*Token `json:"tokens"`
}

// TokenRequest is the body of POST /api/v1/tokens.
type TokenRequest struct {
	Name string   `json:"name"`
	Role string   `json:"role"`
	TTL  Duration `json:"ttl,omitempty"` // 0: never expires
	// Models and RPM limit what the token may do through the inference
	// gateway (docs/gateway.md): the models it may use (empty: every one)
	// and its requests per minute (0: no limit).
	Models []string `json:"models,omitempty"`
	RPM    int      `json:"rpm,omitempty"`
}

// MaxRPM is the largest per-token rate limit, in requests per minute.
const MaxRPM = 1_000_000

// ValidateGatewayLimits checks a token's gateway limits: model ids that
// are not empty, hold no space or comma and are named once, and a rate
// from 0 (no limit) to MaxRPM. Errors name the field (models, rpm).
func ValidateGatewayLimits(models []string, rpm int) error {
	for i, m := range models {
		if m == "" || len(m) > 256 || strings.ContainsAny(m, " \t\n,") {
			return Invalidf("models", "%q: want a model id (GET /v1/models lists them), without spaces or commas", m)
		}
		if slices.Contains(models[:i], m) {
			return Invalidf("models", "%q is named twice", m)
		}
	}
	if rpm < 0 || rpm > MaxRPM {
		return Invalidf("rpm", "%d: want 0 (no limit) to %d requests per minute", rpm, MaxRPM)
	}
	return nil
}

// IssuedToken is the response of creating a token or joining as an agent:
// the registry row and, once only, the bearer token itself.
type IssuedToken struct {
	Token
	Secret string `json:"token"`
}

// JoinRequest is the body of POST /api/v1/agents/join: an agent holding a
// join token asks for a credential of its own.
type JoinRequest struct {
	Host string `json:"host"`
}

// Secret is a named value kept encrypted in the store, owned by one user;
// jobs of that user reference it as {{SECRET:NAME}}. Its value (sealed)
// never leaves the server but for the agent that runs such a job.
type Secret struct {
	Owner     string    `json:"owner"`
	Name      string    `json:"name"`
	Sealed    []byte    `json:"-"`
	UpdatedBy string    `json:"updated_by,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretList is the response of GET /api/v1/secrets: names, never values.
type SecretList struct {
	Secrets []*Secret `json:"secrets"`
}

// SecretRequest is the body of PUT /api/v1/secrets/{name}.
type SecretRequest struct {
	Value string `json:"value"`
	Owner string `json:"owner,omitempty"` // admins only: another user's secret
}

type actorKey struct{}

// WithActor returns ctx carrying the name of who makes the request, which
// the controller records in the events (and audit records) of the changes
// it makes.
func WithActor(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, actorKey{}, name)
}

// ActorFrom returns the name WithActor put in ctx, or "".
func ActorFrom(ctx context.Context) string {
	name, _ := ctx.Value(actorKey{}).(string)
	return name
}
