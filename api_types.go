package berth

// Bodies of the HTTP API that both the server and clients use.

// SubmitResponse is the body of POST /api/v1/jobs: the jobs created, or for
// a repeated idempotency key the jobs of the first submission (status 200).
type SubmitResponse struct {
	Jobs     []*Job   `json:"jobs"`
	Warnings []string `json:"warnings,omitempty"` // what the server noticed, e.g. a queue no worker serves
}

// SubmitIDsResponse is the body of POST /api/v1/jobs?ids_only=true: the
// ids of the jobs SubmitResponse would carry, in the same order.
type SubmitIDsResponse struct {
	IDs      []string `json:"ids"`
	Warnings []string `json:"warnings,omitempty"` // as SubmitResponse's
}

// JobList is the body of GET /api/v1/jobs. NextCursor, when set, is the
// cursor query parameter of the next page.
type JobList struct {
	Jobs       []*Job `json:"jobs"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// WorkerList is the body of GET /api/v1/workers.
type WorkerList struct {
	Workers []*Worker `json:"workers"`
}

// QuotaList is the body of GET /api/v1/quotas: every quota rule, by id.
type QuotaList struct {
	Quotas []*QuotaRule `json:"quotas"`
}

// CancelRequest is the body of POST /api/v1/jobs/cancel: it cancels every
// active job that matches all the filters given, as scancel --name,
// --partition and --user do. At least one of Name, Queue, User and Parent
// is required; State, pending or running, narrows them.
type CancelRequest struct {
	Name   string   `json:"name,omitempty"`
	Queue  string   `json:"queue,omitempty"`
	User   string   `json:"user,omitempty"`
	Parent string   `json:"parent,omitempty"` // the jobs submitted under this job
	State  JobState `json:"state,omitempty"`
}

// Validate checks that r names a filter, and a state only of active jobs.
func (r *CancelRequest) Validate() error {
	if r.Name == "" && r.Queue == "" && r.User == "" && r.Parent == "" {
		return Invalidf("name", "give at least one filter: name, queue, user or parent")
	}
	if r.State != "" && r.State != JobPending && r.State != JobRunning {
		return Invalidf("state", "must be pending or running, not %q", r.State)
	}
	return nil
}

// Matches reports whether j, an active job, matches every filter of r.
func (r *CancelRequest) Matches(j *Job) bool {
	return (r.Name == "" || j.Name == r.Name) && (r.Queue == "" || j.Queue == r.Queue) &&
		(r.User == "" || j.User == r.User) && (r.Parent == "" || j.Parent == r.Parent) &&
		(r.State == "" || j.State == r.State)
}

// WaitRequest is the body of POST /api/v1/wait: the server answers when
// every job named (or, with All, every batch job active at the call: the
// caller's own unless it reads every user's jobs; services only when named)
// has ended, or after Timeout (at most a minute) with Done false.
type WaitRequest struct {
	IDs     []string `json:"ids,omitempty"`
	All     bool     `json:"all,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
}

// WaitResult is how the jobs waited for ended: counts by state and the ids
// of those that did not succeed. Done is false when the wait timed out.
type WaitResult struct {
	Done     bool             `json:"done"`
	Total    int              `json:"total"`
	Counts   map[JobState]int `json:"counts"`
	Pending  int              `json:"pending"`
	Failures []string         `json:"failures,omitempty"` // ids of failed or cancelled jobs
	// PendingIDs lists the jobs still active when the wait timed out.
	PendingIDs []string `json:"pending_ids,omitempty"`
	// Services counts the active services a wait for all left out: they run
	// until stopped, so a wait covers one only when it names it.
	Services int `json:"services,omitempty"`
}

// Add records that job id ended in state st.
func (r *WaitResult) Add(id string, st JobState) {
	r.Counts[st]++
	if st != JobSucceeded {
		r.Failures = append(r.Failures, id)
	}
}

// LeaderHeader names the leader's URL on a standby server's 503 answers
// (empty when it knows no leader), for clients and agents to fail over to.
const LeaderHeader = "Berth-Leader"

// RequestIDHeader names the id a server gives each HTTP request it answers,
// sent on every answer: the id its log lines for that request carry, and
// the one a 500's message names. The server always makes its own; one a
// client sends is ignored.
const RequestIDHeader = "Berth-Request-Id"

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// AttemptValidity is the body of GET /api/v1/attempts/{id}/valid: whether
// the attempt is still its job's live attempt on a worker whose lease has
// not lapsed, so that no other attempt of the job can have started; Reason
// says why not. A job calls it ($BERTH_ATTEMPT_ID) before an external side
// effect, as docs/worker-control.md describes.
type AttemptValidity struct {
	AttemptID string `json:"attempt_id"`
	JobID     string `json:"job_id"`
	Valid     bool   `json:"valid"`
	Reason    string `json:"reason,omitempty"`
}

// StreamStderr names a job's standard error in a LogRecord (and in the
// stored output); stdout is the empty stream.
const StreamStderr = "stderr"

// LogRecord is one line of GET /api/v1/jobs/{id}/logs?format=records (a
// stream of JSON objects, one a line): Data, written by the attempt's
// process to Stream ("stderr", or empty for stdout) at byte Offset of the
// attempt's output. Rank is the attempt's rank in its gang (0 for a job
// of one node) and Placement counts the job's placements from 1, a gang's
// members sharing theirs.
type LogRecord struct {
	AttemptID string `json:"attempt_id"`
	Rank      int    `json:"rank"`
	Placement int    `json:"placement"`
	Stream    string `json:"stream,omitempty"`
	Offset    int64  `json:"offset"`
	Data      []byte `json:"data"`
}
