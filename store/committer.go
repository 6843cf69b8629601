package store

import (
	"context"
	"slices"
	"sync"
)

// Committer is the one writer in front of a store (a Writer): it takes batches from
// any goroutine, merges those that arrive while a transaction is being
// made durable, and writes them as one transaction (group commit). Each
// batch's callback runs, in submission order, once its writes are durable.
//
// A failed write is sticky: that batch and every later one get the error,
// because later batches may build on the lost writes.
type Committer struct {
	// Prepare, when set, runs on each merged batch, on its own goroutine
	// while the store makes the batch's changes; the store commits them
	// only once Prepare has returned nil (Batch.BeforeCommit). Its error
	// fails the batch like a store error, and nothing of the batch is
	// written. The controller appends the batch's audit records there, so
	// that they are durable no later than the changes they describe, at
	// the cost of neither waiting for the other. The audit head Prepare
	// returns, if not nil, the store writes in the batch's transaction.
	// Prepare must only read the batch. Set it before Start.
	Prepare func(*Batch) (*AuditHead, error)

	store Writer

	mu      sync.Mutex
	pending []commit
	err     error
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

type commit struct {
	batch *Batch
	done  func(error)
}

// NewCommitter returns a committer over s. It writes nothing until Start.
func NewCommitter(s Writer) *Committer {
	return &Committer{store: s, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// Start runs the writer goroutine.
func (c *Committer) Start() { go c.run() }

// Stop writes what is pending and ends the writer goroutine. Commits after
// Stop fail with ErrStopped.
func (c *Committer) Stop() {
	c.mu.Lock()
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.mu.Unlock()
	<-c.done
}

// Commit queues b. done is called with nil once b is durable, or with the
// store's error; it runs on the writer goroutine and must not block. The
// committer owns b from here on.
func (c *Committer) Commit(b *Batch, done func(error)) {
	c.mu.Lock()
	select {
	case <-c.stop:
		c.mu.Unlock()
		done(ErrStopped)
		return
	default:
	}
	c.pending = append(c.pending, commit{b, done})
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Committer) run() {
	defer close(c.done)
	for {
		select {
		case <-c.wake:
			c.writePending()
		case <-c.stop:
			c.writePending()
			return
		}
	}
}

func (c *Committer) writePending() {
	for {
		c.mu.Lock()
		group := c.pending
		c.pending = nil
		c.mu.Unlock()
		if len(group) == 0 {
			return
		}
		merged := merge(group)
		if c.err == nil && !merged.Empty() {
			merged.Compact()
			c.err = c.write(merged)
		}
		for _, g := range group {
			g.done(c.err)
		}
	}
}

// write writes b, with Prepare running alongside: the store commits b
// only once Prepare has returned nil. Prepare's error comes first.
func (c *Committer) write(b *Batch) error {
	if c.Prepare == nil {
		return c.store.Write(context.Background(), b)
	}
	type result struct {
		head *AuditHead
		err  error
	}
	prepared := make(chan result, 1)
	var prepareErr error
	waited := false
	b.BeforeCommit = func() (*AuditHead, error) {
		r := <-prepared
		prepareErr, waited = r.err, true
		return r.head, r.err
	}
	go func() {
		head, err := c.Prepare(b)
		prepared <- result{head, err}
	}()
	err := c.store.Write(context.Background(), b)
	if !waited { // the write failed first
		prepareErr = (<-prepared).err
	}
	if prepareErr != nil {
		return prepareErr
	}
	return err
}

// merge returns the batches of group as one, in order (see Batch.Append).
// It reuses the first batch, growing its busiest lists once to their
// merged length rather than step by step.
func merge(group []commit) *Batch {
	merged := group[0].batch
	if len(group) == 1 {
		return merged
	}
	var jobs, updates, attempts, audit int
	for _, g := range group[1:] {
		jobs += len(g.batch.Jobs)
		updates += len(g.batch.JobUpdates)
		attempts += len(g.batch.Attempts)
		audit += len(g.batch.Audit)
	}
	merged.Jobs = slices.Grow(merged.Jobs, jobs)
	merged.JobUpdates = slices.Grow(merged.JobUpdates, updates)
	merged.Attempts = slices.Grow(merged.Attempts, attempts)
	merged.Audit = slices.Grow(merged.Audit, audit)
	for _, g := range group[1:] {
		merged.Append(g.batch)
	}
	return merged
}
