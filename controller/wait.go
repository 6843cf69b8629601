package controller

import (
	"context"
	"sync"

	"github.com/berth-dev/berth"
)

// waiter is one Wait call: the jobs it still waits for and how those that
// ended, ended. The loop registers it and fills it in; the caller reads it.
type waiter struct {
	mu      sync.Mutex
	pending map[string]struct{}
	ended   map[string]berth.JobState
	done    chan struct{}
}

// jobEnded records a terminal job for every waiter; the waiter is woken
// once that state is durable. Runs on the loop.
func (c *Controller) jobEnded(id string, st berth.JobState) {
	for w := range c.waiters {
		if _, ok := w.pending[id]; ok {
			delete(w.pending, id)
			if len(w.pending) == 0 {
				delete(c.waiters, w)
				c.afterCommit(func() { close(w.done) })
			}
			w.mu.Lock()
			w.ended[id] = st
			w.mu.Unlock()
		}
	}
}

// Wait blocks until every job in ids has ended, or ctx ends (Done false).
// With all set it also waits for every batch job active when it is called,
// only user's when user is not empty; services, which run until stopped,
// are waited for only when named in ids, and the result counts those all
// left out. Unknown ids return ECodeNotFound.
func (c *Controller) Wait(ctx context.Context, ids []string, all bool, user string) (*berth.WaitResult, error) {
	w := &waiter{pending: map[string]struct{}{}, ended: map[string]berth.JobState{}, done: make(chan struct{})}
	var inactive []string
	var total, services int
	var written <-chan struct{}
	if err := c.do(ctx, func() {
		for _, id := range ids {
			if c.jobs[id] != nil {
				w.pending[id] = struct{}{}
			} else {
				inactive = append(inactive, id)
			}
		}
		if all {
			for id, js := range c.jobs {
				_, named := w.pending[id]
				switch {
				case named, user != "" && js.view().User != user: // counted already, or not user's
				case js.view().Kind == berth.KindService:
					services++
				default:
					w.pending[id] = struct{}{}
				}
			}
		}
		total = len(w.pending) + len(inactive)
		if len(inactive) > 0 {
			written = c.durable() // their ends may still be on their way to the store
		}
		if len(w.pending) == 0 {
			close(w.done)
			return
		}
		c.waiters[w] = struct{}{}
	}); err != nil {
		return nil, err
	}
	res := &berth.WaitResult{Total: total, Services: services, Counts: map[berth.JobState]int{}}
	if len(inactive) > 0 {
		if err := c.awaitDurable(ctx, written); err != nil {
			c.forget(w)
			return nil, err
		}
		states, err := c.store.JobStates(ctx, inactive)
		if err != nil {
			c.forget(w)
			return nil, err
		}
		for _, id := range inactive {
			st, ok := states[id]
			if !ok {
				c.forget(w)
				return nil, notFound(id)
			}
			res.Add(id, st)
		}
	}
	select {
	case <-w.done:
		res.Done = true
	case <-ctx.Done():
		_ = c.do(context.Background(), func() {
			delete(c.waiters, w)
			for id := range w.pending {
				res.PendingIDs = append(res.PendingIDs, id)
			}
		})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, st := range w.ended {
		res.Add(id, st)
	}
	res.Pending = res.Total - len(w.ended) - len(inactive)
	return res, nil
}

// forget unregisters a waiter that gave up.
func (c *Controller) forget(w *waiter) {
	_ = c.post(context.Background(), func() { delete(c.waiters, w) })
}
