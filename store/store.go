// Package store defines what the controller needs from durable storage and
// the group-commit writer that batches every write into few transactions.
// Drivers (sqlite, postgres) implement Store; storetest checks them all
// against one conformance suite.
package store

import (
	"context"
	"iter"
	"slices"
	"time"

	"github.com/berth-dev/berth"
)

// Batch is a set of writes applied in one transaction, list by list in
// the order sqlstore.Steps gives. Within each list a later entry for the
// same id wins. Because quota deletes come after quota upserts, a batch
// holding both an upsert and a delete of one rule deletes it; likewise
// progress comes after attempt upserts, which write an attempt's Progress
// too. Append keeps the order of these writes across batches by dropping a
// delete or a progress that a later upsert supersedes.
type Batch struct {
	Jobs         []*berth.Job
	JobUpdates   []JobUpdate
	Attempts     []*berth.Attempt
	Workers      []*berth.Worker
	Quotas       []*berth.QuotaRule     // upserts, keyed by ID()
	QuotaDeletes []string               // ids of rules to delete; an unknown id is no error
	Controls     []*berth.WorkerControl // upserts, keyed by ID() (host and queue)
	Progress     []AttemptProgress      // an unknown attempt is no error
	Logs         []LogChunk
	Events       []*berth.Event // each with a new Seq, higher than any stored
	// Federation is the batch's federation writes; nil when none (always,
	// until a peer exists or a job is received from one).
	Federation *FederationBatch
	// Audit is the events to append to the audit log before the batch is
	// committed (see Committer.Prepare); stores do not write them. They
	// are the same events as Events, when the batch stores those: shared,
	// not copied, for no one changes an event once it is emitted.
	Audit []*berth.Event
	// BeforeCommit, when set, runs before the batch's changes are
	// committed: after they are made, or before, as the store finds
	// cheaper. Its error aborts the write and leaves nothing written.
	// The audit head it returns, if not nil, the store writes in the same
	// transaction (see AuditHead).
	BeforeCommit func() (*AuditHead, error)
}

// AuditHead is the seq and line hash of an audit log's last record, as
// the store last recorded it with the batch whose audit records it
// covers, so that a log cut short below it shows; the zero value means
// none recorded.
type AuditHead struct {
	Seq  uint64
	Hash string
}

// KeptEvents is how many of the newest events a store keeps at least;
// older ones may be deleted as new ones are written.
const KeptEvents = 1 << 16

// AttemptProgress sets the progress an attempt last reported.
type AttemptProgress struct {
	AttemptID string
	Progress  string
}

// Empty reports whether the batch writes nothing.
func (b *Batch) Empty() bool {
	return len(b.Jobs)+len(b.JobUpdates)+len(b.Attempts)+len(b.Workers)+
		len(b.Quotas)+len(b.QuotaDeletes)+len(b.Controls)+len(b.Progress)+len(b.Logs)+len(b.Events)+len(b.Audit) == 0 && b.Federation.Empty()
}

// Append adds every write of o after those of b. A quota rule that o
// upserts is no longer deleted by b, and b's progress of an attempt that o
// upserts is dropped (o's upsert writes the attempt's Progress), so that
// applying the result leaves what applying b and then o does.
func (b *Batch) Append(o *Batch) {
	b.Jobs = append(b.Jobs, o.Jobs...)
	b.JobUpdates = append(b.JobUpdates, o.JobUpdates...)
	b.Progress = dropSuperseded(b.Progress, func(p AttemptProgress) string { return p.AttemptID },
		o.Attempts, func(a *berth.Attempt) string { return a.ID })
	b.Attempts = append(b.Attempts, o.Attempts...)
	b.Workers = append(b.Workers, o.Workers...)
	b.QuotaDeletes = dropSuperseded(b.QuotaDeletes, func(id string) string { return id },
		o.Quotas, (*berth.QuotaRule).ID)
	b.Quotas = append(b.Quotas, o.Quotas...)
	b.QuotaDeletes = append(b.QuotaDeletes, o.QuotaDeletes...)
	b.Controls = append(b.Controls, o.Controls...)
	b.Progress = append(b.Progress, o.Progress...)
	b.Logs = append(b.Logs, o.Logs...)
	b.Events = append(b.Events, o.Events...)
	b.Audit = append(b.Audit, o.Audit...)
	b.Federation = b.Federation.append(o.Federation)
}

// JobUpdate sets the mutable fields of a job.
type JobUpdate struct {
	ID         string
	State      berth.JobState
	Reason     string
	ExitCode   *int
	Attempts   int
	StartedAt  time.Time
	FinishedAt time.Time
}

// LogChunk is Data written at byte Offset of an attempt's output. The
// controller only appends contiguous chunks. Stream is the job's stream
// the chunk was written to: berth.StreamStderr, or empty for stdout (and
// for output whose stream the agent did not tell apart).
type LogChunk struct {
	AttemptID string
	Offset    int64
	Data      []byte
	Stream    string
}

// JobFilter selects jobs for a listing, newest first.
type JobFilter struct {
	States []berth.JobState // empty: all
	Queue  string
	User   string
	Parent string // only the jobs submitted under this job
	Name   string // only the jobs of this name (an array's jobs share one)
	Before string // cursor: only ids < Before
	Limit  int    // 0: no limit
}

// Active is what the controller rebuilds its memory from at start.
type Active struct {
	// Jobs are the pending and running jobs, by id, but for those of
	// Members: together they are every pending and running job once.
	Jobs []*berth.Job
	// Members are the pending jobs of arrays that are still as they were
	// submitted, by id: what a backlog of a million jobs mostly is. Each
	// is a few bytes that point at a job its array shares, so that a
	// start neither reads nor makes a whole job for each.
	Members  []ArrayMember
	Attempts []*berth.Attempt // assigned and running attempts
	Workers  []*berth.Worker
	Quotas   []*berth.QuotaRule     // every quota rule, by id
	Controls []*berth.WorkerControl // every worker control, by host, then queue
	Events   []*berth.Event         // the newest events, at most KeptEvents, oldest first
	LogSizes map[string]int64       // stored bytes of each active attempt's output
	Counts   map[berth.JobState]int
	// Federation is the federation's state: epoch, changelog head,
	// peers, live handles and mirror cursors.
	Federation FederationState
}

// ArrayMember is a pending job of an array still as it was submitted: its
// array's spec, never started, no reason, no cluster of its own.
type ArrayMember struct {
	// Like is the job but for its ID and ArrayIndex, which are empty:
	// shared by the members of its array made at the same time, and
	// never changed (Job makes a job of its own).
	Like  *berth.Job
	ID    string
	Index int
}

// Job returns the member as a job of its own.
func (m ArrayMember) Job() *berth.Job {
	j := *m.Like
	j.ID, j.ArrayIndex = m.ID, &m.Index
	return &j
}

// ByID yields every job of a in id order: each of Jobs with a nil
// member, each of Members as a nil job and the member.
func (a *Active) ByID() iter.Seq2[*berth.Job, *ArrayMember] {
	return func(yield func(*berth.Job, *ArrayMember) bool) {
		jobs, members := a.Jobs, a.Members
		for len(jobs) > 0 || len(members) > 0 {
			var ok bool
			if len(members) == 0 || len(jobs) > 0 && jobs[0].ID < members[0].ID {
				ok, jobs = yield(jobs[0], nil), jobs[1:]
			} else {
				ok, members = yield(nil, &members[0]), members[1:]
			}
			if !ok {
				return
			}
		}
	}
}

// AllJobs returns every job of a, by id: Jobs, and Members as jobs of
// their own.
func (a *Active) AllJobs() []*berth.Job {
	out := make([]*berth.Job, 0, len(a.Jobs)+len(a.Members))
	for j, m := range a.ByID() {
		if m != nil {
			j = m.Job()
		}
		out = append(out, j)
	}
	return out
}

// Store is durable storage: every role below, as the drivers (sqlite,
// postgres) implement it. Consumers take the role they need (a
// controller.Store, an api.Store, a webhook.Store, an arbiter.LockStore …),
// not Store. Every method is safe for concurrent use. Lookups of a missing
// object return a *berth.Error with ECodeNotFound.
type Store interface {
	JobStore
	ControlReader
	LogReader
	CredentialStore
	ArbiterStore
	WebhookStore
	FederationStore
	PoolStore
	BackendStore
	ContractStore

	// Close releases the store.
	Close() error
}

// Writer writes batches: what a Committer needs.
type Writer interface {
	// Write applies b atomically and durably (fsynced) before returning.
	Write(ctx context.Context, b *Batch) error
}

// JobStore is the lifecycle's part of a Store: the batches that write jobs,
// attempts, workers, quota rules, worker controls, progress, logs and
// events, and the reads of what they wrote.
type JobStore interface {
	Writer
	JobReader
	// LoadActive returns every non-terminal job and attempt, all workers,
	// all quota rules, all worker controls, the newest events (at most
	// KeptEvents), log sizes of the active attempts and job counts by
	// state. When each is not nil, the jobs go to it instead of into
	// Active's Jobs and Members, as they are read, before LoadActive
	// returns: in parts, one call at a time, the parts in id order and
	// each part's jobs and members by id, so that a start works on the
	// jobs read while the next are read; a is the Active LoadActive
	// returns, all of it read but Jobs, Members and Events; left is about
	// how many jobs the parts still to come hold (from the counts by
	// state).
	LoadActive(ctx context.Context, each func(a *Active, jobs []*berth.Job, members []ArrayMember, left int)) (*Active, error)
	// AuditHead returns the audit head the last batch that set one
	// wrote, or the zero AuditHead if none did.
	AuditHead(ctx context.Context) (AuditHead, error)
}

// JobReader reads jobs, attempts, workers and quota rules: what a standby
// server answers from the database itself.
type JobReader interface {
	// Job returns one job.
	Job(ctx context.Context, id string) (*berth.Job, error)
	// Jobs returns jobs matching f, newest first.
	Jobs(ctx context.Context, f JobFilter) ([]*berth.Job, error)
	// JobsByIdempotencyKey returns the jobs of the submission made with key,
	// in id order; none is not an error.
	JobsByIdempotencyKey(ctx context.Context, key string) ([]*berth.Job, error)
	// JobStates returns the state of each job in ids that exists; unknown
	// ids are absent from the map.
	JobStates(ctx context.Context, ids []string) (map[string]berth.JobState, error)
	// JobHosts returns where each job of ids that has had an attempt on a
	// worker runs or ran (berth.Job.Host); the others are absent.
	JobHosts(ctx context.Context, ids []string) (map[string]string, error)
	// Attempts returns a job's attempts, oldest first.
	Attempts(ctx context.Context, jobID string) ([]*berth.Attempt, error)
	// Attempt returns one attempt; an unknown id is ECodeNotFound.
	Attempt(ctx context.Context, id string) (*berth.Attempt, error)
	// Workers returns every worker ever registered, by id.
	Workers(ctx context.Context) ([]*berth.Worker, error)
	// Quotas returns every quota rule, by id.
	Quotas(ctx context.Context) ([]*berth.QuotaRule, error)
}

// ControlReader reads the worker controls (seed 001), which Write writes
// and other programs may write too (plain SQL).
type ControlReader interface {
	// WorkerControls returns every worker control, by host, then queue
	// (byte-wise; not the order of ID()). Controls may also be written
	// from outside Berth (plain SQL); the controller reads them back
	// periodically.
	WorkerControls(ctx context.Context) ([]*berth.WorkerControl, error)
}

// LogReader reads the attempts' output, which Write appends.
type LogReader interface {
	// Logs returns up to limit bytes of an attempt's output from offset.
	Logs(ctx context.Context, attemptID string, offset int64, limit int) ([]byte, error)
	// LogChunks returns the chunks of an attempt's output from offset, up
	// to limit bytes of data in all, each with its stream; the first is cut
	// to begin at offset and the last to end within the limit.
	LogChunks(ctx context.Context, attemptID string, offset int64, limit int) ([]LogChunk, error)
}

// CredentialStore keeps the credentials: the token registry and users'
// secrets (package auth's Registry and Vault).
type CredentialStore interface {
	TokenStore
	SecretStore
}

// TokenStore keeps the token registry. Each write is a transaction of its
// own, not through Write.
type TokenStore interface {
	// CreateToken adds t to the token registry; an id already there is
	// ECodeConflict.
	CreateToken(ctx context.Context, t *berth.Token) error
	// Tokens returns the token registry, oldest first.
	Tokens(ctx context.Context) ([]*berth.Token, error)
	// RevokeToken marks token id revoked at at (one already revoked keeps
	// its first time) and returns it; an unknown id is ECodeNotFound.
	RevokeToken(ctx context.Context, id string, at time.Time) (*berth.Token, error)
}

// SecretStore keeps users' sealed secrets. Each write is a transaction of
// its own, not through Write.
type SecretStore interface {
	// PutSecret creates or replaces a secret (by owner and name).
	PutSecret(ctx context.Context, s *berth.Secret) error
	// Secrets returns owner's secrets, or every owner's when owner is "",
	// by owner, then name, with their sealed values.
	Secrets(ctx context.Context, owner string) ([]*berth.Secret, error)
	// DeleteSecret deletes owner's secret name; an unknown one is
	// ECodeNotFound.
	DeleteSecret(ctx context.Context, owner, name string) error
}

// ArbiterStore keeps the GPU arbiter's swap lock and schedule registry
// (seed 000); package arbiter takes the parts it needs (LockStore,
// ScheduleStore, RunStore). Each write is a transaction of its own.
type ArbiterStore interface {
	// SwapLock returns the stored swap lock, expired or not; none stored
	// is ECodeNotFound.
	SwapLock(ctx context.Context) (*berth.SwapLock, error)
	// PutSwapLock stores l in place of the stored lock whose token is
	// prev, or where none is stored when prev is ""; when the stored lock
	// is not that one it changes nothing and returns ECodeConflict.
	PutSwapLock(ctx context.Context, l *berth.SwapLock, prev string) error
	// DeleteSwapLock deletes the stored lock if its token is token (any
	// lock when token is "") and reports whether it deleted one.
	DeleteSwapLock(ctx context.Context, token string) (bool, error)
	// PutSchedule registers s or updates the entry of its id in place,
	// keeping that entry's RegisteredAt, and returns the entry stored.
	PutSchedule(ctx context.Context, s *berth.Schedule) (*berth.Schedule, error)
	// Schedules returns the schedule registry, oldest registration first.
	Schedules(ctx context.Context) ([]*berth.Schedule, error)
	// DeleteSchedule deletes schedule id; an unknown id is ECodeNotFound.
	DeleteSchedule(ctx context.Context, id string) error
	// ClaimScheduleRun sets schedule id's LastRun to scheduled (clearing
	// LastJobID and LastError) if it is still prev, and reports whether
	// it did: a compare-and-set, so that of the servers racing for one run
	// exactly one starts it. An unknown id claims nothing.
	ClaimScheduleRun(ctx context.Context, id string, scheduled, prev time.Time) (bool, error)
	// RecordScheduleRun sets schedule id's LastJobID and LastError if its
	// LastRun is still scheduled; otherwise it changes nothing (no error).
	RecordScheduleRun(ctx context.Context, id string, scheduled time.Time, jobID, errText string) error
}

// WebhookStore keeps webhook subscriptions and their delivery log
// (webhook.Store). Each write is a transaction of its own.
type WebhookStore interface {
	// CreateWebhook adds w; an id already there is ECodeConflict.
	CreateWebhook(ctx context.Context, w *berth.Webhook) error
	// Webhooks returns every webhook, oldest first, with its secret and
	// SecretSet filled.
	Webhooks(ctx context.Context) ([]*berth.Webhook, error)
	// DeleteWebhook deletes webhook id and its deliveries; an unknown id
	// is ECodeNotFound.
	DeleteWebhook(ctx context.Context, id string) error
	// AddDeliveries adds ds, all or none; more than MaxDeliveriesPerAdd is
	// ECodeInvalid, and an id already stored fails the call.
	AddDeliveries(ctx context.Context, ds []*berth.Delivery) error
	// DueDeliveries returns up to limit pending deliveries of existing,
	// enabled webhooks whose NextAttemptAt is at or before now, soonest
	// first.
	DueDeliveries(ctx context.Context, now time.Time, limit int) ([]*berth.Delivery, error)
	// UpdateDelivery sets the Attempts, State, LastStatus, LastError,
	// NextAttemptAt and DeliveredAt of the stored delivery d.ID; an
	// unknown id is ECodeNotFound.
	UpdateDelivery(ctx context.Context, d *berth.Delivery) error
	// Deliveries returns up to limit (0: all) of a webhook's deliveries,
	// newest first; an unknown webhook has none.
	Deliveries(ctx context.Context, webhookID string, limit int) ([]*berth.Delivery, error)
	// Delivery returns one delivery; an unknown id is ECodeNotFound.
	Delivery(ctx context.Context, id string) (*berth.Delivery, error)
}

// MaxDeliveriesPerAdd is the most deliveries one AddDeliveries call adds.
const MaxDeliveriesPerAdd = 1000

// ControlWatcher is implemented by stores that other programs may write
// worker controls to directly (PostgreSQL, where a trigger NOTIFYs). The
// controller re-reads the controls whenever the channel delivers.
type ControlWatcher interface {
	// WatchControls returns a channel that receives a value soon after any
	// write to the worker controls, by anyone, until ctx ends; then it is
	// closed. Notifications may be coalesced. A broken connection is
	// re-established; the channel also delivers after each reconnect, so
	// that writes missed meanwhile are read.
	WatchControls(ctx context.Context) (<-chan struct{}, error)
}

// Leadership is implemented by stores several servers may share
// (PostgreSQL): exactly one server leads — runs the controller, schedules
// and holds the agent sessions — and the others stand by.
type Leadership interface {
	// Lead blocks until this server leads or ctx ends, then records self
	// as the leader. It returns a channel closed when leadership is lost
	// (the connection holding it broke and could not be confirmed within
	// the lease): the server must stop leading at once.
	Lead(ctx context.Context, self string) (lost <-chan struct{}, err error)
	// Leader returns the URL of the server that leads now, or "" when none
	// does.
	Leader(ctx context.Context) (string, error)
}

// JobDetail reads a job and its attempts from s, and, when s is a
// FederationStore, the handles of a job handed to a federation peer; an
// unknown id returns ECodeNotFound.
func JobDetail(ctx context.Context, s JobReader, id string) (*berth.JobDetail, error) {
	j, err := s.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	attempts, err := s.Attempts(ctx, id)
	if err != nil {
		return nil, err
	}
	d := &berth.JobDetail{Job: j, AttemptList: attempts}
	if fs, ok := s.(FederationStore); ok { // a job handed to a peer: its handles
		if d.Handoffs, err = fs.Handoffs(ctx, id); err != nil {
			return nil, err
		}
		if len(d.Handoffs) == 0 {
			d.Handoffs = nil
		}
	}
	return d, nil
}

// ErrStopped is the error of a commit made after the committer stopped.
var ErrStopped = berth.Errorf(berth.ECodeUnavailable, "store writer stopped")

// Compact folds writes that a later write of the same batch supersedes:
// updates of jobs created in the batch go into the created row, only the
// last upsert of each attempt, worker, quota rule and worker control and
// the last progress of each attempt are kept, and a rule the batch deletes
// is neither upserted nor deleted twice. The result writes the same final
// state with fewer statements.
func (b *Batch) Compact() {
	if len(b.Jobs) > 0 && len(b.JobUpdates) > 0 {
		created := make(map[string]*berth.Job, len(b.Jobs))
		for _, j := range b.Jobs {
			created[j.ID] = j
		}
		kept := b.JobUpdates[:0]
		for _, u := range b.JobUpdates {
			if j := created[u.ID]; j != nil {
				u.applyTo(j)
			} else {
				kept = append(kept, u)
			}
		}
		clear(b.JobUpdates[len(kept):])
		b.JobUpdates = kept
	}
	*b = *b.Deduplicated()
	b.compactQuotas()
}

// Deduplicated returns a batch with the writes of b less those a later
// write of the same list supersedes: the last update of each job, the last
// upsert of each attempt, worker, quota rule and worker control, the last
// progress of each attempt, each quota delete once, and the federation's
// (FederationBatch.deduplicated). b is not changed;
// the lists of the result may share b's arrays. Applying each list of the
// result as one set-based statement, in the order of sqlstore.Steps,
// leaves what applying b does.
func (b *Batch) Deduplicated() *Batch {
	d := *b
	d.JobUpdates = lastByID(b.JobUpdates, func(u JobUpdate) string { return u.ID })
	d.Attempts = lastByID(b.Attempts, func(a *berth.Attempt) string { return a.ID })
	d.Workers = lastByID(b.Workers, func(w *berth.Worker) string { return w.ID })
	d.Quotas = lastByID(b.Quotas, func(q *berth.QuotaRule) string { return q.ID() })
	d.QuotaDeletes = lastByID(b.QuotaDeletes, func(id string) string { return id })
	d.Controls = lastByID(b.Controls, func(c *berth.WorkerControl) string { return c.ID() })
	d.Progress = lastByID(b.Progress, func(p AttemptProgress) string { return p.AttemptID })
	d.Federation = b.Federation.deduplicated()
	return &d
}

// compactQuotas drops the upserts of rules that the batch, already
// deduplicated, also deletes (deletes apply after upserts).
func (b *Batch) compactQuotas() {
	if len(b.Quotas) > 0 && len(b.QuotaDeletes) > 0 {
		b.Quotas = slices.DeleteFunc(b.Quotas, func(q *berth.QuotaRule) bool {
			return slices.Contains(b.QuotaDeletes, q.ID())
		})
	}
}

// applyTo sets the fields u updates on j.
func (u *JobUpdate) applyTo(j *berth.Job) {
	j.State, j.Reason, j.ExitCode, j.Attempts, j.StartedAt, j.FinishedAt =
		u.State, u.Reason, u.ExitCode, u.Attempts, u.StartedAt, u.FinishedAt
}

// dropSuperseded removes from list, in place, the entries whose id is that
// of an entry of later.
func dropSuperseded[T, U any](list []T, id func(T) string, later []U, laterID func(U) string) []T {
	if len(list) == 0 || len(later) == 0 {
		return list
	}
	superseded := make(map[string]bool, len(later))
	for _, v := range later {
		superseded[laterID(v)] = true
	}
	return slices.DeleteFunc(list, func(v T) bool { return superseded[id(v)] })
}

// lastByID keeps the last entry of each id, in the order of those last
// entries.
func lastByID[T any](list []T, id func(T) string) []T {
	if len(list) < 2 {
		return list
	}
	last := make(map[string]int, len(list))
	for i, v := range list {
		last[id(v)] = i
	}
	if len(last) == len(list) {
		return list
	}
	kept := make([]T, 0, len(last))
	for i, v := range list {
		if last[id(v)] == i {
			kept = append(kept, v)
		}
	}
	return kept
}
