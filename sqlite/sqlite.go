// Package sqlite is the embedded Store: one SQLite file in WAL mode, written
// through a single connection with synchronous=FULL (every commit is fsynced
// before Write returns) and read through a pool of read-only connections.
// It is pure Go (modernc.org/sqlite), so Berth builds without cgo.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store on one SQLite file.
type Store struct {
	*sqlstore.Reader          // on r
	*sqlstore.Credentials     // on r and w
	*sqlstore.Arbiter         // on r and w
	*sqlstore.Subscriptions   // on r and w
	*sqlstore.CloudPools      // on r and w
	*sqlstore.BackendRegistry // on r and w
	*sqlstore.StoredContracts // on r and w
	*sqlstore.Pruner          // on w

	w *sql.DB // one connection: the only writer
	r *sql.DB // read-only pool

	stmtMu sync.Mutex
	stmts  map[shape]*sql.Stmt // prepared on w: each shape parsed once
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
		q.Add("_pragma", "temp_store(MEMORY)")
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
	s := &Store{w: w, r: r, stmts: map[shape]*sql.Stmt{}}
	s.Reader = sqlstore.NewReader(s.query, sqlstore.Dialect{
		Placeholder: func(int) string { return "?" },
		ControlTime: "updated_at",
		JobName:     "json_extract(CAST(" + sqlstore.JobSpecColumn + " AS TEXT), '$.name')",
		Unindexed:   func(column string) string { return "+" + column },
	})
	s.Credentials = sqlstore.NewCredentials(s.Reader, s.exec)
	s.Arbiter = sqlstore.NewArbiter(s.Reader, s.exec)
	s.Subscriptions = sqlstore.NewSubscriptions(s.Reader, s.exec)
	s.CloudPools = sqlstore.NewCloudPools(s.Reader, s.exec)
	s.BackendRegistry = sqlstore.NewBackendRegistry(s.Reader, s.exec)
	s.StoredContracts = sqlstore.NewStoredContracts(s.Reader, s.exec)
	s.Pruner = sqlstore.NewPruner(s.Reader, s.execTx)
	return s, nil
}

// query runs a read on the read-only pool.
func (s *Store) query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

// exec runs one statement on the writer.
func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.w.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// execTx runs stmts in one transaction on the writer.
func (s *Store) execTx(ctx context.Context, stmts []sqlstore.Statement) ([]int64, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	n := make([]int64, len(stmts))
	for i, st := range stmts {
		res, err := tx.ExecContext(ctx, st.Query, st.Args...)
		if err != nil {
			return nil, err
		}
		if n[i], err = res.RowsAffected(); err != nil {
			return nil, err
		}
	}
	return n, tx.Commit()
}

// sqlRows is a *sql.Rows as sqlstore.Rows.
type sqlRows struct{ *sql.Rows }

// Close closes the rows; Err has reported any error that matters.
func (r sqlRows) Close() { r.Rows.Close() }

// Close closes both connection pools.
func (s *Store) Close() error { return errors.Join(s.r.Close(), s.w.Close()) }

// prepared returns the statements of ops, in their order, preparing on
// the writer connection the shapes not seen before. Write's statements are
// few shapes, so each is built and parsed once. It must run outside a
// transaction: the writer has one connection, which a transaction holds.
func (s *Store) prepared(ctx context.Context, ops []writeOp) ([]*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	stmts := make([]*sql.Stmt, len(ops))
	for i, op := range ops {
		st := s.stmts[op.shape]
		if st == nil {
			var err error
			if st, err = s.w.PrepareContext(ctx, op.shape.query()); err != nil {
				return nil, err
			}
			s.stmts[op.shape] = st
		}
		stmts[i] = st
	}
	return stmts, nil
}

// Write applies b in one transaction and returns once it is fsynced.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
	b = b.Deduplicated()
	ops, err := planBatch(b)
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	stmts, err := s.prepared(ctx, ops)
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
			return fmt.Errorf("write: %s: %w", op.what(), err)
		}
		if op.step == sqlstore.UpdateJobs { // one row a job: a missing job hits none
			if n, _ := res.RowsAffected(); n != int64(op.shape.rows) {
				return fmt.Errorf("write: %s: %w", op.what(), missingJob(ctx, tx, b.JobUpdates))
			}
		}
	}
	if b.BeforeCommit != nil {
		h, err := b.BeforeCommit()
		if err != nil {
			return err
		}
		if h != nil {
			if _, err := tx.ExecContext(ctx, sqlstore.UpsertAuditHead, int64(h.Seq), h.Hash); err != nil {
				return fmt.Errorf("write: audit head: %w", err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("write: commit: %w", err)
	}
	return nil
}

// missingJob names the first job of updates that has no row, seen from tx.
func missingJob(ctx context.Context, tx *sql.Tx, updates []store.JobUpdate) error {
	for _, u := range updates {
		var found string
		err := tx.QueryRowContext(ctx, `SELECT id FROM jobs WHERE id = ?`, u.ID).Scan(&found)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("no such job %s", u.ID)
		}
		if err != nil {
			return err
		}
	}
	return errors.New("a job updated twice")
}

// writeOp is one statement of a batch.
type writeOp struct {
	step  sqlstore.StepID
	shape shape
	args  []any
}

// shape is the form of a statement: head, then rows tuples of width
// placeholders (none when rows is 0), then tail.
type shape struct {
	head, tail  string
	rows, width int
}

// query returns the statement's SQL.
func (s shape) query() string {
	if s.rows == 0 {
		return s.head + s.tail
	}
	tuple := "(" + strings.Repeat("?, ", s.width-1) + "?)"
	return s.head + strings.Repeat(tuple+", ", s.rows-1) + tuple + s.tail
}

// statement is how a step of sqlstore.Steps is written: head, rows tuples
// and tail, for up to rowsPerInsert rows a statement; or, when single,
// head alone once per row, with that row's values.
type statement struct {
	head, tail string
	single     bool
}

// statements holds the statement of each step.
var statements = [sqlstore.StepCount]statement{
	sqlstore.InsertJobs: {head: `INSERT INTO jobs (` + sqlstore.JobColumns + `) VALUES `},
	sqlstore.UpdateJobs: {head: `WITH v (` + sqlstore.JobUpdateColumns + `) AS (VALUES `,
		tail: `) UPDATE jobs SET state = v.state, reason = v.reason, exit_code = v.exit_code, attempts = v.attempts,
		started_at = v.started_at, finished_at = v.finished_at FROM v WHERE jobs.id = v.id`},
	sqlstore.UpsertAttempts: {head: `INSERT INTO attempts (` + sqlstore.AttemptColumns + `) VALUES `, tail: sqlstore.AttemptUpsert},
	sqlstore.UpsertWorkers:  {head: `INSERT INTO workers (` + sqlstore.WorkerColumns + `) VALUES `, tail: sqlstore.WorkerUpsert},
	sqlstore.UpsertQuotas:   {head: `INSERT INTO quota_rules (` + sqlstore.QuotaColumns + `) VALUES `, tail: sqlstore.QuotaUpsert},
	sqlstore.DeleteQuotas:   {head: `DELETE FROM quota_rules WHERE id = ?`, single: true},
	sqlstore.UpsertControls: {head: `INSERT INTO worker_controls (` + sqlstore.ControlColumns + `, updated_at) VALUES `,
		tail: sqlstore.ControlUpsert},
	sqlstore.SetProgress:  {head: `UPDATE attempts SET progress = ? WHERE id = ?`, single: true},
	sqlstore.AppendLogs:   {head: `INSERT INTO logs (` + sqlstore.LogColumns + `) VALUES `},
	sqlstore.InsertEvents: {head: `INSERT INTO events (` + sqlstore.EventColumns + `) VALUES `},
	sqlstore.UpsertPeers:  {head: `INSERT INTO peers (` + sqlstore.PeerColumns + `) VALUES `, tail: sqlstore.PeerUpsert},
	sqlstore.DeletePeers:  {head: `DELETE FROM peers WHERE name = ?`, single: true},
	sqlstore.UpsertHandoffs: {head: `INSERT INTO handoffs (` + sqlstore.HandoffColumns + `) VALUES `,
		tail: sqlstore.HandoffUpsert},
	sqlstore.UpsertCursors: {head: `INSERT INTO peer_cursors (` + sqlstore.CursorColumns + `) VALUES `,
		tail: sqlstore.CursorUpsert},
	sqlstore.InsertReceived:  {head: `INSERT INTO received_jobs (` + sqlstore.ReceivedColumns + `) VALUES `},
	sqlstore.InsertChangelog: {head: `INSERT INTO federation_changelog (` + sqlstore.ChangelogColumns + `) VALUES `},
	sqlstore.UpsertAcks:      {head: `INSERT INTO federation_origins (` + sqlstore.AckColumns + `) VALUES `, tail: sqlstore.AckUpsert},
	sqlstore.SetJobClusters:  {head: `UPDATE jobs SET cluster = ? WHERE id = ?`, single: true},
}

// pruneStep marks the statement that prunes events, after every step.
const pruneStep = sqlstore.StepCount

// rowsPerInsert is how many rows one multi-row statement carries: far
// fewer statements for large batches, well under SQLite's 32,766
// parameters.
const rowsPerInsert = 128

// planBatch turns b, deduplicated, into statements, step by step in the
// order of sqlstore.Steps. Each list is written as few multi-row
// statements.
func planBatch(b *store.Batch) ([]writeOp, error) {
	n := 1 // the prune
	for i := range sqlstore.Steps {
		if statements[i].single {
			n += sqlstore.Steps[i].Len(b)
		} else {
			n += (sqlstore.Steps[i].Len(b) + rowsPerInsert - 1) / rowsPerInsert
		}
	}
	ops := make([]writeOp, 0, n)
	for i := range sqlstore.Steps {
		var err error
		if ops, err = stepOps(ops, b, sqlstore.StepID(i)); err != nil {
			return nil, err
		}
	}
	if query, args, ok := sqlstore.PruneEvents(b.Events); ok {
		ops = append(ops, writeOp{step: pruneStep, shape: shape{head: query}, args: args})
	}
	return ops, nil
}

// stepOps appends to ops the statements writing the rows of step id of b.
func stepOps(ops []writeOp, b *store.Batch, id sqlstore.StepID) ([]writeOp, error) {
	step, st := &sqlstore.Steps[id], &statements[id]
	n := step.Len(b)
	if st.single {
		for i := range n {
			args, err := step.Row(b, i)
			if err != nil {
				return nil, err
			}
			ops = append(ops, writeOp{step: id, shape: shape{head: st.head}, args: args})
		}
		return ops, nil
	}
	for start := 0; start < n; start += rowsPerInsert {
		var args []any
		width := 0
		for i := start; i < min(start+rowsPerInsert, n); i++ {
			values, err := step.Row(b, i)
			if err != nil {
				return nil, err
			}
			if args == nil {
				width = len(values)
				args = make([]any, 0, width*min(rowsPerInsert, n-start))
			}
			args = append(args, values...)
		}
		ops = append(ops, writeOp{step: id, args: args,
			shape: shape{head: st.head, tail: st.tail, rows: min(rowsPerInsert, n-start), width: width}})
	}
	return ops, nil
}

// what names op's statement in errors.
func (op *writeOp) what() string {
	if op.step == pruneStep {
		return "prune events"
	}
	return sqlstore.Steps[op.step].What
}
