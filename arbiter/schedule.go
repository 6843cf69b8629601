package arbiter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/berth-dev/berth"
)

// ScheduleStore keeps the schedule registry; store.Store implements it.
type ScheduleStore interface {
	// PutSchedule registers s or updates its id's entry in place, keeping
	// its RegisteredAt, and returns the entry stored.
	PutSchedule(ctx context.Context, s *berth.Schedule) (*berth.Schedule, error)
	// Schedules returns every entry, oldest registration first.
	Schedules(ctx context.Context) ([]*berth.Schedule, error)
	// DeleteSchedule deletes entry id; an unknown id is ECodeNotFound.
	DeleteSchedule(ctx context.Context, id string) error
}

// Limits on a schedule entry's text fields, in bytes.
const (
	MaxScheduleNameLen        = 256
	MaxScheduleOwnerLen       = 256
	MaxScheduleDescriptionLen = 4096
	MaxScheduleIDLen          = 64
)

// Registry is the schedule registry (seed 000 §3): what external
// schedulers will run on the GPUs and when, registered for display. Berth
// keeps the entries in the store (they survive a restart). It does not run
// them, except an entry that carries a job (Berth's extension), which a
// Runner submits at the times its cron names. Its methods are safe for
// concurrent use.
type Registry struct {
	// Now is the clock (time.Now by default).
	Now func() time.Time

	store ScheduleStore
}

// NewRegistry returns the schedule registry kept in s.
func NewRegistry(s ScheduleStore) *Registry { return &Registry{Now: time.Now, store: s} }

// Put registers req, with a new id when req.ID is "", or updates the entry
// of req.ID in place (its registered_at stays, updated_at is now), and
// returns the stored entry. Errors are ECodeInvalid naming the field: an
// id not matching ^[A-Za-z0-9_.-]{1,64}$, a blank name, a cron expression
// that is not standard 5-field cron (see ParseCron), a next_run that is
// not RFC 3339, text over its limit or with control characters, a job
// without a cron or that is not a valid submission (the field is "job."
// and the job's field, e.g. "job.command"); a store failure is returned
// wrapped. An entry with a job runs from now on: the change of its job or
// cron starts it afresh, with no run for a time before it.
func (g *Registry) Put(ctx context.Context, req berth.ScheduleRequest) (*berth.Schedule, error) {
	if err := ValidateScheduleRequest(&req); err != nil {
		return nil, err
	}
	id := req.ID
	if id == "" {
		id = newScheduleID()
	}
	now := g.Now().UTC()
	s := &berth.Schedule{ID: id, Name: req.Name, Owner: req.Owner, Cron: req.Cron, NextRun: req.NextRun,
		Description: req.Description, RegisteredAt: now, UpdatedAt: now, Job: req.Job}
	if req.Job != nil {
		s.RunFrom = now
	}
	stored, err := g.store.PutSchedule(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("register schedule: %w", err)
	}
	return stored, nil
}

// List returns every entry, oldest registration first (never nil). It
// returns a store failure wrapped.
func (g *Registry) List(ctx context.Context) ([]*berth.Schedule, error) {
	list, err := g.store.Schedules(ctx)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	if list == nil {
		list = []*berth.Schedule{}
	}
	return list, nil
}

// Delete deregisters entry id: an invalid id is ECodeInvalid, an unknown
// one ECodeNotFound; a store failure is returned wrapped.
func (g *Registry) Delete(ctx context.Context, id string) error {
	if err := ValidScheduleID(id); err != nil {
		return err
	}
	if err := g.store.DeleteSchedule(ctx, id); err != nil {
		if berth.ErrorCode(err) == berth.ECodeNotFound {
			return &berth.Error{Code: berth.ECodeNotFound, Field: "id", Message: fmt.Sprintf("no schedule %s", id)}
		}
		return fmt.Errorf("delete schedule %s: %w", id, err)
	}
	return nil
}

// ValidScheduleID returns nil if id matches ^[A-Za-z0-9_.-]{1,64}$, else
// an ECodeInvalid error for field "id".
func ValidScheduleID(id string) error {
	if id == "" || len(id) > MaxScheduleIDLen {
		return berth.Invalidf("id", "must be 1 to %d characters of A-Z a-z 0-9 _ . -", MaxScheduleIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return berth.Invalidf("id", "%q holds %q; an id is 1 to %d characters of A-Z a-z 0-9 _ . -", id, rune(c), MaxScheduleIDLen)
		}
	}
	return nil
}

// ValidateScheduleRequest checks req as Registry.Put does, returning the
// first ECodeInvalid error, which names the field.
func ValidateScheduleRequest(req *berth.ScheduleRequest) error {
	if req.ID != "" {
		if err := ValidScheduleID(req.ID); err != nil {
			return err
		}
	}
	if err := checkText("name", req.Name, MaxScheduleNameLen, true); err != nil {
		return err
	}
	if err := checkText("owner", req.Owner, MaxScheduleOwnerLen, false); err != nil {
		return err
	}
	if err := checkText("description", req.Description, MaxScheduleDescriptionLen, false); err != nil {
		return err
	}
	if req.Cron != "" {
		if err := checkText("cron", req.Cron, 256, false); err != nil {
			return err
		}
		if _, err := ParseCron(req.Cron); err != nil {
			return &berth.Error{Code: berth.ECodeInvalid, Field: "cron", Err: err}
		}
	}
	if req.NextRun != "" {
		if len(req.NextRun) > 64 {
			return berth.Invalidf("next_run", "is %d bytes long; want an RFC 3339 time", len(req.NextRun))
		}
		if _, err := berth.ParseSparkTime(req.NextRun); err != nil {
			return &berth.Error{Code: berth.ECodeInvalid, Field: "next_run", Err: err}
		}
	}
	if req.Job != nil {
		return validateScheduleJob(req)
	}
	return nil
}

// validateScheduleJob checks the job of an entry that carries one: it
// needs a cron and must be a valid submission, without an idempotency key
// (each run gets its own). Errors name the job's field under "job.".
func validateScheduleJob(req *berth.ScheduleRequest) error {
	if req.Cron == "" {
		return berth.Invalidf("cron", "is required when the entry has a job: it says when Berth runs it")
	}
	if req.Job.IdempotencyKey != "" {
		return berth.Invalidf("job.idempotency_key", "must be empty: Berth gives each run its own (schedule:ID:UNIX-TIME)")
	}
	if err := req.Job.Validate(); err != nil {
		var e *berth.Error
		if errors.As(err, &e) && e.Field != "" {
			return &berth.Error{Code: e.Code, Field: "job." + e.Field, Message: e.Message, Err: e.Err}
		}
		return &berth.Error{Code: berth.ECodeInvalid, Field: "job", Err: err}
	}
	return nil
}

// newScheduleID returns a random id of 12 hex digits.
func newScheduleID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
