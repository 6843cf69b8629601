package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/berth-dev/berth"
)

// Submit validates req, stores the job (or Array jobs) durably and queues
// it. Idempotency keys are per user (req.User): a repeat of the same
// request with a key its user submitted with before returns the original
// jobs and stores nothing; a different request with that key is an
// ECodeConflict *berth.Error on idempotency_key and stores nothing. Invalid
// input returns an ECodeInvalid *berth.Error and stores nothing; so does a
// job no worker could ever run (ECodeUnsatisfiable, see fits) unless
// req.HoldUntilFits.
func (c *Controller) Submit(ctx context.Context, req *berth.SubmitRequest) ([]*berth.Job, error) {
	sub, err := c.SubmitFull(ctx, req)
	if err != nil {
		return nil, err
	}
	return sub.Jobs, nil
}

// Submission is what a submission made, as SubmitFull reports it.
type Submission struct {
	Jobs []*berth.Job
	// Replayed is true when the jobs are those of an earlier submission of
	// the same request by the same user with the same idempotency key:
	// nothing was stored.
	Replayed bool
	Warnings []string // what the user should hear of, e.g. a queue no worker serves
}

// SubmitFull is Submit that also reports whether the jobs were replayed
// and what the user should be warned of. Errors are Submit's.
func (c *Controller) SubmitFull(ctx context.Context, req *berth.SubmitRequest) (*Submission, error) {
	if req.Origin != nil {
		return nil, berth.Invalidf("origin", "is set by a federation handoff only, never by a submission")
	}
	if c.cfg.Expand != nil {
		if err := c.cfg.Expand(&req.JobSpec); err != nil {
			return nil, err
		}
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := CheckSecrets(&req.JobSpec, c.cfg.Secrets); err != nil {
		return nil, err
	}
	if err := c.checkBackend(&req.JobSpec); err != nil {
		return nil, err
	}
	if err := c.checkParent(ctx, req); err != nil {
		return nil, err
	}
	if key := req.IdempotencyKey; key != "" {
		prior, err := c.store.JobsByIdempotencyKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("idempotency lookup: %w", err)
		}
		// Keys are per user: another user's submission is no replay.
		prior = slices.DeleteFunc(prior, func(j *berth.Job) bool { return j.User != req.User })
		if len(prior) > 0 {
			if err := checkReplay(req, prior[0], len(prior)); err != nil {
				return nil, err
			}
			return &Submission{Jobs: prior, Replayed: true}, nil
		}
	}
	type result struct {
		sub *Submission
		err error
	}
	reply := make(chan result, 1)
	if err := c.do(ctx, func() {
		if ids, ok := c.idem[idemKeyOf(&req.JobSpec)]; ok && req.IdempotencyKey != "" {
			// Submitted since the lookup above, maybe not durable yet.
			jobs := make([]*berth.Job, 0, len(ids))
			for _, id := range ids {
				if js := c.jobs[id]; js != nil {
					jobs = append(jobs, js.clone())
				}
			}
			if len(jobs) > 0 {
				if err := checkReplay(req, jobs[0], len(ids)); err != nil {
					reply <- result{err: err}
					return
				}
			}
			c.afterCommit(func() { reply <- result{sub: &Submission{Jobs: jobs, Replayed: true}} })
			return
		}
		sub, err := c.admit(req, berth.ActorFrom(ctx))
		if err != nil {
			reply <- result{err: err} // nothing written
			return
		}
		c.afterCommit(func() { reply <- result{sub: sub} })
	}); err != nil {
		return nil, err
	}
	select {
	case r := <-reply:
		return r.sub, r.err
	case <-c.failed:
		return nil, c.storeFailedError()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// admit routes the jobs of req, a valid request, submitted by actor
// (route), and creates them: here, or handed to a peer. A job no
// worker could ever run, with no peer to take it, is refused (fits), and
// nothing is written. Loop only.
func (c *Controller) admit(req *berth.SubmitRequest, actor string) (*Submission, error) {
	pl, warnings, err := c.route(&req.JobSpec, req.HoldUntilFits)
	if err != nil {
		return nil, err
	}
	create := req
	if pl.peer != "" && !pl.pinned {
		routed := *req
		routed.Cluster = pl.peer
		create = &routed
	}
	sub := &Submission{Jobs: c.createJobs(create, actor), Warnings: warnings}
	if pl.peer == "" {
		sub.Warnings = append(c.queueWarnings(req.Queue), warnings...)
	}
	c.federate(sub.Jobs, pl)
	return sub, nil
}

// idemKey is an idempotency key as the controller scopes it: per user.
type idemKey struct {
	user, key string
}

// idemKeyOf returns the scoped idempotency key of a job or request spec.
func idemKeyOf(spec *berth.JobSpec) idemKey {
	return idemKey{user: spec.User, key: spec.IdempotencyKey}
}

// checkReplay returns nil when req, a valid request, is the request that
// created first, the first of the n jobs its user submitted before with
// its idempotency key: the same spec once createJobs's defaults are
// applied, compared as stored (JSON), and the same number of jobs, as an
// array or not. Otherwise it returns an ECodeConflict error on
// idempotency_key naming first.
func checkReplay(req *berth.SubmitRequest, first *berth.Job, n int) error {
	want, err := json.Marshal(withDefaults(req.JobSpec))
	if err != nil {
		return fmt.Errorf("idempotency check: encode request: %w", err)
	}
	spec := first.JobSpec
	if req.Cluster == "" {
		spec.Cluster = "" // routed to a peer: the request named none
	}
	got, err := json.Marshal(&spec)
	if err != nil {
		return fmt.Errorf("idempotency check: encode job %s: %w", first.ID, err)
	}
	if bytes.Equal(want, got) && n == max(req.Array, 1) && (req.Array > 0) == (first.ArrayIndex != nil) {
		return nil
	}
	return &berth.Error{Code: berth.ECodeConflict, Field: "idempotency_key",
		Message: fmt.Sprintf("idempotency key %q was already used for a different request (job %s); use a new key", req.IdempotencyKey, first.ID)}
}

// CheckSecrets checks that every secret spec's command, env and workdir
// reference exists for its user; the ECodeInvalid error names the field
// and the first missing secret (never a value). A nil resolver checks
// nothing.
func CheckSecrets(spec *berth.JobSpec, secrets SecretResolver) error {
	if secrets == nil {
		return nil
	}
	check := func(field string, texts ...string) error {
		if missing := secrets.Missing(spec.User, texts...); len(missing) > 0 {
			return berth.Invalidf(field, "references secret %s, which %s does not have (berth secret set %s)",
				missing[0], spec.User, missing[0])
		}
		return nil
	}
	if err := check("command", spec.Command...); err != nil {
		return err
	}
	if err := check("workdir", spec.Workdir); err != nil {
		return err
	}
	for k, v := range spec.Env {
		if err := check("env."+k, v); err != nil {
			return err
		}
	}
	return nil
}

// queueWarnings warns of a queue no worker serves (a typo, most likely):
// its jobs wait until one does. Loop only.
func (c *Controller) queueWarnings(queue string) []string {
	for _, ws := range c.workers {
		if ws.w.Serves(queue) {
			return nil
		}
	}
	return []string{fmt.Sprintf("no worker serves queue %q: the jobs wait until one does (berth workers lists the queues served)", queue)}
}

// withDefaults returns spec as createJobs stores it: named (defaultName)
// when it has no name, and a service restarted DefaultServiceRestarts
// times when its retries are not set.
func withDefaults(spec berth.JobSpec) berth.JobSpec {
	if spec.Name == "" {
		spec.Name = defaultName(&spec)
	}
	if spec.Kind == berth.KindService && spec.Retries == 0 {
		spec.Retries = berth.DefaultServiceRestarts
	}
	return spec
}

// defaultName is the name of a job submitted without one: a job from a
// template is named after the model it serves (the last part of its
// model, or of its MODEL_NAME: Qwen/Qwen2-7B-Instruct → Qwen2-7B-Instruct)
// or, with none, after its template; any other job after its program's
// base name. A name that is not valid is passed over; "job" is the last
// resort.
func defaultName(spec *berth.JobSpec) string {
	var names []string
	if spec.Template != "" {
		names = append(names, spec.Model, spec.Vars["MODEL_NAME"], spec.Template)
	}
	names = append(names, spec.Command[0])
	for _, n := range names {
		if i := strings.LastIndexByte(n, '/'); i >= 0 {
			n = n[i+1:]
		}
		if berth.ValidName(n) {
			return n
		}
	}
	return "job"
}

// Cancel stops a job. A pending job is cancelled at once; a running one is
// marked durably and its attempt is stopped (SIGTERM, grace, SIGKILL), and
// the job becomes cancelled when the agent reports the attempt's end. It
// returns the job as it is after the request: ECodeNotFound for an unknown
// id, ECodeConflict for a job that has already ended.
func (c *Controller) Cancel(ctx context.Context, id string) (*berth.Job, error) {
	type result struct {
		job     *berth.Job
		err     error
		written <-chan struct{}
	}
	reply := make(chan result, 1)
	requested := cancelRequestedBy(berth.ActorFrom(ctx))
	if err := c.do(ctx, func() {
		js := c.jobs[id]
		if js == nil {
			reply <- result{err: errInactive, written: c.durable()}
			return
		}
		c.stopJob(js, requested, c.now().UTC())
		j := js.clone()
		c.afterCommit(func() { reply <- result{job: j} })
	}); err != nil {
		return nil, err
	}
	r := <-reply
	if r.err == errInactive {
		if err := c.awaitDurable(ctx, r.written); err != nil {
			return nil, err
		}
		j, err := c.store.Job(ctx, id)
		if err != nil {
			return nil, err
		}
		return nil, &berth.Error{Code: berth.ECodeConflict, Field: "id",
			Message: fmt.Sprintf("job %s has already ended (%s)", id, j.State)}
	}
	return r.job, r.err
}

// CancelMatching cancels every active job that r matches, as Cancel does
// one, in one pass of the loop, and returns them as they are after the
// request, oldest first: none when nothing matches. A child of a matching
// job is cancelled with it, as after Cancel.
func (c *Controller) CancelMatching(ctx context.Context, r berth.CancelRequest) ([]*berth.Job, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	reply := make(chan []*berth.Job, 1)
	requested := cancelRequestedBy(berth.ActorFrom(ctx))
	if err := c.do(ctx, func() {
		var matched []*jobState
		for _, js := range c.jobs {
			if r.Matches(js.view()) {
				matched = append(matched, js)
			}
		}
		slices.SortFunc(matched, func(a, b *jobState) int { return strings.Compare(a.id, b.id) })
		now := c.now().UTC()
		jobs := make([]*berth.Job, 0, len(matched))
		for _, js := range matched {
			if c.jobs[js.id] == js { // not ended with an earlier match, its parent
				c.stopJob(js, requested, now)
			}
			jobs = append(jobs, js.clone())
		}
		c.afterCommit(func() { reply <- jobs })
	}); err != nil {
		return nil, err
	}
	return <-reply, nil
}

var errInactive = berth.Errorf(berth.ECodeConflict, "job is not active")
