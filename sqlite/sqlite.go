// Package sqlite is the embedded Store: one SQLite file in WAL mode, written
// through a single connection with synchronous=FULL (every commit is fsynced
// before Write returns) and read through a pool of read-only connections.
// It is pure Go (modernc.org/sqlite), so Berth builds without cgo.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store on one SQLite file.
type Store struct {
	w *sql.DB // one connection: the only writer
	r *sql.DB // read-only pool

	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt // prepared on w, by query: parsed once
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database at path and applies pending
// migrations. It returns an error if the file cannot be opened or migrated.
func Open(ctx context.Context, path string) (*Store, error) {
	dsn := func(extra string) string {
		q := url.Values{}
		q.Add("_pragma", "busy_timeout(10000)")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(FULL)")
		q.Add("_pragma", "foreign_keys(OFF)")
		if extra != "" {
			q.Add("_pragma", extra)
		}
		q.Set("_txlock", "immediate")
		return "file:" + path + "?" + q.Encode()
	}
	w, err := sql.Open("sqlite", dsn(""))
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if err := store.Migrate(ctx, w, migrations, "migrations"); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn("query_only(1)"))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	r.SetMaxOpenConns(8)
	r.SetMaxIdleConns(8)
	return &Store{w: w, r: r, stmts: map[string]*sql.Stmt{}}, nil
}

// Close closes both connection pools.
func (s *Store) Close() error { return errors.Join(s.r.Close(), s.w.Close()) }

// prepared returns the statements for queries, in their order, preparing
// on the writer connection those not seen before. Write's queries are few
// shapes, so each is parsed once. It must run outside a transaction: the writer has
// one connection, which a transaction holds.
func (s *Store) prepared(ctx context.Context, queries []string) ([]*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	stmts := make([]*sql.Stmt, len(queries))
	for i, q := range queries {
		st := s.stmts[q]
		if st == nil {
			var err error
			if st, err = s.w.PrepareContext(ctx, q); err != nil {
				return nil, err
			}
			s.stmts[q] = st
		}
		stmts[i] = st
	}
	return stmts, nil
}

const jobColumns = `id, queue, user_name, idempotency_key, spec, array_index, state, reason, exit_code, attempts, created_at, started_at, finished_at`

const attemptColumns = `id, job_id, task_index, worker_id, host, gpus, state, exit_code, reason, created_at, started_at, finished_at, port, progress`

const quotaColumns = `id, scope, name, max_gpus, max_jobs, weight, updated_at`

const controlColumns = `host_label, queue, desired_state, stop_policy, requested_by, updated_at`

// Write applies b in one transaction and returns once it is fsynced.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
	ops, err := planBatch(b)
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	queries := make([]string, len(ops))
	for i, op := range ops {
		queries[i] = op.query
	}
	stmts, err := s.prepared(ctx, queries)
	if err != nil {
		return fmt.Errorf("write: prepare: %w", err)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("write: begin: %w", err)
	}
	defer tx.Rollback()
	for i, op := range ops {
		res, err := tx.StmtContext(ctx, stmts[i]).ExecContext(ctx, op.args...)
		if err != nil {
			return fmt.Errorf("write: %s: %w", op.what, err)
		}
		if op.mustUpdate {
			if n, _ := res.RowsAffected(); n != 1 {
				return fmt.Errorf("write: %s: no such job", op.what)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("write: commit: %w", err)
	}
	return nil
}

// writeOp is one statement of a batch.
type writeOp struct {
	what       string // for errors
	query      string
	args       []any
	mustUpdate bool // an update that must hit exactly one row
}

const (
	insertJobs     = `INSERT INTO jobs (` + jobColumns + `) VALUES `
	updateJob      = `UPDATE jobs SET state = ?, reason = ?, exit_code = ?, attempts = ?, started_at = ?, finished_at = ? WHERE id = ?`
	upsertAttempts = `INSERT INTO attempts (` + attemptColumns + `) VALUES `
	attemptsTail   = ` ON CONFLICT (id) DO UPDATE SET worker_id = excluded.worker_id, host = excluded.host, gpus = excluded.gpus,
		state = excluded.state, exit_code = excluded.exit_code, reason = excluded.reason,
		started_at = excluded.started_at, finished_at = excluded.finished_at, port = excluded.port, progress = excluded.progress`
	upsertWorker = `INSERT INTO workers (id, body) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET body = excluded.body`
	upsertQuota  = `INSERT INTO quota_rules (` + quotaColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET scope = excluded.scope, name = excluded.name, max_gpus = excluded.max_gpus,
		max_jobs = excluded.max_jobs, weight = excluded.weight, updated_at = excluded.updated_at`
	deleteQuota   = `DELETE FROM quota_rules WHERE id = ?`
	upsertControl = `INSERT INTO worker_controls (` + controlColumns + `) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (host_label, queue) DO UPDATE SET desired_state = excluded.desired_state,
		stop_policy = excluded.stop_policy, requested_by = excluded.requested_by, updated_at = excluded.updated_at`
	updateProgress = `UPDATE attempts SET progress = ? WHERE id = ?`
	insertLogs     = `INSERT INTO logs (attempt_id, off, data) VALUES `
)

// planBatch turns b into statements in the order Batch documents.
func planBatch(b *store.Batch) ([]writeOp, error) {
	var ops []writeOp
	var err error
	if ops, err = insertRows(ops, "insert jobs", insertJobs, 13, len(b.Jobs), "",
		func(i int, args []any) error { return jobArgs(b.Jobs[i], args) }); err != nil {
		return nil, err
	}
	for _, u := range b.JobUpdates {
		ops = append(ops, writeOp{what: "update job " + u.ID, query: updateJob, mustUpdate: true,
			args: []any{string(u.State), u.Reason, nullInt(u.ExitCode), u.Attempts, nanos(u.StartedAt), nanos(u.FinishedAt), u.ID}})
	}
	if ops, err = insertRows(ops, "upsert attempts", upsertAttempts, 14, len(b.Attempts), attemptsTail,
		func(i int, args []any) error { return attemptArgs(b.Attempts[i], args) }); err != nil {
		return nil, err
	}
	for _, w := range b.Workers {
		body, err := json.Marshal(w)
		if err != nil {
			return nil, fmt.Errorf("encode worker %s: %w", w.ID, err)
		}
		ops = append(ops, writeOp{what: "upsert worker " + w.ID, query: upsertWorker, args: []any{w.ID, body}})
	}
	for _, q := range b.Quotas {
		ops = append(ops, writeOp{what: "upsert quota rule " + q.ID(), query: upsertQuota,
			args: []any{q.ID(), q.Scope, q.Name, q.MaxGPUs, q.MaxJobs, q.Weight, nanos(q.UpdatedAt)}})
	}
	for _, id := range b.QuotaDeletes {
		ops = append(ops, writeOp{what: "delete quota rule " + id, query: deleteQuota, args: []any{id}})
	}
	for _, c := range b.Controls {
		ops = append(ops, writeOp{what: "upsert worker control " + c.ID(), query: upsertControl,
			args: []any{c.Host, c.Queue, c.DesiredState, c.StopPolicy, c.RequestedBy, nanos(c.UpdatedAt)}})
	}
	for _, p := range b.Progress {
		ops = append(ops, writeOp{what: "set progress of attempt " + p.AttemptID, query: updateProgress,
			args: []any{p.Progress, p.AttemptID}})
	}
	return insertRows(ops, "append logs", insertLogs, 3, len(b.Logs), "",
		func(i int, args []any) error {
			l := b.Logs[i]
			args[0], args[1], args[2] = l.AttemptID, l.Offset, l.Data
			return nil
		})
}

// rowsPerInsert is how many rows one multi-row INSERT carries: far fewer
// statements for large batches, well under SQLite's 32,766 parameters.
const rowsPerInsert = 128

// insertRows appends to ops the inserts of n rows of cols values each,
// rowsPerInsert at a time, with fill setting the arguments of row i.
func insertRows(ops []writeOp, what, head string, cols, n int, tail string, fill func(i int, args []any) error) ([]writeOp, error) {
	placeholders := "(" + strings.Repeat("?, ", cols-1) + "?)"
	for start := 0; start < n; start += rowsPerInsert {
		rows := min(rowsPerInsert, n-start)
		args := make([]any, cols*rows)
		for i := 0; i < rows; i++ {
			if err := fill(start+i, args[i*cols:(i+1)*cols]); err != nil {
				return nil, err
			}
		}
		ops = append(ops, writeOp{what: what, args: args,
			query: head + strings.TrimSuffix(strings.Repeat(placeholders+", ", rows), ", ") + tail})
	}
	return ops, nil
}

func jobArgs(j *berth.Job, args []any) error {
	spec, err := json.Marshal(&j.JobSpec)
	if err != nil {
		return fmt.Errorf("encode job %s: %w", j.ID, err)
	}
	var key any
	if j.IdempotencyKey != "" {
		key = j.IdempotencyKey
	}
	args[0], args[1], args[2], args[3], args[4] = j.ID, j.Queue, j.User, key, spec
	args[5], args[6], args[7], args[8], args[9] = nullInt(j.ArrayIndex), string(j.State), j.Reason, nullInt(j.ExitCode), j.Attempts
	args[10], args[11], args[12] = nanos(j.CreatedAt), nanos(j.StartedAt), nanos(j.FinishedAt)
	return nil
}

func attemptArgs(a *berth.Attempt, args []any) error {
	gpus, err := json.Marshal(a.GPUs)
	if err != nil {
		return fmt.Errorf("encode attempt %s: %w", a.ID, err)
	}
	args[0], args[1], args[2], args[3], args[4], args[5] = a.ID, a.JobID, a.TaskIndex, a.WorkerID, a.Host, string(gpus)
	args[6], args[7], args[8] = string(a.State), nullInt(a.ExitCode), a.Reason
	args[9], args[10], args[11], args[12], args[13] = nanos(a.CreatedAt), nanos(a.StartedAt), nanos(a.FinishedAt), a.Port, a.Progress
	return nil
}

func nullInt(p *int) any {
	if p == nil {
		return nil
	}
	return int64(*p)
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func intPtr(n sql.NullInt64) *int {
	if !n.Valid {
		return nil
	}
	v := int(n.Int64)
	return &v
}

type scanner interface{ Scan(dest ...any) error }

func scanJob(row scanner) (*berth.Job, error) {
	var (
		j                          berth.Job
		user, state                string
		key                        sql.NullString
		spec                       []byte
		arrayIndex, exitCode       sql.NullInt64
		created, started, finished int64
	)
	if err := row.Scan(&j.ID, &j.Queue, &user, &key, &spec, &arrayIndex, &state, &j.Reason, &exitCode, &j.Attempts,
		&created, &started, &finished); err != nil {
		return nil, err
	}
	id, queue := j.ID, j.Queue
	if err := json.Unmarshal(spec, &j.JobSpec); err != nil {
		return nil, fmt.Errorf("decode job %s: %w", id, err)
	}
	j.ID, j.Queue, j.User, j.IdempotencyKey = id, queue, user, key.String
	j.ArrayIndex, j.State, j.ExitCode = intPtr(arrayIndex), berth.JobState(state), intPtr(exitCode)
	j.CreatedAt, j.StartedAt, j.FinishedAt = fromNanos(created), fromNanos(started), fromNanos(finished)
	return &j, nil
}

func scanAttempt(row scanner) (*berth.Attempt, error) {
	var (
		a                          berth.Attempt
		gpus, state                string
		exitCode                   sql.NullInt64
		created, started, finished int64
	)
	if err := row.Scan(&a.ID, &a.JobID, &a.TaskIndex, &a.WorkerID, &a.Host, &gpus, &state, &exitCode, &a.Reason,
		&created, &started, &finished, &a.Port, &a.Progress); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(gpus), &a.GPUs); err != nil {
		return nil, fmt.Errorf("decode attempt %s: %w", a.ID, err)
	}
	a.State, a.ExitCode = berth.AttemptState(state), intPtr(exitCode)
	a.CreatedAt, a.StartedAt, a.FinishedAt = fromNanos(created), fromNanos(started), fromNanos(finished)
	return &a, nil
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

// collect runs query on the read pool and scans every row with scan.
func collect[T any](ctx context.Context, db *sql.DB, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// LoadActive returns what the controller rebuilds its memory from.
func (s *Store) LoadActive(ctx context.Context) (*store.Active, error) {
	a := &store.Active{LogSizes: map[string]int64{}, Counts: map[berth.JobState]int{}}
	var err error
	if a.Jobs, err = collect(ctx, s.r, scanJob, `SELECT `+jobColumns+` FROM jobs WHERE state IN ('pending', 'running') ORDER BY id`); err != nil {
		return nil, fmt.Errorf("load jobs: %w", err)
	}
	if a.Attempts, err = collect(ctx, s.r, scanAttempt, `SELECT `+attemptColumns+` FROM attempts WHERE state IN ('assigned', 'running') ORDER BY id`); err != nil {
		return nil, fmt.Errorf("load attempts: %w", err)
	}
	if a.Workers, err = s.Workers(ctx); err != nil {
		return nil, err
	}
	if a.Quotas, err = s.Quotas(ctx); err != nil {
		return nil, err
	}
	if a.Controls, err = s.WorkerControls(ctx); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT l.attempt_id, MAX(l.off + length(l.data)) FROM logs l
		JOIN attempts a ON a.id = l.attempt_id WHERE a.state IN ('assigned', 'running') GROUP BY l.attempt_id`)
	if err != nil {
		return nil, fmt.Errorf("load log sizes: %w", err)
	}
	for rows.Next() {
		var id string
		var size int64
		if err := rows.Scan(&id, &size); err != nil {
			rows.Close()
			return nil, fmt.Errorf("load log sizes: %w", err)
		}
		a.LogSizes[id] = size
	}
	rows.Close()
	rows, err = s.r.QueryContext(ctx, `SELECT state, COUNT(*) FROM jobs GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("count jobs: %w", err)
		}
		a.Counts[berth.JobState(st)] = n
	}
	return a, rows.Err()
}

// Job returns one job, or an ECodeNotFound error.
func (s *Store) Job(ctx context.Context, id string) (*berth.Job, error) {
	j, err := scanJob(s.r.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, &berth.Error{Code: berth.ECodeNotFound, Field: "id", Message: fmt.Sprintf("no job %q", id)}
	}
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", id, err)
	}
	return j, nil
}

// Jobs returns the jobs matching f, newest first.
func (s *Store) Jobs(ctx context.Context, f store.JobFilter) ([]*berth.Job, error) {
	var where []string
	var args []any
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	if f.Queue != "" {
		where, args = append(where, "queue = ?"), append(args, f.Queue)
	}
	if f.User != "" {
		where, args = append(where, "user_name = ?"), append(args, f.User)
	}
	if f.Before != "" {
		where, args = append(where, "id < ?"), append(args, f.Before)
	}
	q := `SELECT ` + jobColumns + ` FROM jobs`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	jobs, err := collect(ctx, s.r, scanJob, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// JobsByIdempotencyKey returns the jobs submitted with key, in id order.
func (s *Store) JobsByIdempotencyKey(ctx context.Context, key string) ([]*berth.Job, error) {
	jobs, err := collect(ctx, s.r, scanJob, `SELECT `+jobColumns+` FROM jobs WHERE idempotency_key = ? ORDER BY id`, key)
	if err != nil {
		return nil, fmt.Errorf("jobs by idempotency key: %w", err)
	}
	return jobs, nil
}

// idsPerQuery bounds the ids one IN (…) list binds.
const idsPerQuery = 500

// JobStates returns the state of each existing job in ids.
func (s *Store) JobStates(ctx context.Context, ids []string) (map[string]berth.JobState, error) {
	states := make(map[string]berth.JobState, len(ids))
	for start := 0; start < len(ids); start += idsPerQuery {
		chunk := ids[start:min(start+idsPerQuery, len(ids))]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := s.r.QueryContext(ctx, `SELECT id, state FROM jobs WHERE id IN (?`+strings.Repeat(", ?", len(chunk)-1)+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("job states: %w", err)
		}
		for rows.Next() {
			var id, st string
			if err := rows.Scan(&id, &st); err != nil {
				rows.Close()
				return nil, fmt.Errorf("job states: %w", err)
			}
			states[id] = berth.JobState(st)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("job states: %w", err)
		}
	}
	return states, nil
}

// Attempts returns a job's attempts, oldest first.
func (s *Store) Attempts(ctx context.Context, jobID string) ([]*berth.Attempt, error) {
	as, err := collect(ctx, s.r, scanAttempt, `SELECT `+attemptColumns+` FROM attempts WHERE job_id = ? ORDER BY id`, jobID)
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", jobID, err)
	}
	return as, nil
}

// Logs returns up to limit bytes of an attempt's output from offset.
func (s *Store) Logs(ctx context.Context, attemptID string, offset int64, limit int) ([]byte, error) {
	if limit <= 0 {
		return nil, nil
	}
	end := offset + int64(limit)
	if end < offset { // offset+limit overflows: read to the end
		end = math.MaxInt64
	}
	rows, err := s.r.QueryContext(ctx, `SELECT off, data FROM logs WHERE attempt_id = ? AND off < ? AND off + length(data) > ? ORDER BY off`,
		attemptID, end, offset)
	if err != nil {
		return nil, fmt.Errorf("logs of %s: %w", attemptID, err)
	}
	defer rows.Close()
	var out []byte
	for rows.Next() {
		var off int64
		var data []byte
		if err := rows.Scan(&off, &data); err != nil {
			return nil, fmt.Errorf("logs of %s: %w", attemptID, err)
		}
		if off < offset {
			data = data[offset-off:]
		}
		out = append(out, data...)
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, rows.Err()
}

// Workers returns every worker ever registered, by id.
func (s *Store) Workers(ctx context.Context) ([]*berth.Worker, error) {
	ws, err := collect(ctx, s.r, func(row scanner) (*berth.Worker, error) {
		var body []byte
		if err := row.Scan(&body); err != nil {
			return nil, err
		}
		var w berth.Worker
		return &w, json.Unmarshal(body, &w)
	}, `SELECT body FROM workers ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return ws, nil
}

// Quotas returns every quota rule, by id.
func (s *Store) Quotas(ctx context.Context) ([]*berth.QuotaRule, error) {
	qs, err := collect(ctx, s.r, scanQuota, `SELECT `+quotaColumns+` FROM quota_rules ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list quota rules: %w", err)
	}
	return qs, nil
}

// WorkerControls returns every worker control, by host, then queue.
func (s *Store) WorkerControls(ctx context.Context) ([]*berth.WorkerControl, error) {
	cs, err := collect(ctx, s.r, scanControl, `SELECT `+controlColumns+` FROM worker_controls ORDER BY host_label, queue`)
	if err != nil {
		return nil, fmt.Errorf("list worker controls: %w", err)
	}
	return cs, nil
}
