package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berth-dev/berth"
)

// Job trees: a job submitted with a parent (a driver submitting work with
// --parent $BERTH_JOB_ID, say) is cancelled when its parent is cancelled
// or fails, as are its own children in turn. A parent that succeeds leaves
// its children running.

// checkParent returns an ECodeInvalid error when req names a parent that
// does not exist, and an ECodeConflict one when the parent has failed or
// been cancelled, which would cancel the new jobs at once.
func (c *Controller) checkParent(ctx context.Context, req *berth.SubmitRequest) error {
	if req.Parent == "" {
		return nil
	}
	p, err := c.store.Job(ctx, req.Parent)
	var e *berth.Error
	switch {
	case errors.As(err, &e) && e.Code == berth.ECodeNotFound:
		return berth.Invalidf("parent", "no job %q", req.Parent)
	case err != nil:
		return fmt.Errorf("parent: %w", err)
	case p.State == berth.JobFailed:
		return &berth.Error{Code: berth.ECodeConflict, Field: "parent",
			Message: fmt.Sprintf("job %s has failed: its children are cancelled with it", p.ID)}
	case p.State == berth.JobCancelled:
		return &berth.Error{Code: berth.ECodeConflict, Field: "parent",
			Message: fmt.Sprintf("job %s was cancelled: its children are cancelled with it", p.ID)}
	}
	return nil
}

// adopt records js as a child of its parent, when the parent is active.
// Loop only.
func (l *lifecycle) adopt(js *jobState) {
	parent := js.view().Parent
	if parent == "" || l.jobs[parent] == nil {
		return
	}
	if l.children[parent] == nil {
		l.children[parent] = map[string]*jobState{}
	}
	l.children[parent][js.id] = js
}

// orphan forgets j, a job ending in state st, as a parent and as a child,
// and cancels its active children when it ends failed or cancelled. Loop
// only.
func (l *lifecycle) orphan(j *berth.Job, st berth.JobState, now time.Time) {
	if siblings := l.children[j.Parent]; siblings != nil {
		delete(siblings, j.ID)
		if len(siblings) == 0 {
			delete(l.children, j.Parent)
		}
	}
	kids := l.children[j.ID]
	delete(l.children, j.ID)
	switch st {
	case berth.JobFailed:
		l.cancelChildren(kids, j.ID, "failed", now)
	case berth.JobCancelled:
		l.cancelChildren(kids, j.ID, "was cancelled", now)
	}
}

// cancelChildren cancels kids, the active children of job parent, which
// failed or was cancelled (what). Loop only.
func (l *lifecycle) cancelChildren(kids map[string]*jobState, parent, what string, now time.Time) {
	requested := cancelRequestedBy(fmt.Sprintf("parent %s, which %s", parent, what))
	for _, kid := range kids {
		l.stopJob(kid, requested, now)
	}
}
