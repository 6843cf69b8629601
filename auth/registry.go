package auth

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// Registry is the token registry: it issues tokens, signed with Keys and
// recorded in the store, revokes them, and checks a presented token's
// claims against its record (Ingress's TokenChecker). It keeps the records
// in memory, read from the store at start and, when MaxAge is set, again
// whenever they are older than that (a standby, which sees the leader's
// changes through the store only). It is safe for concurrent use.
type Registry struct {
	store  store.TokenStore
	keys   *Keys
	now    func() time.Time
	maxAge time.Duration
	ids    berth.IDGen

	mu     sync.Mutex
	tokens map[string]*berth.Token
	order  []string // ids, oldest first
	loaded time.Time
}

// NewRegistry loads the registry from st. maxAge > 0 makes it re-read the
// store when its copy is older than that; 0 trusts its own copy (the
// leader, which makes every change). It returns the store's error.
func NewRegistry(ctx context.Context, st store.TokenStore, keys *Keys, now func() time.Time, maxAge time.Duration) (*Registry, error) {
	if now == nil {
		now = time.Now
	}
	r := &Registry{store: st, keys: keys, now: now, maxAge: maxAge}
	if err := r.load(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Registry) load(ctx context.Context) error {
	list, err := r.store.Tokens(ctx)
	if err != nil {
		return fmt.Errorf("load tokens: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tokens, r.order, r.loaded = make(map[string]*berth.Token, len(list)), make([]string, 0, len(list)), r.now()
	for _, t := range list {
		r.tokens[t.ID], r.order = t, append(r.order, t.ID)
	}
	return nil
}

// Check accepts claims whose token is in the registry, live (neither
// revoked nor expired) and issued as the claims say; otherwise it returns
// an ECodeUnauthorized *berth.Error.
func (r *Registry) Check(c Claims) error {
	if r.maxAge > 0 {
		r.mu.Lock()
		stale := r.now().Sub(r.loaded) > r.maxAge
		r.mu.Unlock()
		if stale {
			if err := r.load(context.Background()); err != nil {
				return berth.Errorf(berth.ECodeUnavailable, "cannot check the token").WithCause(err)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tokens[c.ID]
	switch {
	case t == nil:
		return unauthorized("token %s is not in the registry", c.ID)
	case !t.RevokedAt.IsZero():
		return unauthorized("token %s was revoked", c.ID)
	case !t.Live(r.now()):
		return unauthorized("token %s has expired", c.ID)
	case t.Name != c.Subject || t.Role != string(c.Role) || t.Worker != c.Worker:
		return unauthorized("token %s does not match its registry record", c.ID)
	}
	return nil
}

// Grant is what a new token stands for.
type Grant struct {
	Name   string        // the identity: a person, a worker host, a peer
	Role   Role          // what it may do
	Worker string        // for an agent credential, the host it is bound to; "" for a join token
	TTL    time.Duration // 0: never expires
	By     string        // who asks
	Models []string      // the models it may use through the inference gateway; empty: every one
	RPM    int           // its requests per minute through the gateway; 0: no limit
}

// Issue makes a token for g: record gets its registry row first (for the
// audit log; its error stops the issue), then the row is stored and the
// signed token returned, once. It returns an ECodeInvalid error for an
// invalid grant and the store's error otherwise.
func (r *Registry) Issue(ctx context.Context, g Grant, record func(*berth.Token) error) (*berth.IssuedToken, error) {
	now := r.now().UTC().Truncate(time.Second)
	t := &berth.Token{ID: r.ids.New(now), Name: g.Name, Role: string(g.Role), Worker: g.Worker,
		CreatedBy: g.By, CreatedAt: now, Models: g.Models, RPM: g.RPM}
	claims := Claims{ID: t.ID, Subject: g.Name, Role: g.Role, Worker: g.Worker, IssuedAt: now.Unix()}
	if g.TTL > 0 {
		t.ExpiresAt = now.Add(g.TTL)
		claims.Expires = t.ExpiresAt.Unix()
	}
	signed, err := r.keys.Sign(claims)
	if err != nil {
		return nil, err
	}
	if err := record(t); err != nil {
		return nil, err
	}
	if err := r.store.CreateToken(ctx, t); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.tokens[t.ID], r.order = t, append(r.order, t.ID)
	r.mu.Unlock()
	return &berth.IssuedToken{Token: *t, Secret: signed}, nil
}

// Revoke revokes token id for good: record gets its row first (its error
// stops the revocation). An unknown id is ECodeNotFound; revoking a
// revoked token again changes nothing and returns it.
func (r *Registry) Revoke(ctx context.Context, id string, record func(*berth.Token) error) (*berth.Token, error) {
	r.mu.Lock()
	t := r.tokens[id]
	r.mu.Unlock()
	if t == nil {
		return nil, &berth.Error{Code: berth.ECodeNotFound, Field: "id", Message: fmt.Sprintf("no token %s (berth token list)", id)}
	}
	if !t.RevokedAt.IsZero() {
		c := *t
		return &c, nil
	}
	if err := record(t); err != nil {
		return nil, err
	}
	revoked, err := r.store.RevokeToken(ctx, id, r.now().UTC())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.tokens[id] = revoked
	r.mu.Unlock()
	c := *revoked
	return &c, nil
}

// Token returns a copy of token id's row, or nil when there is none.
func (r *Registry) Token(id string) *berth.Token {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tokens[id]
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

// List returns copies of every token's row, oldest first.
func (r *Registry) List() []*berth.Token {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*berth.Token, len(r.order))
	for i, id := range r.order {
		c := *r.tokens[id]
		out[i] = &c
	}
	return out
}

// Live reports whether any token is live.
func (r *Registry) Live() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for _, t := range r.tokens {
		if t.Live(now) {
			return true
		}
	}
	return false
}
