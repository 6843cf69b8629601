package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// SetQuota creates or replaces the quota rule q.ID() with q, stamped with
// the controller's clock, and returns it once it is durable; created
// reports whether no rule had that id. The scheduler applies it from its
// next pass. An invalid rule returns q.Validate's ECodeInvalid *berth.Error
// and stores nothing; a store failure returns ECodeUnavailable.
func (c *Controller) SetQuota(ctx context.Context, q berth.QuotaRule) (rule *berth.QuotaRule, created bool, err error) {
	if err := q.Validate(); err != nil {
		return nil, false, err
	}
	var written <-chan struct{}
	if err := c.do(ctx, func() {
		id := q.ID()
		_, existed := c.quotas[id]
		q.UpdatedAt = c.now().UTC()
		kept, stored, reply := q, q, q
		c.quotas[id] = &kept
		c.write(&store.Batch{Quotas: []*berth.QuotaRule{&stored}})
		c.dirty = true
		ev := berth.Event{Time: q.UpdatedAt, Type: berth.EventQuotaSet, Quota: id, Limits: q.Limits(), Actor: berth.ActorFrom(ctx)}
		c.emit(ev)
		rule, created, written = &reply, !existed, c.durable()
	}); err != nil {
		return nil, false, err
	}
	if err := c.awaitDurable(ctx, written); err != nil {
		return nil, false, err
	}
	return rule, created, nil
}

// DeleteQuota deletes the quota rule with id "SCOPE:NAME" and returns once
// the delete is durable. A malformed id returns an ECodeInvalid
// *berth.Error, an unknown one ECodeNotFound; neither writes anything.
func (c *Controller) DeleteQuota(ctx context.Context, id string) error {
	if _, _, err := berth.ParseQuotaID(id); err != nil {
		return err
	}
	var found bool
	var written <-chan struct{}
	if err := c.do(ctx, func() {
		if _, found = c.quotas[id]; found {
			delete(c.quotas, id)
			c.write(&store.Batch{QuotaDeletes: []string{id}})
			c.dirty = true
			ev := berth.Event{Time: c.now().UTC(), Type: berth.EventQuotaDeleted, Quota: id, Actor: berth.ActorFrom(ctx)}
			c.emit(ev)
		}
		written = c.durable() // an answer either way reflects only durable writes
	}); err != nil {
		return err
	}
	if err := c.awaitDurable(ctx, written); err != nil {
		return err
	}
	if !found {
		return &berth.Error{Code: berth.ECodeNotFound, Field: "id", Message: fmt.Sprintf("no quota rule %q", id)}
	}
	return nil
}

// Quotas returns every quota rule, by id, as stored: every rule SetQuota
// has acknowledged and DeleteQuota has not.
func (c *Controller) Quotas(ctx context.Context) ([]*berth.QuotaRule, error) {
	return c.store.Quotas(ctx)
}

// quotaRules returns copies of the rules in force, by id, for a
// scheduling pass. Loop only.
func (c *Controller) quotaRules() []berth.QuotaRule {
	out := make([]berth.QuotaRule, 0, len(c.quotas))
	for _, q := range c.quotas {
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b berth.QuotaRule) int { return strings.Compare(a.ID(), b.ID()) })
	return out
}

// loadQuotas puts the stored rules in the loop's memory, at start.
func (c *Controller) loadQuotas(rules []*berth.QuotaRule) {
	for _, q := range rules {
		c.quotas[q.ID()] = q
	}
}
