package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// Columns of the federation's tables, in the order of the values their
// Row functions return and their reads scan.
const (
	PeerColumns    = `name, url, ca_fingerprint, sealed_token, route_timeout, lost_timeout, created_at, updated_at`
	HandoffColumns = `job_id, incarnation, peer, remote_id, nonce, state, remote_job_id, sent, cancel_version, cancel_acked,
		last_error, created_at, updated_at, create_epoch, create_seq, create_tag, pinned`
	CursorColumns    = `peer, epoch, seq, tag`
	ReceivedColumns  = `origin, remote_id, nonce, job_id`
	ChangelogColumns = `seq, tag, origin, remote_id, nonce, job_id, state, reason, exit_code, attempts, started_at, finished_at,
		tombstone, at`
	AckColumns = `origin, acked_seq, acked_tag, pruned_seq`
)

// keepPrunedSeq is the pruned_seq an upsert of federation_origins sets:
// the higher of the stored one and the one inserted, so that a cursor
// once made stale by a prune stays stale.
const keepPrunedSeq = `pruned_seq = CASE WHEN excluded.pruned_seq > federation_origins.pruned_seq
		THEN excluded.pruned_seq ELSE federation_origins.pruned_seq END`

// Upserts end an INSERT INTO peers, handoffs, peer_cursors or
// federation_origins: on a conflict they set every column but the key
// from the row inserted, except that an origin's pruned_seq is never
// lowered.
const (
	PeerUpsert = ` ON CONFLICT (name) DO UPDATE SET url = excluded.url, ca_fingerprint = excluded.ca_fingerprint,
		sealed_token = excluded.sealed_token, route_timeout = excluded.route_timeout, lost_timeout = excluded.lost_timeout,
		created_at = excluded.created_at, updated_at = excluded.updated_at`
	HandoffUpsert = ` ON CONFLICT (job_id, incarnation) DO UPDATE SET peer = excluded.peer, remote_id = excluded.remote_id,
		nonce = excluded.nonce, state = excluded.state, remote_job_id = excluded.remote_job_id, sent = excluded.sent,
		cancel_version = excluded.cancel_version, cancel_acked = excluded.cancel_acked, last_error = excluded.last_error,
		created_at = excluded.created_at, updated_at = excluded.updated_at, create_epoch = excluded.create_epoch,
		create_seq = excluded.create_seq, create_tag = excluded.create_tag, pinned = excluded.pinned`
	CursorUpsert = ` ON CONFLICT (peer) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq, tag = excluded.tag`
	AckUpsert    = ` ON CONFLICT (origin) DO UPDATE SET acked_seq = excluded.acked_seq, acked_tag = excluded.acked_tag, ` +
		keepPrunedSeq
)

// PeerRow returns the values of p's row, in PeerColumns order.
func PeerRow(p *berth.Peer) []any {
	return []any{p.Name, p.URL, p.CAFingerprint, p.SealedToken, int64(p.RouteTimeout), int64(p.LostTimeout),
		nanos(p.CreatedAt), nanos(p.UpdatedAt)}
}

// HandoffRow returns the values of h's row, in HandoffColumns order.
func HandoffRow(h *berth.Handoff) []any {
	return []any{h.JobID, h.Incarnation, h.Peer, h.RemoteID, h.Nonce, string(h.State), h.RemoteJobID, h.Sent,
		h.CancelVersion, h.CancelAcked, h.LastError, nanos(h.CreatedAt), nanos(h.UpdatedAt), h.CreateRow.Epoch,
		int64(h.CreateRow.Seq), h.CreateRow.Tag, h.Pinned}
}

// CursorRow returns the values of c's row, in CursorColumns order.
func CursorRow(c *store.PeerCursor) []any {
	return []any{c.Peer, c.Cursor.Epoch, int64(c.Cursor.Seq), c.Cursor.Tag}
}

// ReceivedRow returns the values of r's row, in ReceivedColumns order.
func ReceivedRow(r *store.ReceivedJob) []any { return []any{r.Origin, r.RemoteID, r.Nonce, r.JobID} }

// ChangelogRow returns the values of c's row, in ChangelogColumns order.
func ChangelogRow(c *berth.ChangelogRow) []any {
	j := &c.Job
	return []any{int64(c.Seq), c.Tag, c.Origin, j.RemoteID, j.Nonce, j.JobID, string(j.State), j.Reason, nullInt(j.ExitCode),
		j.Attempts, nanos(j.StartedAt), nanos(j.FinishedAt), j.Tombstone, nanos(j.At)}
}

// AckRow returns the values of a's row, in AckColumns order.
func AckRow(a *store.OriginAck) []any {
	return []any{a.Origin, int64(a.Seq), a.Tag, int64(a.PrunedSeq)}
}

func scanPeer(row scanner) (*berth.Peer, error) {
	var (
		p                berth.Peer
		route, lost      int64
		created, updated int64
	)
	if err := row.Scan(&p.Name, &p.URL, &p.CAFingerprint, &p.SealedToken, &route, &lost, &created, &updated); err != nil {
		return nil, err
	}
	p.RouteTimeout, p.LostTimeout = berth.Duration(route), berth.Duration(lost)
	p.CreatedAt, p.UpdatedAt = fromNanos(created), fromNanos(updated)
	return &p, nil
}

func scanHandoff(row scanner) (*berth.Handoff, error) {
	var (
		h                berth.Handoff
		state            string
		created, updated int64
		createSeq        int64
	)
	if err := row.Scan(&h.JobID, &h.Incarnation, &h.Peer, &h.RemoteID, &h.Nonce, &state, &h.RemoteJobID, &h.Sent,
		&h.CancelVersion, &h.CancelAcked, &h.LastError, &created, &updated, &h.CreateRow.Epoch, &createSeq,
		&h.CreateRow.Tag, &h.Pinned); err != nil {
		return nil, err
	}
	h.State, h.CreatedAt, h.UpdatedAt = berth.HandoffState(state), fromNanos(created), fromNanos(updated)
	h.CreateRow.Seq = uint64(createSeq)
	return &h, nil
}

func scanCursor(row scanner) (store.PeerCursor, error) {
	var (
		c   store.PeerCursor
		seq int64
	)
	err := row.Scan(&c.Peer, &c.Cursor.Epoch, &seq, &c.Cursor.Tag)
	c.Cursor.Seq = uint64(seq)
	return c, err
}

func scanChangelogRow(row scanner) (berth.ChangelogRow, error) {
	var (
		c                     berth.ChangelogRow
		seq                   int64
		state                 string
		exitCode              sql.NullInt64
		started, finished, at int64
	)
	j := &c.Job
	if err := row.Scan(&seq, &c.Tag, &c.Origin, &j.RemoteID, &j.Nonce, &j.JobID, &state, &j.Reason, &exitCode, &j.Attempts,
		&started, &finished, &j.Tombstone, &at); err != nil {
		return c, err
	}
	c.Seq, j.State, j.ExitCode = uint64(seq), berth.JobState(state), intPtr(exitCode)
	j.StartedAt, j.FinishedAt, j.At = fromNanos(started), fromNanos(finished), fromNanos(at)
	return c, nil
}

// scanRemoteJob reads a received job's row of ReceivedJobs.
func scanRemoteJob(row scanner) (berth.RemoteJob, error) {
	var (
		j                     berth.RemoteJob
		state                 string
		exitCode              sql.NullInt64
		started, finished, at int64
	)
	if err := row.Scan(&j.RemoteID, &j.Nonce, &j.JobID, &state, &j.Reason, &exitCode, &j.Attempts, &started, &finished,
		&at); err != nil {
		return j, err
	}
	j.State, j.ExitCode = berth.JobState(state), intPtr(exitCode)
	j.StartedAt, j.FinishedAt, j.At = fromNanos(started), fromNanos(finished), fromNanos(at)
	return j, nil
}

const (
	selectPeers     = `SELECT ` + PeerColumns + ` FROM peers ORDER BY name`
	selectHandoffs  = `SELECT ` + HandoffColumns + ` FROM handoffs`
	selectChangelog = `SELECT ` + ChangelogColumns + ` FROM federation_changelog`
	// activeStates is the states of jobs not ended.
	activeStates = `('pending', 'running')`
)

// federationState returns the federation's part of LoadActive: the
// epoch, the head (the highest seq stored or acknowledged, so that seqs
// keep increasing when every row has been pruned), the peers, the handles
// still live (their job not ended, a cancel not acknowledged, or not yet
// delivered; a handle whose job is missing counts as live) and the
// cursors.
func (r *Reader) federationState(ctx context.Context) (store.FederationState, error) {
	var (
		f    store.FederationState
		head int64
		err  error
	)
	err = r.each(ctx, `SELECT (SELECT epoch FROM federation_epoch WHERE id = 1),
		(SELECT max(h) FROM (SELECT coalesce(max(seq), 0) AS h FROM federation_changelog
			UNION ALL SELECT coalesce(max(acked_seq), 0) FROM federation_origins
			UNION ALL SELECT coalesce(max(pruned_seq), 0) FROM federation_origins) heads)`, nil,
		func(row scanner) error { return row.Scan(&f.Epoch, &head) })
	if err != nil {
		return f, fmt.Errorf("load federation epoch: %w", err)
	}
	f.Head = uint64(head)
	if f.Peers, err = r.Peers(ctx); err != nil {
		return f, err
	}
	f.Handoffs, err = collect(ctx, r, scanHandoff, selectHandoffs+` h WHERE h.state = 'pending_handoff'
		OR h.cancel_acked < h.cancel_version
		OR NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = h.job_id AND j.state NOT IN `+activeStates+`)
		ORDER BY h.job_id, h.incarnation`)
	if err != nil {
		return f, fmt.Errorf("load handoffs: %w", err)
	}
	if f.Cursors, err = collect(ctx, r, scanCursor, `SELECT `+CursorColumns+` FROM peer_cursors ORDER BY peer`); err != nil {
		return f, fmt.Errorf("load peer cursors: %w", err)
	}
	return f, nil
}

// Peers returns every peer, by name, with its sealed token.
func (r *Reader) Peers(ctx context.Context) ([]*berth.Peer, error) {
	ps, err := collect(ctx, r, scanPeer, selectPeers)
	if err != nil {
		return nil, fmt.Errorf("list peers: %w", err)
	}
	return ps, nil
}

// Handoffs returns every handle of job id, by incarnation.
func (r *Reader) Handoffs(ctx context.Context, jobID string) ([]*berth.Handoff, error) {
	a := args{d: &r.dialect}
	hs, err := collect(ctx, r, scanHandoff, selectHandoffs+` WHERE job_id = `+a.add(jobID)+` ORDER BY incarnation`, a.list...)
	if err != nil {
		return nil, fmt.Errorf("handoffs of %s: %w", jobID, err)
	}
	return hs, nil
}

// ReceivedJobID returns the id of the job created for the handoff
// (origin, remoteID, nonce); none is ECodeNotFound.
func (r *Reader) ReceivedJobID(ctx context.Context, origin, remoteID, nonce string) (string, error) {
	a := args{d: &r.dialect}
	q := `SELECT job_id FROM received_jobs WHERE origin = ` + a.add(origin) + ` AND remote_id = ` + a.add(remoteID) +
		` AND nonce = ` + a.add(nonce)
	ids, err := collect(ctx, r, func(row scanner) (id string, err error) { return id, row.Scan(&id) }, q, a.list...)
	if err != nil {
		return "", fmt.Errorf("received job %s/%s: %w", origin, remoteID, err)
	}
	if len(ids) == 0 {
		return "", berth.Errorf(berth.ECodeNotFound, "no job received from %s as %s (nonce %s)", origin, remoteID, nonce)
	}
	return ids[0], nil
}

// ReceivedJobs returns the current state of origin's received jobs that
// are not ended, by remote id, then nonce. Each is At its latest
// changelog row still stored, or else its creation.
func (r *Reader) ReceivedJobs(ctx context.Context, origin string) ([]berth.RemoteJob, error) {
	a := args{d: &r.dialect}
	q := `SELECT r.remote_id, r.nonce, j.id, j.state, j.reason, j.exit_code, j.attempts, j.started_at, j.finished_at,
			coalesce(c.at, j.created_at)
		FROM received_jobs r JOIN jobs j ON j.id = r.job_id
		LEFT JOIN (SELECT job_id, max(at) AS at FROM federation_changelog WHERE origin = ` + a.add(origin) + ` GROUP BY job_id) c
			ON c.job_id = r.job_id
		WHERE r.origin = ` + a.add(origin) + ` AND j.state IN ` + activeStates + ` ORDER BY r.remote_id, r.nonce`
	jobs, err := collect(ctx, r, scanRemoteJob, q, a.list...)
	if err != nil {
		return nil, fmt.Errorf("jobs received from %s: %w", origin, err)
	}
	return jobs, nil
}

// Changelog returns up to limit (0: all) of origin's changelog rows
// with a seq above after, oldest first.
func (r *Reader) Changelog(ctx context.Context, origin string, after uint64, limit int) ([]berth.ChangelogRow, error) {
	a := args{d: &r.dialect}
	q := selectChangelog + ` WHERE origin = ` + a.add(origin) + ` AND seq > ` + a.add(int64(after)) + ` ORDER BY seq`
	if limit > 0 {
		q += ` LIMIT ` + a.add(limit)
	}
	rows, err := collect(ctx, r, scanChangelogRow, q, a.list...)
	if err != nil {
		return nil, fmt.Errorf("changelog of %s: %w", origin, err)
	}
	return rows, nil
}

// Tombstones returns origin's tombstone rows with a seq above after,
// oldest first.
func (r *Reader) Tombstones(ctx context.Context, origin string, after uint64) ([]berth.ChangelogRow, error) {
	a := args{d: &r.dialect}
	q := selectChangelog + ` WHERE origin = ` + a.add(origin) + ` AND seq > ` + a.add(int64(after)) + ` AND tombstone ORDER BY seq`
	rows, err := collect(ctx, r, scanChangelogRow, q, a.list...)
	if err != nil {
		return nil, fmt.Errorf("tombstones of %s: %w", origin, err)
	}
	return rows, nil
}

// ChangelogRow returns the row of seq; one not stored is ECodeNotFound.
func (r *Reader) ChangelogRow(ctx context.Context, seq uint64) (*berth.ChangelogRow, error) {
	a := args{d: &r.dialect}
	rows, err := collect(ctx, r, scanChangelogRow, selectChangelog+` WHERE seq = `+a.add(int64(seq)), a.list...)
	if err != nil {
		return nil, fmt.Errorf("changelog row %d: %w", seq, err)
	}
	if len(rows) == 0 {
		return nil, berth.Errorf(berth.ECodeNotFound, "no changelog row %d", seq)
	}
	return &rows[0], nil
}

// OriginAck returns what origin last acknowledged, the zero OriginAck
// for an origin never heard from.
func (r *Reader) OriginAck(ctx context.Context, origin string) (store.OriginAck, error) {
	a := args{d: &r.dialect}
	var ack store.OriginAck
	err := r.each(ctx, `SELECT acked_seq, acked_tag, pruned_seq FROM federation_origins WHERE origin = `+a.add(origin), a.list,
		func(row scanner) error {
			var seq, pruned int64
			err := row.Scan(&seq, &ack.Tag, &pruned)
			ack.Origin, ack.Seq, ack.PrunedSeq = origin, uint64(seq), uint64(pruned)
			return err
		})
	if err != nil {
		return store.OriginAck{}, fmt.Errorf("ack of %s: %w", origin, err)
	}
	return ack, nil
}

// Origins returns every origin that has received jobs or changelog rows,
// by name.
func (r *Reader) Origins(ctx context.Context) ([]string, error) {
	names, err := collect(ctx, r, func(row scanner) (name string, err error) { return name, row.Scan(&name) },
		`SELECT origin FROM received_jobs UNION SELECT origin FROM federation_changelog ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list origins: %w", err)
	}
	return names, nil
}

// Statement is one statement of a transaction a TxFunc runs: a query,
// with the dialect's placeholders, and its arguments.
type Statement struct {
	Query string
	Args  []any
}

// TxFunc runs stmts in order in one transaction of their own, and
// returns how many rows each changed; on an error nothing is changed.
type TxFunc func(ctx context.Context, stmts []Statement) ([]int64, error)

// Pruner implements the pruning of the federation's changelog over a
// Reader's dialect and a driver's TxFunc; drivers embed it.
type Pruner struct {
	r  *Reader
	tx TxFunc
}

// NewPruner returns a Pruner writing the dialect of r with tx.
func NewPruner(r *Reader, tx TxFunc) *Pruner { return &Pruner{r: r, tx: tx} }

// prunable is the condition of federation.Prunable on a changelog row,
// over the arguments origin, head, the acknowledged seq, olderThan (unix
// nanoseconds), the acknowledged seq again and olderThan again: a row of
// origin below the head, and, for a tombstone, acknowledged and older
// than the cut-off, for any other row, either.
const prunable = `origin = ? AND seq < ? AND CASE WHEN tombstone THEN seq <= ? AND at < ? ELSE seq <= ? OR at < ? END`

// PruneChangelog deletes origin's rows that federation.Prunable allows,
// given its acknowledgement and the head (the highest seq stored) as they
// stand when it starts, raising its PrunedSeq to the highest seq deleted
// above the acknowledged one; it returns how many rows it deleted. A row
// written, or acknowledged, meanwhile waits for the next prune. One
// transaction: first the PrunedSeq, then the delete.
func (p *Pruner) PruneChangelog(ctx context.Context, origin string, olderThan time.Time) (int, error) {
	ack, err := p.r.OriginAck(ctx, origin)
	if err != nil {
		return 0, fmt.Errorf("prune changelog of %s: %w", origin, err)
	}
	var head int64
	if err := p.r.each(ctx, `SELECT coalesce(max(seq), 0) FROM federation_changelog`, nil,
		func(row scanner) error { return row.Scan(&head) }); err != nil {
		return 0, fmt.Errorf("prune changelog of %s: head: %w", origin, err)
	}
	acked, at := int64(ack.Seq), nanos(olderThan)
	rule := []any{origin, head, acked, at, acked, at}
	n, err := p.tx(ctx, []Statement{
		{p.r.dialect.rewrite(`INSERT INTO federation_origins (` + AckColumns + `)
			SELECT CAST(? AS TEXT), 0, '', m FROM (SELECT max(seq) AS m FROM federation_changelog
				WHERE ` + prunable + ` AND seq > ?) pruned
			WHERE m IS NOT NULL
			ON CONFLICT (origin) DO UPDATE SET ` + keepPrunedSeq), append(append([]any{origin}, rule...), acked)},
		{p.r.dialect.rewrite(`DELETE FROM federation_changelog WHERE ` + prunable), rule},
	})
	if err != nil {
		return 0, fmt.Errorf("prune changelog of %s: %w", origin, err)
	}
	return int(n[1]), nil
}
