package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/berth-dev/berth"
)

// Arbiter implements the swap lock and the schedule registry of
// store.Store over a Reader's queries and a driver's ExecFunc; drivers
// embed it. Each write is one statement in a transaction of its own. Its
// methods are safe for concurrent use when the driver's functions are.
type Arbiter struct {
	r    *Reader
	exec ExecFunc
}

// NewArbiter returns an Arbiter reading through r and writing with exec.
func NewArbiter(r *Reader, exec ExecFunc) *Arbiter { return &Arbiter{r: r, exec: exec} }

// sql rewrites the "?" placeholders of query into the dialect's.
func (a *Arbiter) sql(query string) string { return a.r.dialect.rewrite(query) }

const swapLockColumns = `holder, note, token, acquired_at, expires_at`

// SwapLock returns the stored swap lock, expired or not; none stored is
// ECodeNotFound.
func (a *Arbiter) SwapLock(ctx context.Context) (*berth.SwapLock, error) {
	ls, err := collect(ctx, a.r, scanSwapLock, `SELECT `+swapLockColumns+` FROM swap_lock WHERE id = 1`)
	if err != nil {
		return nil, fmt.Errorf("read swap lock: %w", err)
	}
	if len(ls) == 0 {
		return nil, berth.Errorf(berth.ECodeNotFound, "no swap lock")
	}
	return ls[0], nil
}

func scanSwapLock(row scanner) (*berth.SwapLock, error) {
	var l berth.SwapLock
	var acquired, expires int64
	if err := row.Scan(&l.Holder, &l.Note, &l.Token, &acquired, &expires); err != nil {
		return nil, err
	}
	l.AcquiredAt, l.ExpiresAt = fromNanos(acquired), fromNanos(expires)
	return &l, nil
}

// PutSwapLock stores l in place of the stored lock whose token is prev,
// or, when prev is "", where no lock is stored. When the stored lock is
// not that one it changes nothing and returns ECodeConflict: a
// compare-and-set, so that servers sharing the store never both hold it.
func (a *Arbiter) PutSwapLock(ctx context.Context, l *berth.SwapLock, prev string) error {
	var n int64
	var err error
	if prev == "" {
		n, err = a.exec(ctx, a.sql(`INSERT INTO swap_lock (id, `+swapLockColumns+`) VALUES (1, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`),
			l.Holder, l.Note, l.Token, nanos(l.AcquiredAt), nanos(l.ExpiresAt))
	} else {
		n, err = a.exec(ctx, a.sql(`UPDATE swap_lock SET holder = ?, note = ?, token = ?, acquired_at = ?, expires_at = ? WHERE id = 1 AND token = ?`),
			l.Holder, l.Note, l.Token, nanos(l.AcquiredAt), nanos(l.ExpiresAt), prev)
	}
	if err != nil {
		return fmt.Errorf("put swap lock: %w", err)
	}
	if n == 0 {
		return berth.Errorf(berth.ECodeConflict, "the swap lock changed meanwhile")
	}
	return nil
}

// DeleteSwapLock deletes the stored lock if its token is token, or
// whatever lock is stored when token is "", and reports whether it
// deleted one.
func (a *Arbiter) DeleteSwapLock(ctx context.Context, token string) (bool, error) {
	var n int64
	var err error
	if token == "" {
		n, err = a.exec(ctx, `DELETE FROM swap_lock`)
	} else {
		n, err = a.exec(ctx, a.sql(`DELETE FROM swap_lock WHERE token = ?`), token)
	}
	if err != nil {
		return false, fmt.Errorf("delete swap lock: %w", err)
	}
	return n > 0, nil
}

const scheduleColumns = `id, name, owner, cron, next_run, description, registered_at, updated_at, job, run_from,
	last_run, last_job_id, last_error`

// PutSchedule registers s, or updates the entry of its id in place,
// keeping that entry's RegisteredAt and run bookkeeping (LastRun,
// LastJobID, LastError: s's are ignored), and returns the entry stored.
// An update keeps the entry's RunFrom too unless it changes the job or the
// cron. A job that cannot be encoded as JSON is an error.
func (a *Arbiter) PutSchedule(ctx context.Context, s *berth.Schedule) (*berth.Schedule, error) {
	job := ""
	if s.Job != nil {
		b, err := json.Marshal(s.Job)
		if err != nil {
			return nil, fmt.Errorf("put schedule %s: encode job: %w", s.ID, err)
		}
		job = string(b)
	}
	_, err := a.exec(ctx, a.sql(`INSERT INTO schedules (id, name, owner, cron, next_run, description, registered_at, updated_at, job, run_from)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name, owner = excluded.owner, cron = excluded.cron,
			next_run = excluded.next_run, description = excluded.description, updated_at = excluded.updated_at,
			job = excluded.job,
			run_from = CASE WHEN schedules.job <> excluded.job OR schedules.cron <> excluded.cron
				THEN excluded.run_from ELSE schedules.run_from END`),
		s.ID, s.Name, s.Owner, s.Cron, s.NextRun, s.Description, nanos(s.RegisteredAt), nanos(s.UpdatedAt), job, nanos(s.RunFrom))
	if err != nil {
		return nil, fmt.Errorf("put schedule %s: %w", s.ID, err)
	}
	ss, err := collect(ctx, a.r, scanSchedule, a.sql(`SELECT `+scheduleColumns+` FROM schedules WHERE id = ?`), s.ID)
	if err != nil {
		return nil, fmt.Errorf("read schedule %s: %w", s.ID, err)
	}
	if len(ss) == 0 { // deleted meanwhile
		return nil, berth.Errorf(berth.ECodeConflict, "schedule %s was deleted meanwhile", s.ID)
	}
	return ss[0], nil
}

// Schedules returns the registry, oldest registration first.
func (a *Arbiter) Schedules(ctx context.Context) ([]*berth.Schedule, error) {
	ss, err := collect(ctx, a.r, scanSchedule, `SELECT `+scheduleColumns+` FROM schedules ORDER BY registered_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return ss, nil
}

// DeleteSchedule deletes the entry id; an unknown id is ECodeNotFound.
func (a *Arbiter) DeleteSchedule(ctx context.Context, id string) error {
	n, err := a.exec(ctx, a.sql(`DELETE FROM schedules WHERE id = ?`), id)
	if err != nil {
		return fmt.Errorf("delete schedule %s: %w", id, err)
	}
	if n == 0 {
		return berth.Errorf(berth.ECodeNotFound, "no schedule %s", id)
	}
	return nil
}

// ClaimScheduleRun records that the run of entry id scheduled at
// scheduled starts, if the entry's LastRun is still prev, clearing its
// LastJobID and LastError; it reports whether it did. A compare-and-set:
// of the servers (or runners) that race for one run, exactly one claims
// it. An unknown id claims nothing.
func (a *Arbiter) ClaimScheduleRun(ctx context.Context, id string, scheduled, prev time.Time) (bool, error) {
	n, err := a.exec(ctx, a.sql(`UPDATE schedules SET last_run = ?, last_job_id = '', last_error = '' WHERE id = ? AND last_run = ?`),
		nanos(scheduled), id, nanos(prev))
	if err != nil {
		return false, fmt.Errorf("claim run of schedule %s: %w", id, err)
	}
	return n > 0, nil
}

// RecordScheduleRun records what the run of entry id scheduled at
// scheduled submitted (jobID) or why it failed (errText), if that run is
// still the entry's last; otherwise (a later run claimed, the entry
// deleted) it changes nothing, and that is no error.
func (a *Arbiter) RecordScheduleRun(ctx context.Context, id string, scheduled time.Time, jobID, errText string) error {
	_, err := a.exec(ctx, a.sql(`UPDATE schedules SET last_job_id = ?, last_error = ? WHERE id = ? AND last_run = ?`),
		jobID, errText, id, nanos(scheduled))
	if err != nil {
		return fmt.Errorf("record run of schedule %s: %w", id, err)
	}
	return nil
}

func scanSchedule(row scanner) (*berth.Schedule, error) {
	var s berth.Schedule
	var registered, updated, runFrom, lastRun int64
	var job string
	if err := row.Scan(&s.ID, &s.Name, &s.Owner, &s.Cron, &s.NextRun, &s.Description, &registered, &updated,
		&job, &runFrom, &lastRun, &s.LastJobID, &s.LastError); err != nil {
		return nil, err
	}
	s.RegisteredAt, s.UpdatedAt = fromNanos(registered), fromNanos(updated)
	s.RunFrom, s.LastRun = fromNanos(runFrom), fromNanos(lastRun)
	if job != "" {
		s.Job = new(berth.SubmitRequest)
		if err := json.Unmarshal([]byte(job), s.Job); err != nil {
			return nil, fmt.Errorf("schedule %s: decode job: %w", s.ID, err)
		}
	}
	return &s, nil
}
