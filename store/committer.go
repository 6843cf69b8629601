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
// Over a Stager with more than one lane, several groups are in flight at
// once: each group's changes are made in a transaction of its own while
// earlier ones are still being made or committed, and the transactions
// commit one after another in the order the groups were formed, so that
// what is durable is always every group up to some point. A group that
// writes a row an earlier group in flight also writes is staged only once
// that group's changes are made, and then waits, in the database, for its
// commit to write the row; one that updates a job an earlier group in
// flight inserts, or that writes a table whose rows it does not list,
// waits for that group to commit (see Batch.rows).
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
	// Prepare runs on one batch at a time, in the order of the batches.
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

// A Stager is a Writer that can make a batch's changes without committing
// them, so that a committer can make the next batch's changes on another
// connection while an earlier batch commits (see Committer).
type Stager interface {
	Writer
	// Lanes is how many staged batches may be open at once.
	Lanes() int
	// Stage makes b's changes in a transaction of its own, which it leaves
	// open. It is called from several goroutines at once. Where b writes
	// a row that another open transaction writes too, that one has made
	// all its changes and updated or upserted the row, not inserted it
	// (Batch.rows): Stage waits for it to end and then writes the row, as
	// PostgreSQL's row locks do.
	Stage(ctx context.Context, b *Batch) (Staged, error)
}

// Staged is a batch's changes, made and not yet committed.
type Staged interface {
	// Commit writes head, when not nil, in the batch's transaction and
	// commits it: durable once Commit returns nil.
	Commit(ctx context.Context, head *AuditHead) error
	// Rollback discards the changes.
	Rollback()
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
// store's error; it runs on a writer goroutine and must not block. The
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
	stager, ok := c.store.(Stager)
	if !ok || stager.Lanes() < 2 {
		for group := c.next(); group != nil; group = c.next() {
			c.writeGroup(group)
		}
		return
	}
	c.runStaged(stager)
}

// next returns the batches pending, waiting for one; nil once stopped
// with none pending.
func (c *Committer) next() []commit {
	for {
		c.mu.Lock()
		group := c.pending
		c.pending = nil
		c.mu.Unlock()
		if len(group) > 0 {
			return group
		}
		select {
		case <-c.wake:
		case <-c.stop:
			c.mu.Lock()
			group = c.pending
			c.pending = nil
			c.mu.Unlock()
			return group
		}
	}
}

// failed returns the sticky error.
func (c *Committer) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail records err as the sticky error unless one is recorded, and
// returns the sticky error.
func (c *Committer) fail(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
	return c.err
}

// writeGroup writes group as one transaction and runs its callbacks.
func (c *Committer) writeGroup(group []commit) {
	merged := merge(group)
	err := c.failed()
	if err == nil && !merged.Empty() {
		merged.Compact()
		if werr := c.write(merged); werr != nil {
			err = c.fail(werr)
		}
	}
	for _, g := range group {
		g.done(err)
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

// flight is a group of batches staged or being staged.
type flight struct {
	rows     *rows
	staged   chan struct{} // closed once the group's changes are made, or will not be
	prepared chan struct{} // closed once Prepare has returned on the group, or will not run
	badAudit bool          // Prepare failed on this group or an earlier one; set before prepared is closed
	done     chan struct{} // closed once committed or failed and the callbacks have run
	err      error         // set before done is closed
}

// finished returns a flight that is done, with no error.
func finished() *flight {
	f := &flight{prepared: make(chan struct{}), staged: make(chan struct{}), done: make(chan struct{})}
	close(f.prepared)
	close(f.staged)
	close(f.done)
	return f
}

// runStaged writes the groups over s, up to s.Lanes() at once, each
// staged as soon as a lane is free and the earlier groups in flight that
// write a row it writes are staged (committed, where rows.waitsForCommit),
// and committed after the group before it.
func (c *Committer) runStaged(s Stager) {
	lanes := s.Lanes()
	prev := finished()
	var inFlight []*flight
	for group := c.next(); group != nil; group = c.next() {
		merged := merge(group)
		if !merged.Empty() {
			merged.Compact()
		}
		f := &flight{rows: merged.rows(), prepared: make(chan struct{}), staged: make(chan struct{}), done: make(chan struct{})}
		inFlight = slices.DeleteFunc(inFlight, func(g *flight) bool {
			select {
			case <-g.done:
				return true
			default:
				return false
			}
		})
		for len(inFlight) >= lanes {
			<-inFlight[0].done
			inFlight = inFlight[1:]
		}
		for _, g := range inFlight {
			switch {
			case f.rows.waitsForCommit(g.rows):
				<-g.done
			case f.rows.overlaps(g.rows):
				<-g.staged
			}
		}
		go c.fly(s, merged, group, f, prev)
		inFlight = append(inFlight, f)
		prev = f
	}
	<-prev.done
}

// fly stages b, the merge of group, with Prepare running alongside once
// it has returned on prev's group, then commits b once prev is done, and
// runs group's callbacks.
func (c *Committer) fly(s Stager, b *Batch, group []commit, f, prev *flight) {
	type result struct {
		head *AuditHead
		err  error
	}
	var prepared chan result
	write := c.failed() == nil && !b.Empty()
	if write && c.Prepare != nil {
		prepared = make(chan result, 1)
		go func() {
			defer close(f.prepared)
			<-prev.prepared
			if prev.badAudit { // the batch fails with the earlier one's error
				f.badAudit = true
				prepared <- result{}
				return
			}
			head, err := c.Prepare(b)
			f.badAudit = err != nil
			prepared <- result{head, err}
		}()
	} else {
		go func() { <-prev.prepared; f.badAudit = prev.badAudit; close(f.prepared) }()
	}
	var staged Staged
	var err error
	if write {
		staged, err = s.Stage(context.Background(), b)
	}
	close(f.staged)
	var head *AuditHead
	if prepared != nil {
		r := <-prepared
		head = r.head
		if r.err != nil { // Prepare's error comes first
			err = r.err
		}
	}
	<-prev.done
	if prev.err != nil {
		err = prev.err
	}
	switch {
	case err != nil && staged != nil:
		staged.Rollback()
	case staged != nil:
		err = staged.Commit(context.Background(), head)
	}
	if err != nil {
		err = c.fail(err)
	}
	f.err = err
	for _, g := range group {
		g.done(err)
	}
	close(f.done)
}

// rows is the rows of the tables that a batch writes, as far as two
// batches in flight at once could write the same one; all is set when the
// batch writes a table whose rows it does not list, and it then shares a
// row with every batch. A batch that updates a job another inserts must
// wait for that one's commit (the update does not see an uncommitted
// row); one that writes a row another updated or upserted waits for it in
// the database (an update, or an upsert's conflict, waits for the row's
// lock), so it need only not take that row's lock first.
type rows struct {
	all      bool
	created  map[string]struct{} // jobs inserted
	jobs     map[string]struct{} // jobs written, created included
	attempts map[string]struct{} // attempts written, progressed included
	progress map[string]struct{} // attempts whose progress is set (an update)
}

// rows returns the rows b writes. Events need none: each batch's are new
// rows, and deletes of old ones skip the rows another transaction holds.
func (b *Batch) rows() *rows {
	if len(b.Workers)+len(b.Quotas)+len(b.QuotaDeletes)+len(b.Controls) > 0 || !b.Federation.Empty() {
		return &rows{all: true}
	}
	r := &rows{created: make(map[string]struct{}, len(b.Jobs)), jobs: make(map[string]struct{}, len(b.Jobs)+len(b.JobUpdates)),
		attempts: make(map[string]struct{}, len(b.Attempts)+len(b.Progress)+len(b.Logs)), progress: make(map[string]struct{}, len(b.Progress))}
	for _, j := range b.Jobs {
		r.created[j.ID] = struct{}{}
		r.jobs[j.ID] = struct{}{}
	}
	for _, u := range b.JobUpdates {
		r.jobs[u.ID] = struct{}{}
	}
	for _, a := range b.Attempts {
		r.attempts[a.ID] = struct{}{}
	}
	for _, p := range b.Progress {
		r.attempts[p.AttemptID] = struct{}{}
		r.progress[p.AttemptID] = struct{}{}
	}
	for _, l := range b.Logs {
		r.attempts[l.AttemptID] = struct{}{}
	}
	return r
}

// overlaps reports whether r and o share a row.
func (r *rows) overlaps(o *rows) bool {
	return r.all || o.all || shares(r.jobs, o.jobs) || shares(r.attempts, o.attempts)
}

// waitsForCommit reports whether a batch writing r, after one writing o,
// must wait for o's commit before its changes are made: it writes a job
// o inserts, sets the progress of an attempt o upserts (perhaps inserts),
// or either writes tables whose rows it does not list.
func (r *rows) waitsForCommit(o *rows) bool {
	return r.all || o.all || shares(r.jobs, o.created) || shares(r.progress, o.attempts)
}

// shares reports whether a and b have a key in common.
func shares(a, b map[string]struct{}) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	for k := range a {
		if _, ok := b[k]; ok {
			return true
		}
	}
	return false
}

// merge returns the batches of group as one, in order (see Batch.Append).
// It reuses the first batch, growing its busiest lists once to their
// merged length rather than step by step.
func merge(group []commit) *Batch {
	merged := group[0].batch
	if len(group) == 1 {
		return merged
	}
	var jobs, updates, attempts, events, audit int
	for _, g := range group[1:] {
		jobs += len(g.batch.Jobs)
		updates += len(g.batch.JobUpdates)
		attempts += len(g.batch.Attempts)
		events += len(g.batch.Events)
		audit += len(g.batch.Audit)
	}
	merged.Jobs = slices.Grow(merged.Jobs, jobs)
	merged.JobUpdates = slices.Grow(merged.JobUpdates, updates)
	merged.Attempts = slices.Grow(merged.Attempts, attempts)
	merged.Events = slices.Grow(merged.Events, events)
	merged.Audit = slices.Grow(merged.Audit, audit)
	for _, g := range group[1:] {
		merged.Append(g.batch)
	}
	return merged
}
