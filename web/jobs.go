package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/store"
)

// jobsData is a page of the job list.
type jobsData struct {
	Jobs       []*berth.Job
	State      string
	Queue      string
	User       string
	States     []berth.JobState
	UserLocked bool   // a user sees its own jobs only
	Cursor     string // this page starts after this id; "" for the first page
	Next       string // the next (older) page's URL; "" for the last page
	First      string // the first page's URL, on later pages
	Federated  bool   // a job listed was handed to a federation peer: the Cluster column shows
}

var jobStates = []berth.JobState{berth.JobPending, berth.JobRunning, berth.JobSucceeded, berth.JobFailed, berth.JobCancelled}

// jobs lists jobs newest first, JobsPerPage at a time, filtered by state,
// queue and user; a user sees its own jobs only (asking for another's is
// 403, as on GET /api/v1/jobs), and a cursor not of the form the server
// issues is 400 (berth.ParseCursor), as there too.
func (h *Handler) jobs(r *http.Request) (string, any, error) {
	q := r.URL.Query()
	cursor, err := berth.ParseCursor(q.Get("cursor"))
	if err != nil {
		return "", nil, err
	}
	d := &jobsData{State: q.Get("state"), Queue: q.Get("queue"), User: q.Get("user"), Cursor: cursor, States: jobStates}
	f := store.JobFilter{Queue: d.Queue, User: d.User, Before: d.Cursor, Limit: JobsPerPage + 1}
	if who := api.IdentityOf(r); !who.SeesAllJobs() {
		if d.User != "" && d.User != who.Name {
			return "", nil, berth.Errorf(berth.ECodeForbidden, "%s (role %s) may only list its own jobs", who.Name, who.Role)
		}
		f.User, d.UserLocked = who.Name, true
	}
	if d.State != "" {
		st, err := berth.ParseJobState(d.State)
		if err != nil {
			return "", nil, err
		}
		f.States = []berth.JobState{st}
	}
	if d.Queue != "" && !berth.ValidQueue(d.Queue) {
		return "", nil, berth.Invalidf("queue", "%q is not a queue name (lower-case letters, digits, '_' and '-')", d.Queue)
	}
	list, err := h.cfg.Ctl.Jobs(r.Context(), f)
	if err != nil {
		return "", nil, err
	}
	d.Jobs = list
	d.Federated = slices.ContainsFunc(list, func(j *berth.Job) bool { return j.Cluster != "" })
	link := func(cursor string) string {
		v := url.Values{}
		for k, val := range map[string]string{"state": d.State, "queue": d.Queue, "user": d.User, "cursor": cursor} {
			if val != "" && !(k == "user" && d.UserLocked) {
				v.Set(k, val)
			}
		}
		if len(v) == 0 {
			return "/jobs"
		}
		return "/jobs?" + v.Encode()
	}
	if len(list) > JobsPerPage {
		d.Jobs = list[:JobsPerPage]
		d.Next = link(d.Jobs[JobsPerPage-1].ID)
	}
	if d.Cursor != "" {
		d.First = link("")
	}
	return "", d, nil
}

// jobData is the job page.
type jobData struct {
	Job       *berth.JobDetail
	Spec      string // the spec to resubmit, as JSON
	Waited    string // how long it waited, or has been waiting, to start
	Ran       string // how long it ran, or has been running
	CanCancel bool
	CanSubmit bool
	Service   bool
}

// job shows one job: its spec, timeline, attempts and (in the browser)
// its output; another user's job is 403 for a user.
func (h *Handler) job(r *http.Request) (string, any, error) {
	d, err := h.ownJob(r, r.PathValue("id"))
	if err != nil {
		return "", nil, err
	}
	who := api.IdentityOf(r)
	j := d.Job
	now := h.cfg.Now()
	v := &jobData{Job: d, Service: j.Kind == berth.KindService,
		CanCancel: !j.State.Terminal() && who.CanSubmit() && (who.ActsOnAllJobs() || j.User == who.Name),
		CanSubmit: who.CanSubmit() && (who.ActsOnAllJobs() || j.User == who.Name)}
	switch {
	case !j.StartedAt.IsZero():
		v.Waited = formatDuration(j.StartedAt.Sub(j.CreatedAt))
		end := j.FinishedAt
		if end.IsZero() {
			end = now
		}
		v.Ran = formatDuration(end.Sub(j.StartedAt))
	case !j.State.Terminal():
		v.Waited = formatDuration(now.Sub(j.CreatedAt))
	}
	if v.CanSubmit {
		spec := j.JobSpec
		spec.IdempotencyKey = "" // a resubmission is a new job
		data, err := json.Marshal(spec)
		if err != nil {
			return "", nil, fmt.Errorf("encode job spec: %w", err)
		}
		v.Spec = string(data)
	}
	title := "Job " + j.ID
	if j.Name != "" {
		title = "Job " + j.Name + " (" + j.ID + ")"
	}
	return title, v, nil
}

// ownJob reads job id and checks that the request's identity may see it.
func (h *Handler) ownJob(r *http.Request, id string) (*berth.JobDetail, error) {
	d, err := h.cfg.Ctl.Job(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if who := api.IdentityOf(r); !who.SeesAllJobs() && d.User != who.Name {
		return nil, berth.Errorf(berth.ECodeForbidden, "job %s belongs to another user; %s (role %s) may only see its own jobs", id, who.Name, who.Role)
	}
	return d, nil
}

// durationOf is how long an attempt ran (or has been running at now).
func durationOf(a *berth.Attempt, now time.Time) string {
	if a.StartedAt.IsZero() {
		return ""
	}
	end := a.FinishedAt
	if end.IsZero() {
		end = now
	}
	return formatDuration(end.Sub(a.StartedAt))
}
