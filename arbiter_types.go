package berth

import (
	"encoding/json"
	"fmt"
	"time"
)

// The GPU arbiter's coordination layer (seed 000, Spark Control): the swap
// reservation lock, the schedule registry and the swap webhook. Their JSON
// shapes are Spark Control's, field for field; times are RFC 3339 in UTC
// with "+00:00", in whole seconds, as Spark Control writes them.

// SwapLockTokenHeader is the request header that carries a swap lock's
// token (a query parameter "token" may carry it instead).
const SwapLockTokenHeader = "X-Swap-Lock-Token"

// The bounds of a swap lock's time to live: ttl_seconds defaults to 900 and
// is clamped to [1, 86400].
const (
	DefaultSwapLockTTL = 900 * time.Second
	MinSwapLockTTL     = time.Second
	MaxSwapLockTTL     = 86400 * time.Second
)

// ClampSwapLockTTL returns ttl clamped to [MinSwapLockTTL, MaxSwapLockTTL].
func ClampSwapLockTTL(ttl time.Duration) time.Duration {
	return min(max(ttl, MinSwapLockTTL), MaxSwapLockTTL)
}

// SparkTimeLayout is how seed 000 writes times: RFC 3339 with a numeric
// offset, which for UTC is "+00:00".
const SparkTimeLayout = "2006-01-02T15:04:05-07:00"

// FormatSparkTime returns t in UTC as SparkTimeLayout, in whole seconds
// (truncated); the zero time is "".
func FormatSparkTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Truncate(time.Second).Format(SparkTimeLayout)
}

// ParseSparkTime parses an RFC 3339 time (with "Z" or an offset, with or
// without fractional seconds) and returns it in UTC; "" is the zero time.
// Anything else is an error.
func ParseSparkTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (e.g. 2026-06-18T06:00:00Z)", s)
	}
	return t.UTC(), nil
}

// SwapLock is the stored reservation of the swap path: who holds it, why,
// its secret token (64 hex digits) and its window. A lock is held only
// before ExpiresAt; a stored lock past it counts as no lock.
type SwapLock struct {
	Holder     string
	Note       string
	Token      string
	AcquiredAt time.Time
	ExpiresAt  time.Time
}

// HeldAt reports whether l (possibly nil) is held at now.
func (l *SwapLock) HeldAt(now time.Time) bool { return l != nil && now.Before(l.ExpiresAt) }

// StateAt returns l's public state at now (no acquired_at, no token: the
// shape of GET /api/swap/lock); an unheld or nil lock is {"held": false}.
func (l *SwapLock) StateAt(now time.Time) SwapLockState {
	if !l.HeldAt(now) {
		return SwapLockState{}
	}
	left := l.ExpiresAt.Sub(now)
	return SwapLockState{
		Held:             true,
		Holder:           l.Holder,
		ExpiresAt:        l.ExpiresAt,
		SecondsRemaining: int64((left + time.Second - 1) / time.Second), // rounded up: ≥ 1 while held
		Note:             l.Note,
	}
}

// SwapLockState is the JSON shape of the swap lock (seed 000 §1). Not held,
// it is exactly {"held": false}. Held, it is {held, holder, expires_at,
// seconds_remaining, note}, with acquired_at and token added in the answer
// to the holder's POST /api/swap/lock only.
type SwapLockState struct {
	Held             bool
	Holder           string
	AcquiredAt       time.Time // zero: left out
	ExpiresAt        time.Time
	SecondsRemaining int64
	Note             string
	Token            string // "": left out; the holder's secret
}

// swapLockJSON is SwapLockState on the wire, in the seed's field order.
type swapLockJSON struct {
	Held             bool    `json:"held"`
	Holder           *string `json:"holder,omitempty"`
	AcquiredAt       *string `json:"acquired_at,omitempty"`
	ExpiresAt        *string `json:"expires_at,omitempty"`
	SecondsRemaining *int64  `json:"seconds_remaining,omitempty"`
	Note             *string `json:"note,omitempty"`
	Token            *string `json:"token,omitempty"`
}

// MarshalJSON writes the seed's shape (see SwapLockState). It returns no
// error.
func (s SwapLockState) MarshalJSON() ([]byte, error) {
	if !s.Held {
		return []byte(`{"held":false}`), nil
	}
	expires := FormatSparkTime(s.ExpiresAt)
	j := swapLockJSON{Held: true, Holder: &s.Holder, ExpiresAt: &expires, SecondsRemaining: &s.SecondsRemaining, Note: &s.Note}
	if !s.AcquiredAt.IsZero() {
		acquired := FormatSparkTime(s.AcquiredAt)
		j.AcquiredAt = &acquired
	}
	if s.Token != "" {
		j.Token = &s.Token
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the seed's shape; a time that is not RFC 3339 is an
// error.
func (s *SwapLockState) UnmarshalJSON(data []byte) error {
	var j swapLockJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	out := SwapLockState{Held: j.Held, Holder: str(j.Holder), Note: str(j.Note), Token: str(j.Token)}
	if j.SecondsRemaining != nil {
		out.SecondsRemaining = *j.SecondsRemaining
	}
	var err error
	if out.AcquiredAt, err = ParseSparkTime(str(j.AcquiredAt)); err != nil {
		return fmt.Errorf("acquired_at: %w", err)
	}
	if out.ExpiresAt, err = ParseSparkTime(str(j.ExpiresAt)); err != nil {
		return fmt.Errorf("expires_at: %w", err)
	}
	*s = out
	return nil
}

// SwapLockRequest is the body of POST /api/swap/lock. TTLSeconds is a JSON
// number (absent or null: DefaultSwapLockTTL), clamped to [1, 86400].
// Token, which Berth also takes from the body, extends a lock the same
// holder holds; SwapLockTokenHeader or ?token= may carry it instead.
type SwapLockRequest struct {
	Holder     string   `json:"holder"`
	TTLSeconds *float64 `json:"ttl_seconds,omitempty"`
	Note       string   `json:"note,omitempty"`
	Token      string   `json:"token,omitempty"`
}

// SwapLockRelease is the body of DELETE /api/swap/lock: the lock is no
// longer held; Released says whether this request ended a held lock.
type SwapLockRelease struct {
	Held     bool `json:"held"`
	Released bool `json:"released"`
}

// Schedule is an entry of the schedule registry (seed 000 §3): a job some
// scheduler outside Berth runs on the GPUs, registered for display.
// NextRun is kept as the client wrote it (an RFC 3339 time, or "").
//
// Berth's extension: an entry with a Job is one Berth runs itself, at
// every time its Cron names (arbiter.Runner); LastRun, LastJobID and
// LastError are that run's bookkeeping. An entry without a Job is
// display-only, exactly as the seed says, and those fields stay zero.
type Schedule struct {
	ID           string
	Name         string
	Owner        string
	Cron         string
	NextRun      string
	Description  string
	RegisteredAt time.Time
	UpdatedAt    time.Time

	// Job is the job Berth submits at every time Cron names; nil for a
	// display-only entry.
	Job *SubmitRequest
	// RunFrom is when Job began to run on Cron: the registration with a
	// job, or the last change of Job or Cron. Only times after it (and
	// after LastRun) are run; zero for a display-only entry.
	RunFrom time.Time
	// LastRun is the scheduled time of the last run started (claimed),
	// zero for none yet.
	LastRun time.Time
	// LastJobID is the job the last run submitted, "" for none (yet).
	LastJobID string
	// LastError is why the last run's submission failed, "" if it did not.
	LastError string
}

// scheduleJSON is Schedule on the wire. The fields after updated_at are
// Berth's, written only for an entry with a job, so that a display-only
// entry is the seed's object, key for key.
type scheduleJSON struct {
	ID           string         `json:"id"`
	Name         string         `json:"name"`
	Owner        string         `json:"owner"`
	Cron         string         `json:"cron"`
	NextRun      string         `json:"next_run"`
	Description  string         `json:"description"`
	RegisteredAt string         `json:"registered_at"`
	UpdatedAt    string         `json:"updated_at"`
	Job          *SubmitRequest `json:"job,omitempty"`
	LastRun      *string        `json:"last_run,omitempty"`    // "" for none yet
	LastJobID    *string        `json:"last_job_id,omitempty"` // "" for none (yet)
	LastError    string         `json:"last_error,omitempty"`
}

// MarshalJSON writes every field, times in the seed's format; job,
// last_run, last_job_id and last_error (when not "") only for an entry
// with a job. It returns no error.
func (s Schedule) MarshalJSON() ([]byte, error) {
	j := scheduleJSON{ID: s.ID, Name: s.Name, Owner: s.Owner, Cron: s.Cron, NextRun: s.NextRun,
		Description: s.Description, RegisteredAt: FormatSparkTime(s.RegisteredAt), UpdatedAt: FormatSparkTime(s.UpdatedAt)}
	if s.Job != nil {
		lastRun, lastJob := FormatSparkTime(s.LastRun), s.LastJobID
		j.Job, j.LastRun, j.LastJobID, j.LastError = s.Job, &lastRun, &lastJob, s.LastError
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes; a time that is not RFC 3339
// is an error.
func (s *Schedule) UnmarshalJSON(data []byte) error {
	var j scheduleJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	out := Schedule{ID: j.ID, Name: j.Name, Owner: j.Owner, Cron: j.Cron, NextRun: j.NextRun, Description: j.Description,
		Job: j.Job, LastError: j.LastError}
	var err error
	if out.RegisteredAt, err = ParseSparkTime(j.RegisteredAt); err != nil {
		return fmt.Errorf("registered_at: %w", err)
	}
	if out.UpdatedAt, err = ParseSparkTime(j.UpdatedAt); err != nil {
		return fmt.Errorf("updated_at: %w", err)
	}
	if j.LastRun != nil {
		if out.LastRun, err = ParseSparkTime(*j.LastRun); err != nil {
			return fmt.Errorf("last_run: %w", err)
		}
	}
	if j.LastJobID != nil {
		out.LastJobID = *j.LastJobID
	}
	*s = out
	return nil
}

// ScheduleRequest is the body of POST /api/schedule: register (no or a new
// id) or update in place (a known id). Name is required; ID, when given,
// matches ^[A-Za-z0-9_.-]{1,64}$.
//
// Job (Berth's extension) is a job spec, the body of POST /api/v1/jobs:
// with one, Cron is required and Berth submits the job at every time it
// names; without one the entry is display-only, as in seed 000.
type ScheduleRequest struct {
	ID          string         `json:"id,omitempty"`
	Name        string         `json:"name"`
	Owner       string         `json:"owner,omitempty"`
	Cron        string         `json:"cron,omitempty"`
	NextRun     string         `json:"next_run,omitempty"`
	Description string         `json:"description,omitempty"`
	Job         *SubmitRequest `json:"job,omitempty"`
}

// ScheduleList is the body of GET /api/schedule.
type ScheduleList struct {
	Schedules []*Schedule `json:"schedules"`
}

// ScheduleDeleted is the body of DELETE /api/schedule/{id}.
type ScheduleDeleted struct {
	Deleted bool `json:"deleted"`
}

// Swap webhook events (seed 000 §2).
const (
	SwapComplete = "swap_complete"
	SwapFailed   = "swap_failed"
)

// SwapEvent is the body of a swap webhook, sent after every real (not dry)
// swap. Returncode is null when the swap ended without one.
type SwapEvent struct {
	Event      string `json:"event"` // SwapComplete or SwapFailed
	JobID      string `json:"job_id"`
	ModelKey   string `json:"model_key"`
	State      string `json:"state"` // "ready" or "failed"
	Returncode *int   `json:"returncode"`
	StartedAt  string `json:"started_at"`  // FormatSparkTime
	FinishedAt string `json:"finished_at"` // FormatSparkTime
	DryRun     bool   `json:"dry_run"`
}

// Swap states, in order; a swap ends ready or failed.
const (
	SwapStatePending  = "pending"  // accepted, not started
	SwapStateStopping = "stopping" // stopping what the pool serves now
	SwapStateStarting = "starting" // the new model's service is starting and warming up
	SwapStateReady    = "ready"    // the new model serves: its endpoint is listed
	SwapStateFailed   = "failed"   // it did not become ready (see reason)
)

// Swap is one model swap of a pool (seed 000's swap job): what it swaps
// to, where it stands and, once ended, how.
type Swap struct {
	ID          string   `json:"job_id"` // the seed calls a swap a job
	ModelKey    string   `json:"model_key"`
	Pool        string   `json:"pool"`
	State       string   `json:"state"` // Swap*
	Service     string   `json:"service_job_id,omitempty"`
	Stopped     []string `json:"stopped,omitempty"` // the services it stopped; for a dry run, those it would stop
	Reason      string   `json:"reason,omitempty"`
	Returncode  *int     `json:"returncode"` // 0 once ready, 1 once failed, null before
	StartedAt   string   `json:"started_at"` // FormatSparkTime
	FinishedAt  string   `json:"finished_at,omitempty"`
	DryRun      bool     `json:"dry_run"`
	RequestedBy string   `json:"requested_by,omitempty"`
}

// CatalogModel is one entry of the arbiter's catalog, by key (the body of
// PUT /api/v1/catalog/models/{key}): a service job (a template with its
// variables, or a command) and the pool that serves it.
type CatalogModel struct {
	Pool      string            `json:"pool"`
	Template  string            `json:"template,omitempty"`
	Vars      map[string]string `json:"vars,omitempty"`
	Command   Argv              `json:"command,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Resources Resources         `json:"resources,omitzero"`
}

// SwapRequest is the body of POST /api/swap.
type SwapRequest struct {
	ModelKey string `json:"model_key"`
	DryRun   bool   `json:"dry_run,omitempty"`
}

// SwapValidation is the answer of POST /api/swap/{key}/validate (and of a
// dry run): whether a swap to the model could start now, and if not why.
type SwapValidation struct {
	OK       bool     `json:"ok"`
	ModelKey string   `json:"model_key"`
	Pool     string   `json:"pool,omitempty"`
	Workers  []string `json:"workers,omitempty"` // the pool's hosts taking work
	Problems []string `json:"problems,omitempty"`
}
