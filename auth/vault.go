package auth

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// Vault keeps users' secrets: sealed with Keys in the store, and a copy of
// the sealed values in memory so that jobs' references resolve at
// dispatch without a store read. It is safe for concurrent use.
type Vault struct {
	store store.SecretStore
	keys  *Keys
	now   func() time.Time

	mu     sync.Mutex
	sealed map[string]map[string]*berth.Secret // owner → name → secret
}

// NewVault loads every secret of st. It returns the store's error.
func NewVault(ctx context.Context, st store.SecretStore, keys *Keys, now func() time.Time) (*Vault, error) {
	if now == nil {
		now = time.Now
	}
	list, err := st.Secrets(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("load secrets: %w", err)
	}
	v := &Vault{store: st, keys: keys, now: now, sealed: map[string]map[string]*berth.Secret{}}
	for _, s := range list {
		v.keep(s)
	}
	return v, nil
}

func (v *Vault) keep(s *berth.Secret) {
	if v.sealed[s.Owner] == nil {
		v.sealed[s.Owner] = map[string]*berth.Secret{}
	}
	v.sealed[s.Owner][s.Name] = s
}

// Set creates or replaces owner's secret name with value, set by by:
// record runs first (for the audit log; its error stops the change), then
// the sealed value is stored. It returns the secret without its value; an
// invalid name is ECodeInvalid.
func (v *Vault) Set(ctx context.Context, owner, name, value, by string, record func() error) (*berth.Secret, error) {
	if err := berth.ValidSecretName(name); err != nil {
		return nil, err
	}
	sealed, err := v.keys.Seal(owner, name, []byte(value))
	if err != nil {
		return nil, err
	}
	s := &berth.Secret{Owner: owner, Name: name, Sealed: sealed, UpdatedBy: by, UpdatedAt: v.now().UTC()}
	if err := record(); err != nil {
		return nil, err
	}
	if err := v.store.PutSecret(ctx, s); err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.keep(s)
	v.mu.Unlock()
	c := *s
	c.Sealed = nil
	return &c, nil
}

// Delete deletes owner's secret name: record runs first (its error stops
// the change). An unknown secret is ECodeNotFound.
func (v *Vault) Delete(ctx context.Context, owner, name string, record func() error) error {
	v.mu.Lock()
	_, ok := v.sealed[owner][name]
	v.mu.Unlock()
	if !ok {
		return &berth.Error{Code: berth.ECodeNotFound, Field: "name", Message: fmt.Sprintf("%s has no secret %s", owner, name)}
	}
	if err := record(); err != nil {
		return err
	}
	if err := v.store.DeleteSecret(ctx, owner, name); err != nil {
		return err
	}
	v.mu.Lock()
	delete(v.sealed[owner], name)
	v.mu.Unlock()
	return nil
}

// List returns owner's secrets (every owner's for ""), by owner, then
// name, without their values.
func (v *Vault) List(owner string) []*berth.Secret {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := []*berth.Secret{}
	for o, names := range v.sealed {
		if owner != "" && o != owner {
			continue
		}
		for _, s := range names {
			c := *s
			c.Sealed = nil
			out = append(out, &c)
		}
	}
	slices.SortFunc(out, func(a, b *berth.Secret) int {
		return cmp.Or(strings.Compare(a.Owner, b.Owner), strings.Compare(a.Name, b.Name))
	})
	return out
}

// Missing returns the names texts reference as {{SECRET:NAME}} that owner
// has no secret for.
func (v *Vault) Missing(owner string, texts ...string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var missing []string
	for _, name := range refs(texts) {
		if _, ok := v.sealed[owner][name]; !ok {
			missing = append(missing, name)
		}
	}
	return missing
}

// Resolve returns the values of owner's secrets that texts reference, by
// name; nil when they reference none. Names owner has no secret for, or
// whose value does not open (the key changed), are left out: the agent
// then fails the attempt naming them.
func (v *Vault) Resolve(owner string, texts ...string) map[string]string {
	names := refs(texts)
	if len(names) == 0 {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	values := make(map[string]string, len(names))
	for _, name := range names {
		if s, ok := v.sealed[owner][name]; ok {
			if plain, err := v.keys.Open(owner, name, s.Sealed); err == nil {
				values[name] = string(plain)
			}
		}
	}
	return values
}

// refs returns the secret names texts reference.
func refs(texts []string) []string {
	var names []string
	for _, t := range texts {
		if berth.HasSecretRefs(t) {
			names = append(names, berth.SecretRefs(t)...)
		}
	}
	return names
}
