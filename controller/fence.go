package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-dev/berth"
)

// AttemptValidity says whether attempt id may still act for its job: it
// is the job's live attempt, not being stopped, on a worker heard from
// within the lease. Once a worker is unheard for the lease its attempts
// check invalid, and they are given to another worker only after the
// fence margin more (Config.FenceMargin), so an attempt that checked
// valid has at least that margin before another can start. An unknown id
// is ECodeNotFound; a store error is returned as is.
func (c *Controller) AttemptValidity(ctx context.Context, id string) (*berth.AttemptValidity, error) {
	var v *berth.AttemptValidity
	if err := c.do(ctx, func() {
		if as := c.attempts[id]; as != nil {
			v = c.validity(as, c.now())
		}
	}); err != nil {
		return nil, err
	}
	if v != nil {
		return v, nil
	}
	a, err := c.store.Attempt(ctx, id)
	if err != nil {
		return nil, err
	}
	return &berth.AttemptValidity{AttemptID: a.ID, JobID: a.JobID,
		Reason: fmt.Sprintf("attempt %s is %s: it no longer runs for its job", a.ID, a.State)}, nil
}

// validity is AttemptValidity for a live attempt at now. Loop only.
func (c *Controller) validity(as *attemptState, now time.Time) *berth.AttemptValidity {
	v := &berth.AttemptValidity{AttemptID: as.a.ID, JobID: as.a.JobID}
	unheard := now.Sub(time.Unix(0, as.worker.lastSeen))
	switch why := as.stopReason(); {
	case why != "":
		v.Reason = "attempt is being stopped: " + why
	case unheard > c.cfg.Lease:
		v.Reason = fmt.Sprintf("worker %s unheard for %s, past its lease (%s): the job may be run again elsewhere",
			as.worker.w.Host, unheard.Round(time.Millisecond), c.cfg.Lease)
	default:
		v.Valid = true
	}
	return v
}
