// Package postgres is the Store for teams that outgrow one machine: PostgreSQL through
// a pgx connection pool. Every Write is one implicit transaction sent in
// one round trip (a pipeline of one set-based statement per list of the
// batch, the events as one row, and one that deletes the events the
// batch's push out of those kept), committed with synchronous_commit on before Write returns;
// a batch that creates many jobs copies them (COPY) first, in the same
// transaction.
// The store is also a store.Stager: the committer makes a group's changes
// on one of writeLanes connections while the group before it commits on
// another.
// Migrations are applied on Open under an advisory lock, so several
// servers may start at once. Other programs sharing the database may write
// worker_controls with plain SQL; WatchControls tells Berth when they do.
package postgres

import (
	"context"
	"embed"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrateLock is the key of the advisory lock held while migrating
// ("bertmigr" in ASCII).
const migrateLock = 0x626572746D696772

// Store is a store.Store and a store.ControlWatcher on one PostgreSQL
// database.
type Store struct {
	*sqlstore.Reader          // on pool
	*sqlstore.Credentials     // on pool
	*sqlstore.Arbiter         // on pool
	*sqlstore.Subscriptions   // on pool
	*sqlstore.CloudPools      // on pool
	*sqlstore.BackendRegistry // on pool
	*sqlstore.StoredContracts // on pool
	*sqlstore.Pruner          // on pool

	pool   *pgxpool.Pool
	writer *pgxpool.Pool   // one connection, Write's (see openWriter)
	config *pgx.ConnConfig // of pool's connections, for the watchers' own

	stop     context.Context // ends when the store closes
	cancel   context.CancelFunc
	watchers sync.WaitGroup
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.ControlWatcher = (*Store)(nil)
	_ store.Stager         = (*Store)(nil)
)

// writeLanes is how many connections write at once (store.Stager): the
// committer makes a group's changes on one while the group before it is
// still being made or committed on another, so that more than one
// PostgreSQL backend, and core, does Berth's writing.
const writeLanes = 2

// Open connects to the database at dbURL (postgres://user@host:port/db?…
// or postgresql://…, with pgx's parameters such as pool_max_conns) and
// applies pending migrations. Unless dbURL sets synchronous_commit, every
// connection sets it on: a commit is durable before Write returns. It
// returns an error naming the server if dbURL is invalid, the database
// cannot be reached or migrated, or its schema is newer than this Berth.
func Open(ctx context.Context, dbURL string) (*Store, error) {
	where := redacted(dbURL)
	config, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", where, err)
	}
	if _, ok := config.ConnConfig.RuntimeParams["synchronous_commit"]; !ok {
		config.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	}
	if err := migrate(ctx, config.ConnConfig.Copy()); err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", where, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", where, err)
	}
	writer, err := openWriter(ctx, config)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres %s: %w", where, err)
	}
	s := &Store{pool: pool, writer: writer, config: config.ConnConfig}
	s.stop, s.cancel = context.WithCancel(context.Background())
	s.Reader = sqlstore.NewReader(s.query, sqlstore.Dialect{
		Placeholder: func(n int) string { return "$" + strconv.Itoa(n) },
		ControlTime: "updated_at_ns",
		JobName:     "(" + sqlstore.JobSpecColumn + ")->>'name'",
		Unindexed:   func(column string) string { return column },
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

// openWriter returns the pool of one connection that Write uses. Its
// plans are generic (plan_cache_mode): a batch's updates join their arrays
// to a table by primary key, and a custom plan, which knows how long the
// arrays are but not that the batch's rows are few of the table's,
// hashes the whole table for a batch of a thousand rows and more (a scan
// of every job for each group commit, on each of the first five writes of
// a connection, before PostgreSQL settles on the generic plan). The
// generic plan looks each row up by its key whatever the table's size.
// Few connections (writeLanes) also keep the statements prepared once
// on each.
func openWriter(ctx context.Context, config *pgxpool.Config) (*pgxpool.Pool, error) {
	wc := config.Copy()
	wc.MaxConns, wc.MinConns = writeLanes, 0
	if _, ok := wc.ConnConfig.RuntimeParams["plan_cache_mode"]; !ok {
		wc.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	return pgxpool.NewWithConfig(ctx, wc)
}

// redacted returns the URL raw without its password, or a placeholder if it is
// not a URL.
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(connection string)"
	}
	return u.Redacted()
}

// migrate applies pending migrations on a connection of its own that holds
// the migration lock: a server opening the database meanwhile waits, then
// finds nothing to do. Closing db closes the connection, and so releases
// the lock.
func migrate(ctx context.Context, config *pgx.ConnConfig) error {
	db := stdlib.OpenDB(*config)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, int64(migrateLock)); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	return store.Migrate(ctx, conn, migrations, "migrations")
}

// query runs a read on the pool.
func (s *Store) query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return s.pool.Query(ctx, query, args...)
}

// exec runs one statement on the pool.
func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := s.pool.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// execTx runs stmts in one round trip: a pipeline, which PostgreSQL
// runs as one implicit transaction.
func (s *Store) execTx(ctx context.Context, stmts []sqlstore.Statement) ([]int64, error) {
	batch := &pgx.Batch{}
	for _, st := range stmts {
		batch.Queue(st.Query, st.Args...)
	}
	results := s.pool.SendBatch(ctx, batch)
	n := make([]int64, len(stmts))
	for i := range stmts {
		tag, err := results.Exec()
		if err != nil {
			results.Close()
			return nil, err
		}
		n[i] = tag.RowsAffected()
	}
	if err := results.Close(); err != nil {
		return nil, err
	}
	return n, nil
}

// Close ends the watchers of worker controls and closes the pool. It
// returns no error.
func (s *Store) Close() error {
	s.cancel()
	s.watchers.Wait()
	s.writer.Close()
	s.pool.Close()
	return nil
}

// Write applies b in one transaction and returns once it is committed. An
// update of a job that does not exist fails the whole batch. Strings are
// stored as valid UTF-8 without NUL bytes, which PostgreSQL's text cannot
// hold: invalid bytes and NULs become U+FFFD.
//
// With b.BeforeCommit (the audit log's append and fsync), the batch's
// statements run in an open transaction while it finishes, and the audit
// head and the commit follow it: the two wait for each other only at the
// end. Without it the batch is one round trip, committed by its Sync,
// unless it copies jobs (copyJobs): then it is an explicit transaction.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
	stmts, err := planBatch(b.Deduplicated())
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	copies := slices.ContainsFunc(stmts, func(st statement) bool { return st.copy != nil })
	if !copies && (b.BeforeCommit == nil || len(stmts) == 0) {
		if b.BeforeCommit != nil {
			head, err := b.BeforeCommit()
			if err != nil {
				return err
			}
			if head != nil {
				stmts = append(stmts, statement{what: "audit head", query: auditHeadQuery, args: []any{int64(head.Seq), head.Hash}})
			}
		}
		if len(stmts) == 0 {
			return nil
		}
		return send(ctx, s.writer, stmts)
	}
	tx, err := s.writer.Begin(ctx)
	if err != nil {
		return fmt.Errorf("write: begin: %w", err)
	}
	defer tx.Rollback(context.Background()) // after the commit, a no-op
	if err := send(ctx, tx, stmts); err != nil {
		return err
	}
	var head *store.AuditHead
	if b.BeforeCommit != nil {
		if head, err = b.BeforeCommit(); err != nil {
			return err
		}
	}
	if head != nil {
		if _, err := tx.Exec(ctx, auditHeadQuery, int64(head.Seq), head.Hash); err != nil {
			return fmt.Errorf("write: audit head: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("write: commit: %w", err)
	}
	return nil
}

// Lanes returns how many batches may be staged at once (store.Stager).
func (s *Store) Lanes() int { return writeLanes }

// Stage makes b's changes in a transaction of its own on one of the
// writer's connections, in one round trip, and leaves it open
// (store.Stager). Strings are stored as by Write.
func (s *Store) Stage(ctx context.Context, b *store.Batch) (store.Staged, error) {
	stmts, err := planBatch(b.Deduplicated())
	if err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	conn, err := s.writer.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("write: connect: %w", err)
	}
	if err := send(ctx, conn, append([]statement{{what: "begin", query: "BEGIN"}}, stmts...)); err != nil {
		conn.Release() // in a transaction still, so closed: the server rolls it back
		return nil, err
	}
	return &staged{conn: conn}, nil
}

// staged is a transaction that Stage left open.
type staged struct {
	conn *pgxpool.Conn
}

// Commit writes head, if not nil, and commits, in one round trip.
func (t *staged) Commit(ctx context.Context, head *store.AuditHead) error {
	defer t.conn.Release()
	batch := &pgx.Batch{}
	if head != nil {
		batch.Queue(auditHeadQuery, int64(head.Seq), head.Hash)
	}
	batch.Queue("COMMIT")
	results := t.conn.SendBatch(ctx, batch)
	defer results.Close()
	if head != nil {
		if _, err := results.Exec(); err != nil {
			return fmt.Errorf("write: audit head: %w", err)
		}
	}
	tag, err := results.Exec()
	if err == nil && tag.String() != "COMMIT" { // a failed transaction "commits" as a rollback
		err = fmt.Errorf("rolled back (%s)", tag)
	}
	if err != nil {
		return fmt.Errorf("write: commit: %w", err)
	}
	return results.Close()
}

// Rollback discards the transaction; closing its connection would too.
func (t *staged) Rollback() {
	defer t.conn.Release()
	_, _ = t.conn.Exec(context.Background(), "ROLLBACK")
}

// send runs stmts in one round trip (a pipeline): outside a transaction,
// as one implicit transaction that its Sync commits. A COPY (statement.copy)
// ends the pipeline before it and runs on its own: only in a transaction.
func send(ctx context.Context, db sender, stmts []statement) error {
	for len(stmts) > 0 {
		if st := stmts[0]; st.copy != nil {
			if _, err := db.CopyFrom(ctx, pgx.Identifier{st.copy.table}, st.copy.columns, st.copy.rows); err != nil {
				return fmt.Errorf("write: %s: %w", st.what, err)
			}
			stmts = stmts[1:]
			continue
		}
		n := 0
		for n < len(stmts) && stmts[n].copy == nil {
			n++
		}
		if err := pipeline(ctx, db, stmts[:n]); err != nil {
			return err
		}
		stmts = stmts[n:]
	}
	return nil
}

// sender is a connection, a pool or a transaction.
type sender interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
	CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error)
}

// pipeline runs stmts, none a COPY, in one round trip.
func pipeline(ctx context.Context, db sender, stmts []statement) error {
	batch := &pgx.Batch{}
	for _, st := range stmts {
		batch.Queue(st.query, st.args...)
	}
	results := db.SendBatch(ctx, batch)
	for _, st := range stmts {
		if _, err := results.Exec(); err != nil {
			results.Close()
			return fmt.Errorf("write: %s: %w", st.what, err)
		}
	}
	// Close reads up to the end of the pipeline: outside a transaction,
	// the commit.
	if err := results.Close(); err != nil {
		return fmt.Errorf("write: commit: %w", err)
	}
	return nil
}

// auditHeadQuery is sqlstore.UpsertAuditHead with PostgreSQL's
// placeholders.
var auditHeadQuery = strings.NewReplacer("?, ?", "$1, $2").Replace(sqlstore.UpsertAuditHead)

// statement is one statement of a batch.
type statement struct {
	what  string // for errors
	query string
	args  []any
	copy  *copyRows // when set, the statement is a COPY of these rows
}

// copyRows is the rows a COPY writes.
type copyRows struct {
	table   string
	columns []string
	rows    pgx.CopyFromSource
}

// copyJobs is how many new jobs a batch inserts with COPY rather than one
// INSERT of arrays: PostgreSQL takes rows from COPY for less work a row
// than from unnest, which outweighs the round trips it adds.
const copyJobs = 1000

// Column types of each table, in sqlstore's column order.
var (
	jobTypes = []string{"text", "text", "text", "text", "json", "integer", "text", "text", "integer", "integer", "bigint", "bigint", "bigint",
		"text", "text", "text"}
	jobUpdateTypes = []string{"text", "text", "text", "integer", "integer", "bigint", "bigint"}
	attemptTypes   = []string{"text", "text", "integer", "text", "text", "json", "text", "integer", "text", "bigint", "bigint", "bigint", "integer", "text",
		"integer", "text", "text"}
	workerTypes  = []string{"text", "json"}
	quotaTypes   = []string{"text", "text", "text", "integer", "integer", "double precision", "bigint"}
	controlTypes = []string{"text", "text", "text", "text", "text", "bigint", "timestamptz"}
	logTypes     = []string{"text", "bigint", "bytea", "text"}
	peerTypes    = []string{"text", "text", "text", "bytea", "bigint", "bigint", "bigint", "bigint"}
	handoffTypes = []string{"text", "integer", "text", "text", "text", "text", "text", "boolean", "integer", "integer", "text",
		"bigint", "bigint", "text", "bigint", "text", "boolean"}
	cursorTypes    = []string{"text", "text", "bigint", "text"}
	receivedTypes  = []string{"text", "text", "text", "text"}
	changelogTypes = []string{"bigint", "text", "text", "text", "text", "text", "text", "text", "integer", "integer", "bigint",
		"bigint", "boolean", "bigint"}
	ackTypes = []string{"text", "bigint", "text", "bigint"}
)

// step is how a step of sqlstore.Steps is written: query, which takes one
// array per column and writes every row of the step's list at once, with
// the rows row returns (sqlstore's Row when nil); or, where args is set,
// query with the arguments args returns for the whole list.
type step struct {
	query string
	row   func(b *store.Batch, i int) ([]any, error)
	args  func(b *store.Batch) ([]any, error)
}

// steps holds the statement of each step.
var steps = [sqlstore.StepCount]step{
	sqlstore.InsertJobs: {query: `INSERT INTO jobs (` + sqlstore.JobColumns + `) ` + unnest(jobTypes)},
	// The update of jobs fails, through berth_raise, if a job is missing.
	sqlstore.UpdateJobs: {query: `WITH v AS (` + unnest(jobUpdateTypes) + ` AS v (` + sqlstore.JobUpdateColumns + `)),
		updated AS (UPDATE jobs SET state = v.state, reason = v.reason, exit_code = v.exit_code, attempts = v.attempts,
			started_at = v.started_at, finished_at = v.finished_at FROM v WHERE jobs.id = v.id RETURNING jobs.id)
		SELECT berth_raise('no such job ' || v.id) FROM v WHERE v.id NOT IN (SELECT id FROM updated)`},
	sqlstore.UpsertAttempts: {query: `INSERT INTO attempts (` + sqlstore.AttemptColumns + `) ` + unnest(attemptTypes) + sqlstore.AttemptUpsert},
	sqlstore.UpsertWorkers:  {query: `INSERT INTO workers (` + sqlstore.WorkerColumns + `) ` + unnest(workerTypes) + sqlstore.WorkerUpsert},
	sqlstore.UpsertQuotas:   {query: `INSERT INTO quota_rules (` + sqlstore.QuotaColumns + `) ` + unnest(quotaTypes) + sqlstore.QuotaUpsert},
	sqlstore.DeleteQuotas:   {query: `DELETE FROM quota_rules WHERE id = ANY($1::text[])`},
	sqlstore.UpsertControls: {query: `INSERT INTO worker_controls (` + sqlstore.ControlColumns + `, updated_at_ns, updated_at) ` +
		unnest(controlTypes) + sqlstore.ControlUpsert + `, updated_at_ns = excluded.updated_at_ns`,
		row: controlRow},
	sqlstore.SetProgress: {query: `UPDATE attempts SET progress = v.progress FROM unnest($1::text[], $2::text[]) AS v (progress, id)
		WHERE attempts.id = v.id`},
	sqlstore.AppendLogs:   {query: `INSERT INTO logs (` + sqlstore.LogColumns + `) ` + unnest(logTypes)},
	sqlstore.InsertEvents: {query: `INSERT INTO event_batches (seq, seqs, body) VALUES ($1, $2, $3)`, args: eventBatch},
	sqlstore.UpsertPeers:  {query: `INSERT INTO peers (` + sqlstore.PeerColumns + `) ` + unnest(peerTypes) + sqlstore.PeerUpsert},
	sqlstore.DeletePeers:  {query: `DELETE FROM peers WHERE name = ANY($1::text[])`},
	sqlstore.UpsertHandoffs: {query: `INSERT INTO handoffs (` + sqlstore.HandoffColumns + `) ` + unnest(handoffTypes) +
		sqlstore.HandoffUpsert},
	sqlstore.UpsertCursors: {query: `INSERT INTO peer_cursors (` + sqlstore.CursorColumns + `) ` + unnest(cursorTypes) +
		sqlstore.CursorUpsert},
	sqlstore.InsertReceived: {query: `INSERT INTO received_jobs (` + sqlstore.ReceivedColumns + `) ` + unnest(receivedTypes)},
	sqlstore.InsertChangelog: {query: `INSERT INTO federation_changelog (` + sqlstore.ChangelogColumns + `) ` +
		unnest(changelogTypes)},
	sqlstore.UpsertAcks: {query: `INSERT INTO federation_origins (` + sqlstore.AckColumns + `) ` + unnest(ackTypes) +
		sqlstore.AckUpsert},
	sqlstore.SetJobClusters: {query: `UPDATE jobs SET cluster = v.cluster
		FROM unnest($1::text[], $2::text[]) AS v (cluster, id) WHERE jobs.id = v.id`},
}

// eventBatch returns the row of event_batches that holds b's events: the
// newest seq, every seq, and the events as one JSON array in the same
// order.
func eventBatch(b *store.Batch) ([]any, error) {
	body := make([]byte, 0, 256*len(b.Events))
	body = append(body, '[')
	seqs := make([]int64, len(b.Events))
	for i, e := range b.Events {
		if i > 0 {
			body = append(body, ',')
		}
		var err error
		if body, err = e.AppendJSON(body); err != nil {
			return nil, fmt.Errorf("encode event %d: %w", e.Seq, err)
		}
		seqs[i] = int64(e.Seq)
	}
	return []any{int64(newestSeq(b.Events)), seqs, append(body, ']')}, nil
}

// newestSeq returns the highest seq of events, 0 for none.
func newestSeq(events []*berth.Event) uint64 {
	var newest uint64
	for _, e := range events {
		newest = max(newest, e.Seq)
	}
	return newest
}

// pruneEvents deletes the rows of event_batches whose events are all
// older than the newest store.KeptEvents: those whose newest seq is at
// most $1, the batch's newest less store.KeptEvents. The events view
// leaves out the older events of the rows kept.
// Rows another transaction is deleting are left to it (SKIP LOCKED):
// batches staged at once never wait for each other here.
const pruneEvents = `DELETE FROM event_batches WHERE seq IN (SELECT seq FROM event_batches WHERE seq <= $1 FOR UPDATE SKIP LOCKED)`

// controlRow returns worker control i's row, in ControlColumns order, then
// its time in unix nanoseconds and as a timestamptz (NULL for the zero
// time).
func controlRow(b *store.Batch, i int) ([]any, error) {
	c := b.Controls[i]
	var at any
	if !c.UpdatedAt.IsZero() {
		at = c.UpdatedAt
	}
	return append(sqlstore.ControlRow(c), at), nil
}

// unnest returns "SELECT * FROM unnest($1::T1[], $2::T2[], …)" for the
// column types types.
func unnest(types []string) string {
	arrays := make([]string, len(types))
	for i, t := range types {
		arrays[i] = "$" + strconv.Itoa(i+1) + "::" + t + "[]"
	}
	return "SELECT * FROM unnest(" + strings.Join(arrays, ", ") + ")"
}

// planBatch turns b, deduplicated, into statements, one for each step of
// sqlstore.Steps with rows to write, in their order.
func planBatch(b *store.Batch) ([]statement, error) {
	var stmts []statement
	for i := range sqlstore.Steps {
		n := sqlstore.Steps[i].Len(b)
		if n == 0 {
			continue
		}
		if steps[i].args != nil {
			args, err := steps[i].args(b)
			if err != nil {
				return nil, err
			}
			stmts = append(stmts, statement{what: sqlstore.Steps[i].What, query: steps[i].query, args: args})
			continue
		}
		row := steps[i].row
		if row == nil {
			row = sqlstore.Steps[i].Row
		}
		if i == int(sqlstore.InsertJobs) && n >= copyJobs {
			// The rows are made as COPY sends them, while PostgreSQL
			// writes those before.
			rows := pgx.CopyFromSlice(n, func(r int) ([]any, error) { return storableRow(b, r, row) })
			stmts = append(stmts, statement{what: sqlstore.Steps[i].What,
				copy: &copyRows{table: "jobs", columns: strings.Split(sqlstore.JobColumns, ", "), rows: rows}})
			continue
		}
		args, err := columns(b, n, row)
		if err != nil {
			return nil, err
		}
		stmts = append(stmts, statement{what: sqlstore.Steps[i].What, query: steps[i].query, args: args})
	}
	if newest := newestSeq(b.Events); newest > store.KeptEvents {
		stmts = append(stmts, statement{what: "prune events", query: pruneEvents, args: []any{int64(newest - store.KeptEvents)}})
	}
	return stmts, nil
}

// columns returns the n rows of b that row returns as one array per column,
// strings made storable as text.
func columns(b *store.Batch, n int, row func(b *store.Batch, i int) ([]any, error)) ([]any, error) {
	var cols [][]any
	for i := range n {
		values, err := storableRow(b, i, row)
		if err != nil {
			return nil, err
		}
		if cols == nil {
			cols = make([][]any, len(values))
			for c := range cols {
				cols[c] = make([]any, 0, n)
			}
		}
		for c, v := range values {
			cols[c] = append(cols[c], v)
		}
	}
	args := make([]any, len(cols))
	for c, col := range cols {
		args[c] = col
	}
	return args, nil
}

// storableRow returns row i of b as row returns it, strings made storable
// as text.
func storableRow(b *store.Batch, i int, row func(b *store.Batch, i int) ([]any, error)) ([]any, error) {
	values, err := row(b, i)
	if err != nil {
		return nil, err
	}
	for c, v := range values {
		// Only a string that changes is stored back: boxing it again
		// would cost an allocation a value.
		if s, ok := v.(string); ok && !storable(s) {
			values[c] = makeStorable(s)
		}
	}
	return values, nil
}

// storable reports whether PostgreSQL's text holds s as it is: valid
// UTF-8 without NUL bytes.
func storable(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// makeStorable returns s with invalid UTF-8 and NUL bytes replaced by
// U+FFFD.
func makeStorable(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// JobStates returns the state of each existing job in ids
// (store.JobStore) in one query, ids one array parameter: sqlstore's
// lists of 500 parameters are each planned on every call, several times
// the work of finding the rows.
func (s *Store) JobStates(ctx context.Context, ids []string) (map[string]berth.JobState, error) {
	states := make(map[string]berth.JobState, len(ids))
	rows, err := s.pool.Query(ctx, `SELECT id, state FROM jobs WHERE id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("job states: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			return nil, fmt.Errorf("job states: %w", err)
		}
		states[id] = berth.JobState(st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job states: %w", err)
	}
	return states, nil
}
