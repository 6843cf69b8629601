// Package sqlstore is what the SQL drivers of store.Store (sqlite,
// postgres) share: the rows berth types are stored as, the steps a batch
// is written in (Steps, in their one order), and the reads of store.Store,
// written once over a query function and the little SQL that differs
// between the drivers (Dialect).
//
// Both schemas use the same tables and columns: times are unix
// nanoseconds (0 for the zero time), so that they round-trip exactly; a
// job's spec, a worker and an event are JSON. The one difference is the
// time of a worker control, which PostgreSQL also keeps as a timestamptz
// for plain SQL (Dialect.ControlTime names the nanoseconds).
package sqlstore

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"
	"unsafe"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// Columns of each table, in the order of the values their Row functions
// return and their reads scan.
const (
	JobColumns       = `id, queue, user_name, idempotency_key, spec, array_index, state, reason, exit_code, attempts, created_at, started_at, finished_at, parent, cluster, array_id`
	JobUpdateColumns = `id, state, reason, exit_code, attempts, started_at, finished_at`
	AttemptColumns   = `id, job_id, task_index, worker_id, host, gpus, state, exit_code, reason, created_at, started_at, finished_at, port, progress, service_port, phase, failure_class`
	WorkerColumns    = `id, body`
	QuotaColumns     = `id, scope, name, max_gpus, max_jobs, weight, updated_at`
	// ControlColumns name every column but the time, which is
	// Dialect.ControlTime.
	ControlColumns = `host_label, queue, desired_state, stop_policy, requested_by`
	LogColumns     = `attempt_id, off, data, stream`
	EventColumns   = `seq, body`
)

// Upserts end an INSERT INTO attempts, workers, quota_rules or
// worker_controls: on a conflict they set every column but the key from
// the row inserted (PostgreSQL's worker_controls has one more to set).
const (
	AttemptUpsert = ` ON CONFLICT (id) DO UPDATE SET worker_id = excluded.worker_id, host = excluded.host, gpus = excluded.gpus,
		state = excluded.state, exit_code = excluded.exit_code, reason = excluded.reason,
		started_at = excluded.started_at, finished_at = excluded.finished_at, port = excluded.port, progress = excluded.progress,
		service_port = excluded.service_port, phase = excluded.phase, failure_class = excluded.failure_class`
	WorkerUpsert = ` ON CONFLICT (id) DO UPDATE SET body = excluded.body`
	QuotaUpsert  = ` ON CONFLICT (id) DO UPDATE SET scope = excluded.scope, name = excluded.name, max_gpus = excluded.max_gpus,
		max_jobs = excluded.max_jobs, weight = excluded.weight, updated_at = excluded.updated_at`
	ControlUpsert = ` ON CONFLICT (host_label, queue) DO UPDATE SET desired_state = excluded.desired_state,
		stop_policy = excluded.stop_policy, requested_by = excluded.requested_by, updated_at = excluded.updated_at`
)

// JobRow returns the values of the row of jobs[i], in JobColumns order.
// A job of an array whose spec is that of the array's first job, earlier
// in jobs, stores the JSON null as its spec and the first job's id in
// array_id: an array's spec is stored once. It fails if the spec cannot
// be encoded.
func JobRow(jobs []*berth.Job, i int) ([]any, error) {
	j := jobs[i]
	var spec []byte
	var arrayID any
	if head := arrayHead(jobs, i); head != nil {
		spec, arrayID = nullSpec, head.ID
	} else {
		var err error
		if spec, err = json.Marshal(&j.JobSpec); err != nil {
			return nil, fmt.Errorf("encode job %s: %w", j.ID, err)
		}
	}
	return []any{j.ID, j.Queue, j.User, nullString(j.IdempotencyKey), spec, nullInt(j.ArrayIndex), string(j.State), j.Reason,
		nullInt(j.ExitCode), j.Attempts, nanos(j.CreatedAt), nanos(j.StartedAt), nanos(j.FinishedAt), nullString(j.Parent),
		nil, arrayID}, nil
}

// JobSpecColumn is the expression of a job's spec in a query of jobs:
// its own, or its array's first job's (JobRow).
const JobSpecColumn = `coalesce((SELECT h.spec FROM jobs h WHERE h.id = jobs.array_id), jobs.spec)`

// nullSpec is the spec column of a job that shares its array's first
// job's spec (array_id).
var nullSpec = []byte("null")

// arrayHead returns the first job of the array of jobs[i] when it is in
// jobs, before i, and has the same spec; nil otherwise (also for the first
// job itself, and for a job of no array).
func arrayHead(jobs []*berth.Job, i int) *berth.Job {
	j := jobs[i]
	if j.ArrayIndex == nil || *j.ArrayIndex <= 0 || *j.ArrayIndex > i {
		return nil
	}
	head := jobs[i-*j.ArrayIndex]
	if head.ArrayIndex == nil || *head.ArrayIndex != 0 || !sameSpec(&head.JobSpec, &j.JobSpec) {
		return nil
	}
	return head
}

// sameSpec reports whether a and b are equal. The jobs of an array hold
// copies of one spec, equal byte for byte (their strings, slices and maps
// are the same memory): those are told equal without reflection, which
// at a job each was most of what writing an array's rows cost. Other
// specs are compared in full.
func sameSpec(a, b *berth.JobSpec) bool {
	size := unsafe.Sizeof(*a)
	if bytes.Equal(unsafe.Slice((*byte)(unsafe.Pointer(a)), size), unsafe.Slice((*byte)(unsafe.Pointer(b)), size)) {
		return true
	}
	return reflect.DeepEqual(a, b)
}

// JobUpdateRow returns the values u sets, in JobUpdateColumns order.
func JobUpdateRow(u *store.JobUpdate) []any {
	return []any{u.ID, string(u.State), u.Reason, nullInt(u.ExitCode), u.Attempts, nanos(u.StartedAt), nanos(u.FinishedAt)}
}

// AttemptRow returns the values of a's row, in AttemptColumns order.
func AttemptRow(a *berth.Attempt) []any {
	return []any{a.ID, a.JobID, a.TaskIndex, a.WorkerID, a.Host, gpuList(a.GPUs), string(a.State), nullInt(a.ExitCode), a.Reason,
		nanos(a.CreatedAt), nanos(a.StartedAt), nanos(a.FinishedAt), a.Port, a.Progress, a.ServicePort, a.Phase, a.FailureClass}
}

// gpuList returns GPU indexes as JSON, as encoding/json writes them: null
// for none, [0,2] for two.
func gpuList(gpus []int) string {
	if gpus == nil {
		return "null"
	}
	b := make([]byte, 0, 2+3*len(gpus))
	b = append(b, '[')
	for i, g := range gpus {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(g), 10)
	}
	return string(append(b, ']'))
}

// WorkerRow returns the values of w's row, in WorkerColumns order. It fails
// if w cannot be encoded.
func WorkerRow(w *berth.Worker) ([]any, error) {
	body, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode worker %s: %w", w.ID, err)
	}
	return []any{w.ID, body}, nil
}

// QuotaRow returns the values of q's row, in QuotaColumns order.
func QuotaRow(q *berth.QuotaRule) []any {
	return []any{q.ID(), q.Scope, q.Name, q.MaxGPUs, q.MaxJobs, q.Weight, nanos(q.UpdatedAt)}
}

// ControlRow returns the values of c's row, in ControlColumns order, then
// its time in unix nanoseconds.
func ControlRow(c *berth.WorkerControl) []any {
	return []any{c.Host, c.Queue, c.DesiredState, c.StopPolicy, c.RequestedBy, nanos(c.UpdatedAt)}
}

// LogRow returns the values of l's row, in LogColumns order.
func LogRow(l *store.LogChunk) []any {
	return []any{l.AttemptID, l.Offset, l.Data, l.Stream}
}

// EventRow returns the values of e's row, in EventColumns order. It fails
// if e cannot be encoded.
func EventRow(e *berth.Event) ([]any, error) {
	body, err := e.AppendJSON(make([]byte, 0, 256))
	if err != nil {
		return nil, fmt.Errorf("encode event %d: %w", e.Seq, err)
	}
	return []any{int64(e.Seq), body}, nil
}

// pruneEvents deletes the events with seq at most $1, the newest seq less
// store.KeptEvents. Each earlier write of events deleted those at most its
// own newest seq less store.KeptEvents, so what is left to delete lies
// above the newest seq before $2 (the batch's oldest) less
// store.KeptEvents: that lower bound keeps the range to the rows deleted
// now. Without it, PostgreSQL's scan of the primary key would walk every
// entry deleted before, until VACUUM removes them, on every write.
var pruneEvents = `DELETE FROM events WHERE seq <= $1
	AND seq > (SELECT coalesce(max(seq), 0) FROM events WHERE seq < $2) - ` + strconv.Itoa(store.KeptEvents)

// PruneEvents returns the statement, and its arguments, that deletes the
// stored events that events, a batch's, push out of the newest
// store.KeptEvents: those whose seq is more than store.KeptEvents below
// the newest, which leaves exactly the newest store.KeptEvents when seqs
// are consecutive (as the controller numbers them). It runs after their
// insert, in the same transaction, and uses the primary key only. ok is
// false when there is nothing to delete: no events, or too few in all.
// The statement's placeholders ($1, $2) suit both drivers.
func PruneEvents(events []*berth.Event) (query string, args []any, ok bool) {
	if len(events) == 0 {
		return "", nil, false
	}
	oldest, newest := events[0].Seq, events[0].Seq
	for _, e := range events[1:] {
		oldest, newest = min(oldest, e.Seq), max(newest, e.Seq)
	}
	if newest <= store.KeptEvents {
		return "", nil, false
	}
	return pruneEvents, []any{int64(newest - store.KeptEvents), int64(oldest)}, true
}

// nanos returns t in unix nanoseconds, 0 for the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromNanos is the inverse of nanos, in UTC.
func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func nullInt(p *int) any {
	if p == nil {
		return nil
	}
	return int64(*p)
}

// nullString is s as a column value: NULL when empty.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// intCell is an integer column that may be NULL, scanned without
// database/sql's conversions (which format and parse each integer it
// stores in an int64 or a sql.NullInt64): a start reads millions.
type intCell struct {
	v     int64
	valid bool
}

// Scan implements sql.Scanner for the integers both drivers return.
func (c *intCell) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*c = intCell{}
	case int64:
		*c = intCell{v, true}
	case int32:
		*c = intCell{int64(v), true}
	case int:
		*c = intCell{int64(v), true}
	default:
		return fmt.Errorf("an integer column holds %T", src)
	}
	return nil
}

// ptr returns the cell as an *int, nil for NULL.
func (c intCell) ptr() *int {
	if !c.valid {
		return nil
	}
	v := int(c.v)
	return &v
}

func intPtr(n sql.NullInt64) *int {
	if !n.Valid {
		return nil
	}
	v := int(n.Int64)
	return &v
}

// scanner is one row of a result.
type scanner interface{ Scan(dest ...any) error }

// scanJobRow reads a job's row of JobColumns, all but its spec (see
// setSpec): it returns the spec column, the id of the job whose spec the
// job shares (array_id; "" when it has its own), and the cluster a
// handoff set (nil: the spec's).
func scanJobRow(row scanner) (j *berth.Job, spec []byte, head string, cluster *string, err error) {
	var (
		state                                                 string
		key, parent, headID, clust                            sql.NullString
		arrayIndex, exitCode, attempts, created, started, end intCell
	)
	j = &berth.Job{}
	if err := row.Scan(&j.ID, &j.Queue, &j.User, &key, &spec, &arrayIndex, &state, &j.Reason, &exitCode, &attempts,
		&created, &started, &end, &parent, &clust, &headID); err != nil {
		return nil, nil, "", nil, err
	}
	j.IdempotencyKey, j.Parent, j.Attempts = key.String, parent.String, int(attempts.v)
	j.ArrayIndex, j.State, j.ExitCode = arrayIndex.ptr(), berth.JobState(state), exitCode.ptr()
	j.CreatedAt, j.StartedAt, j.FinishedAt = fromNanos(created.v), fromNanos(started.v), fromNanos(end.v)
	if clust.Valid {
		cluster = &clust.String
	}
	return j, spec, headID.String, cluster, nil
}

// setSpec sets the spec of j, read by scanJobRow, to spec, less what its
// own columns keep: queue, user, idempotency key, parent, and cluster
// when not nil. The job shares spec's slices and maps.
func setSpec(j *berth.Job, spec *berth.JobSpec, cluster *string) {
	queue, user, key, parent := j.Queue, j.User, j.IdempotencyKey, j.Parent
	j.JobSpec = *spec
	j.Queue, j.User, j.IdempotencyKey, j.Parent = queue, user, key, parent
	if cluster != nil {
		j.Cluster = *cluster
	}
}

// sharedSpec is a job read whose spec is its array's first job's (head),
// set once the read is over.
type sharedSpec struct {
	job     *berth.Job
	head    string
	cluster *string
}

// specCache holds the specs decoded while reading jobs: by the id of the
// job that stores them (an array's first job, for the other jobs of the
// array), and by their JSON for the jobs that store their own. Each spec
// is decoded once and the jobs that have it share it, as the jobs a
// submission creates share their spec's command, environment and labels.
type specCache struct {
	byHead map[string]*berth.JobSpec
	byJSON map[string]*berth.JobSpec
}

func newSpecCache() *specCache {
	return &specCache{byHead: map[string]*berth.JobSpec{}, byJSON: map[string]*berth.JobSpec{}}
}

// decode returns the spec stored as data, decoded once; id names the job
// in errors.
func (c *specCache) decode(id string, data []byte) (*berth.JobSpec, error) {
	if spec := c.byJSON[string(data)]; spec != nil {
		return spec, nil
	}
	spec := new(berth.JobSpec)
	if err := json.Unmarshal(data, spec); err != nil {
		return nil, fmt.Errorf("decode job %s: %w", id, err)
	}
	c.byJSON[string(data)] = spec
	return spec, nil
}

func scanAttempt(row scanner) (*berth.Attempt, error) {
	var (
		a                          berth.Attempt
		gpus, state                string
		exitCode                   sql.NullInt64
		created, started, finished int64
	)
	if err := row.Scan(&a.ID, &a.JobID, &a.TaskIndex, &a.WorkerID, &a.Host, &gpus, &state, &exitCode, &a.Reason,
		&created, &started, &finished, &a.Port, &a.Progress, &a.ServicePort, &a.Phase, &a.FailureClass); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(gpus), &a.GPUs); err != nil {
		return nil, fmt.Errorf("decode attempt %s: %w", a.ID, err)
	}
	a.State, a.ExitCode = berth.AttemptState(state), intPtr(exitCode)
	a.CreatedAt, a.StartedAt, a.FinishedAt = fromNanos(created), fromNanos(started), fromNanos(finished)
	return &a, nil
}

func scanWorker(row scanner) (*berth.Worker, error) {
	_, w, err := scanJSON[string, berth.Worker](row, "worker")
	return w, err
}

func scanQuota(row scanner) (*berth.QuotaRule, error) {
	var (
		q       berth.QuotaRule
		id      string
		updated int64
	)
	if err := row.Scan(&id, &q.Scope, &q.Name, &q.MaxGPUs, &q.MaxJobs, &q.Weight, &updated); err != nil {
		return nil, err
	}
	q.UpdatedAt = fromNanos(updated)
	return &q, nil
}

func scanControl(row scanner) (*berth.WorkerControl, error) {
	var (
		c       berth.WorkerControl
		updated int64
	)
	if err := row.Scan(&c.Host, &c.Queue, &c.DesiredState, &c.StopPolicy, &c.RequestedBy, &updated); err != nil {
		return nil, err
	}
	c.UpdatedAt = fromNanos(updated)
	return &c, nil
}

// scanEvent reads an event's row. Its time comes back in UTC, as every
// other time the store reads.
func scanEvent(row scanner) (*berth.Event, error) {
	seq, e, err := scanJSON[int64, berth.Event](row, "event")
	if err != nil {
		return nil, err
	}
	e.Seq, e.Time = uint64(seq), e.Time.UTC()
	return e, nil
}

// scanJSON reads a row of a key and a JSON body, decoded into a new T;
// kind names the row in errors.
func scanJSON[K, T any](row scanner, kind string) (key K, v *T, err error) {
	var body []byte
	if err := row.Scan(&key, &body); err != nil {
		return key, nil, err
	}
	v = new(T)
	if err := json.Unmarshal(body, v); err != nil {
		return key, nil, fmt.Errorf("decode %s %v: %w", kind, key, err)
	}
	return key, v, nil
}
