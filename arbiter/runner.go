package arbiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/berth-dev/berth"
)

// RunStore is what a Runner reads and writes; store.Store implements it.
type RunStore interface {
	// Schedules returns every entry of the registry.
	Schedules(ctx context.Context) ([]*berth.Schedule, error)
	// ClaimScheduleRun sets entry id's LastRun to scheduled if it is
	// still prev and reports whether it did (a compare-and-set).
	ClaimScheduleRun(ctx context.Context, id string, scheduled, prev time.Time) (bool, error)
	// RecordScheduleRun records the job a run submitted, or why it
	// failed, if that run is still the entry's last.
	RecordScheduleRun(ctx context.Context, id string, scheduled time.Time, jobID, errText string) error
}

// DefaultRunEvery is how often a Runner looks for due runs by default.
const DefaultRunEvery = 5 * time.Second

// Runner runs the schedule entries that carry a job: at every time an
// entry's cron names it submits the entry's job. One runs in the server
// that leads; the store makes it safe for more to run at once.
//
// The rules, for an entry with a job, at each look (every Every):
//   - The run due is the latest time its cron names that is at or before
//     now and after both its last run (LastRun) and when the job began to
//     run on that cron (RunFrom: the registration, or the last change of
//     the job or the cron). A new entry never runs a time before it was
//     registered.
//   - Missed runs collapse: when several times passed since the last run
//     (the server was down, or a look was late), the job runs once, for
//     the latest of them, never in a burst.
//   - A run is claimed before it is submitted: ClaimScheduleRun moves
//     LastRun from the value read to the run's time, and only the runner
//     whose claim changed the row submits. Two servers, or a restart
//     racing the old process, never both start one run.
//   - The submission carries the idempotency key "schedule:ID:UNIX" (the
//     run's time in unix seconds), so that it can never create the run's
//     jobs twice, even if submitted again. A job without a name is named
//     after the entry's id.
//   - Claim first, then submit: a run whose submission fails (the spec is
//     refused, the server stops in between) is not retried. It is logged
//     and its error recorded (LastError); the next run is at the next
//     time. At most once, rather than at least once: a retry loop could
//     start a job late, or over and over.
//
// Cron times are wall-clock times in Location (UTC by default).
type Runner struct {
	// Store holds the registry and the run bookkeeping.
	Store RunStore
	// Submit submits a job, as POST /api/v1/jobs does (the controller's
	// Submit); the context carries the actor "schedule/ID".
	Submit func(ctx context.Context, req *berth.SubmitRequest) ([]*berth.Job, error)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Every is how often the runner looks for due runs (DefaultRunEvery
	// when 0).
	Every time.Duration
	// Location is where cron times are wall-clock times (UTC when nil).
	Location *time.Location
	// Log receives a line for every run and every failure (discarded when
	// nil).
	Log *slog.Logger

	mu      sync.Mutex
	started bool
	stop    chan struct{}
	done    chan struct{}
	cancel  context.CancelFunc
}

// Start starts looking for due runs, at once and then every Every, until
// Stop. It returns an error if Store or Submit is nil or if the runner
// was started before.
func (r *Runner) Start(ctx context.Context) error {
	if r.Store == nil || r.Submit == nil {
		return errors.New("schedule runner: Store and Submit are required")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("schedule runner: started twice")
	}
	r.started = true
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	go r.loop(runCtx)
	return nil
}

// Stop stops the runner: it lets a look under way finish (its runs
// submitted and recorded), then returns. If ctx ends first it cancels the
// look and returns ctx's error. Stopping a runner never started, or
// stopped, or a nil *Runner, does nothing.
func (r *Runner) Stop(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	if !r.started {
		r.mu.Unlock()
		return nil
	}
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.mu.Unlock()
	defer r.cancel()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		r.cancel()
		<-r.done
		return ctx.Err()
	}
}

// loop looks for due runs every Every until stopped.
func (r *Runner) loop(ctx context.Context) {
	defer close(r.done)
	every := r.Every
	if every <= 0 {
		every = DefaultRunEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if err := r.Tick(ctx); err != nil && ctx.Err() == nil {
			r.log().Error("schedule runner", "err", err)
		}
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
	}
}

// Tick looks once: it starts the run due of every entry with a job (see
// Runner) and returns when they are submitted and recorded. A failed
// submission is logged and recorded, not returned; a store failure is
// returned (joined, one per entry it stopped), and the entries it did not
// stop are still run.
func (r *Runner) Tick(ctx context.Context) error {
	list, err := r.Store.Schedules(ctx)
	if err != nil {
		return fmt.Errorf("schedule runner: %w", err)
	}
	now := r.now()
	var errs []error
	for _, s := range list {
		if s.Job == nil {
			continue // display-only
		}
		if err := r.runDue(ctx, s, now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// runDue starts s's run due at now, if any and if this runner claims it.
func (r *Runner) runDue(ctx context.Context, s *berth.Schedule, now time.Time) error {
	c, err := ParseCron(s.Cron)
	if err != nil { // refused at registration; a plain-SQL write could hold one
		return fmt.Errorf("schedule %s: cron: %w", s.ID, err)
	}
	from := s.RegisteredAt
	for _, t := range []time.Time{s.RunFrom, s.LastRun} {
		if t.After(from) {
			from = t
		}
	}
	due := LatestDue(c, from.In(r.location()), now.In(r.location()))
	if due.IsZero() {
		return nil
	}
	claimed, err := r.Store.ClaimScheduleRun(ctx, s.ID, due, s.LastRun)
	if err != nil {
		return fmt.Errorf("schedule %s: %w", s.ID, err)
	}
	if !claimed {
		return nil // another runner started it, or the entry changed meanwhile
	}
	req := *s.Job
	req.IdempotencyKey = RunKey(s.ID, due)
	if req.Name == "" {
		req.Name = JobName(s)
	}
	jobs, err := r.Submit(berth.WithActor(ctx, "schedule/"+s.ID), &req)
	jobID, errText := "", ""
	switch {
	case err != nil:
		errText = err.Error()
		r.log().Error("scheduled run not submitted; it is not retried", "schedule", s.ID,
			"scheduled", due.UTC().Format(time.RFC3339), "err", err)
	case len(jobs) > 0:
		jobID = jobs[0].ID
		r.log().Info("scheduled run submitted", "schedule", s.ID, "scheduled", due.UTC().Format(time.RFC3339),
			"job", jobID, "jobs", len(jobs))
	}
	if err := r.Store.RecordScheduleRun(ctx, s.ID, due, jobID, errText); err != nil {
		return fmt.Errorf("schedule %s: %w", s.ID, err)
	}
	return nil
}

// JobName is the name of the jobs s submits when its job has none: the
// entry's name, with each character a job name may not hold made '-'
// ("Nightly eval" runs as "Nightly-eval"), else its id, else none.
func JobName(s *berth.Schedule) string {
	name := strings.Map(func(r rune) rune {
		if r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-') {
			return r
		}
		return '-'
	}, s.Name)
	name = strings.TrimLeft(name, "._-")
	if len(name) > 128 {
		name = name[:128]
	}
	switch {
	case berth.ValidName(name):
		return name
	case berth.ValidName(s.ID):
		return s.ID
	}
	return ""
}

// RunKey returns the idempotency key of the run of entry id scheduled at
// t: "schedule:ID:UNIX", t in unix seconds.
func RunKey(id string, t time.Time) string {
	return "schedule:" + id + ":" + strconv.FormatInt(t.Unix(), 10)
}

// LatestDue returns the latest time c matches that is after after and at
// or before now (computed in after's location), or the zero time if there
// is none. It takes time in proportion to the matches in a window just
// before now, not to the span since after.
func LatestDue(c *Cron, after, now time.Time) time.Time {
	now = now.In(after.Location())
	if !now.After(after) {
		return time.Time{}
	}
	// Widen a window back from now until it holds a match, then walk
	// forward through it: the half nearest now held none, so the walk is
	// short.
	span := now.Sub(after) // saturates rather than overflows
	w := time.Minute
	for {
		from := after
		if w < span {
			from = now.Add(-w)
		}
		t := c.Next(from)
		if !t.IsZero() && !t.After(now) {
			for {
				next := c.Next(t)
				if next.IsZero() || next.After(now) {
					return t
				}
				t = next
			}
		}
		if w >= span {
			return time.Time{}
		}
		if w > span/2 {
			w = span
		} else {
			w *= 2
		}
	}
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Runner) location() *time.Location {
	if r.Location != nil {
		return r.Location
	}
	return time.UTC
}

func (r *Runner) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.New(slog.DiscardHandler)
}
