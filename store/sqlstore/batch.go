package sqlstore

import "github.com/berth-dev/berth/store"

// StepID names one step of writing a store.Batch; the constants are in
// the order of the steps (see Steps).
type StepID int

// The steps of writing a batch, in the order every driver takes them in
// one transaction. Within each list a later entry for the same id wins
// (store.Batch.Deduplicated keeps only it). Quota deletes come after quota
// upserts, so a batch holding both an upsert and a delete of one rule
// deletes it; progress comes after attempt upserts, which write an
// attempt's Progress too (store.Batch.Append relies on both); likewise
// peer deletes come after peer upserts. The federation's lists come after
// the jobs, so that a changelog row is written with its change. After the
// last step a driver deletes the events the batch's push out of those
// kept (PruneEvents). A new kind of row is a new constant here, its entry
// in Steps, and its statement in each driver.
const (
	InsertJobs StepID = iota
	UpdateJobs
	UpsertAttempts
	UpsertWorkers
	UpsertQuotas
	DeleteQuotas
	UpsertControls
	SetProgress
	AppendLogs
	InsertEvents
	UpsertPeers
	DeletePeers
	UpsertHandoffs
	UpsertCursors
	InsertReceived
	InsertChangelog
	UpsertAcks
	SetJobClusters
	// StepCount is how many steps there are, the length of Steps.
	StepCount
)

// Step writes one list of a store.Batch.
type Step struct {
	// What names the step in errors ("insert jobs").
	What string
	// Len returns how many rows of b the step writes.
	Len func(b *store.Batch) int
	// Row returns the values of row i of b, in the column order of the
	// step's statement (the ...Columns constant of its table). It fails
	// if a value cannot be encoded.
	Row func(b *store.Batch, i int) ([]any, error)
}

// Steps are the steps of a batch, indexed by StepID and so in the order
// they are written. Drivers hold their statement of each step in an array
// indexed by StepID too, of length StepCount.
var Steps = [StepCount]Step{
	InsertJobs: {"insert jobs",
		func(b *store.Batch) int { return len(b.Jobs) },
		func(b *store.Batch, i int) ([]any, error) { return JobRow(b.Jobs, i) }},
	UpdateJobs: {"update jobs",
		func(b *store.Batch) int { return len(b.JobUpdates) },
		func(b *store.Batch, i int) ([]any, error) { return JobUpdateRow(&b.JobUpdates[i]), nil }},
	UpsertAttempts: {"upsert attempts",
		func(b *store.Batch) int { return len(b.Attempts) },
		func(b *store.Batch, i int) ([]any, error) { return AttemptRow(b.Attempts[i]), nil }},
	UpsertWorkers: {"upsert workers",
		func(b *store.Batch) int { return len(b.Workers) },
		func(b *store.Batch, i int) ([]any, error) { return WorkerRow(b.Workers[i]) }},
	UpsertQuotas: {"upsert quota rules",
		func(b *store.Batch) int { return len(b.Quotas) },
		func(b *store.Batch, i int) ([]any, error) { return QuotaRow(b.Quotas[i]), nil }},
	DeleteQuotas: {"delete quota rules",
		func(b *store.Batch) int { return len(b.QuotaDeletes) },
		func(b *store.Batch, i int) ([]any, error) { return []any{b.QuotaDeletes[i]}, nil }},
	UpsertControls: {"upsert worker controls",
		func(b *store.Batch) int { return len(b.Controls) },
		func(b *store.Batch, i int) ([]any, error) { return ControlRow(b.Controls[i]), nil }},
	SetProgress: {"set progress",
		func(b *store.Batch) int { return len(b.Progress) },
		func(b *store.Batch, i int) ([]any, error) { return ProgressRow(&b.Progress[i]), nil }},
	AppendLogs: {"append logs",
		func(b *store.Batch) int { return len(b.Logs) },
		func(b *store.Batch, i int) ([]any, error) { return LogRow(&b.Logs[i]), nil }},
	InsertEvents: {"insert events",
		func(b *store.Batch) int { return len(b.Events) },
		func(b *store.Batch, i int) ([]any, error) { return EventRow(b.Events[i]) }},
	UpsertPeers: {"upsert peers",
		func(b *store.Batch) int { return fedLen(b, func(f *store.FederationBatch) int { return len(f.Peers) }) },
		func(b *store.Batch, i int) ([]any, error) { return PeerRow(b.Federation.Peers[i]), nil }},
	DeletePeers: {"delete peers",
		func(b *store.Batch) int {
			return fedLen(b, func(f *store.FederationBatch) int { return len(f.PeerDeletes) })
		},
		func(b *store.Batch, i int) ([]any, error) { return []any{b.Federation.PeerDeletes[i]}, nil }},
	UpsertHandoffs: {"upsert handoffs",
		func(b *store.Batch) int {
			return fedLen(b, func(f *store.FederationBatch) int { return len(f.Handoffs) })
		},
		func(b *store.Batch, i int) ([]any, error) { return HandoffRow(b.Federation.Handoffs[i]), nil }},
	UpsertCursors: {"upsert peer cursors",
		func(b *store.Batch) int {
			return fedLen(b, func(f *store.FederationBatch) int { return len(f.Cursors) })
		},
		func(b *store.Batch, i int) ([]any, error) { return CursorRow(&b.Federation.Cursors[i]), nil }},
	InsertReceived: {"insert received jobs",
		func(b *store.Batch) int {
			return fedLen(b, func(f *store.FederationBatch) int { return len(f.Received) })
		},
		func(b *store.Batch, i int) ([]any, error) { return ReceivedRow(&b.Federation.Received[i]), nil }},
	InsertChangelog: {"insert changelog",
		func(b *store.Batch) int {
			return fedLen(b, func(f *store.FederationBatch) int { return len(f.Changelog) })
		},
		func(b *store.Batch, i int) ([]any, error) { return ChangelogRow(&b.Federation.Changelog[i]), nil }},
	UpsertAcks: {"upsert origin acks",
		func(b *store.Batch) int { return fedLen(b, func(f *store.FederationBatch) int { return len(f.Acks) }) },
		func(b *store.Batch, i int) ([]any, error) { return AckRow(&b.Federation.Acks[i]), nil }},
	SetJobClusters: {"set job clusters",
		func(b *store.Batch) int {
			return fedLen(b, func(f *store.FederationBatch) int { return len(f.JobClusters) })
		},
		func(b *store.Batch, i int) ([]any, error) {
			c := &b.Federation.JobClusters[i]
			return []any{c.Cluster, c.JobID}, nil
		}},
}

// fedLen returns n of b's federation writes, 0 when it has none.
func fedLen(b *store.Batch, n func(f *store.FederationBatch) int) int {
	if b.Federation == nil {
		return 0
	}
	return n(b.Federation)
}

// ProgressRow returns the values a progress report sets: the progress,
// then the attempt's id.
func ProgressRow(p *store.AttemptProgress) []any { return []any{p.Progress, p.AttemptID} }
