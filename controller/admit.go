package controller

import (
	"context"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
)

// SeenWithin is how recently a disconnected worker must have been heard
// from for its capacity to count when a submission is checked: a parked
// or disconnected worker seen in the last day may come back, one gone
// longer counts no more.
const SeenWithin = 24 * time.Hour

// fits checks spec against what every backend could ever run it on
// (Backend.Reach): a spec that no worker could take, or a gang that too
// few could, is an ECodeUnsatisfiable error naming the field, unless hold,
// which turns the error into a warning. When no worker has been seen
// within SeenWithin nothing can be checked: the job is accepted, with a
// warning saying so, or, when no worker ever registered (a new cluster
// whose agents have not joined yet, as under berth up), with the warning
// that no worker serves its queue. Loop only.
func (c *Controller) fits(spec *berth.JobSpec, hold bool) (warnings []string, err error) {
	unfit, seen := c.neverFits(spec)
	return c.fitWarnings(unfit, seen, hold)
}

// neverFits returns why no worker of any backend (Backend.Reach), nor any
// machine a cloud pool could rent (SetRentable), could ever run spec, nil
// when enough could, and whether any worker was seen within SeenWithin or
// any pool could rent (with neither, nothing is checked: nil). Loop only.
func (c *Controller) neverFits(spec *berth.JobSpec) (*berth.Error, bool) {
	since := c.now().Add(-SeenWithin)
	ws := func(yield func(*scheduler.Worker) bool) {
		for w := range c.reach(since) {
			if !yield(w) {
				return
			}
		}
		if c.rentable != nil {
			for w := range c.rentable.Reach(spec) {
				if !yield(w) {
					return
				}
			}
		}
	}
	empty := true
	for range ws {
		empty = false
		break
	}
	if empty {
		return nil, false
	}
	return scheduler.NeverFits(ws, &spec.Resources, spec.Nodes), true
}

// fitWarnings returns fits's answer for neverFits's: the warnings, or the
// refusal unless hold.
func (c *Controller) fitWarnings(unfit *berth.Error, seen, hold bool) ([]string, error) {
	switch {
	case !seen && len(c.workers) == 0:
		return nil, nil // no worker ever: the queue's warning says so
	case !seen:
		return []string{"no worker has been seen in the last day, so whether the job can ever run is not checked: it waits for a worker that fits"}, nil
	case unfit == nil:
		return nil, nil
	case hold:
		return []string{unfit.Error() + ": held until a worker that fits joins (hold_until_fits)"}, nil
	}
	unfit.Message += " (hold_until_fits, or --hold-until-fits, queues it until a worker that fits joins)"
	return nil, unfit
}

// CheckFits says whether req could ever run, as a submission of it is
// checked (see SubmitRequest.HoldUntilFits): an ECodeUnsatisfiable error
// if not, else the warnings a submission would get about its fit. It
// stores nothing; schedule entries are checked with it when added.
func (c *Controller) CheckFits(ctx context.Context, req *berth.SubmitRequest) ([]string, error) {
	var warnings []string
	var unfit error
	if err := c.do(ctx, func() { warnings, unfit = c.fits(&req.JobSpec, req.HoldUntilFits) }); err != nil {
		return nil, err
	}
	return warnings, unfit
}
