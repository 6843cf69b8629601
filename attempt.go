package berth

import "time"

// AttemptState is the state of one placement of a task:
// assigned → running → succeeded | failed | cancelled | lost | preempted |
// stopped.
type AttemptState string

// Attempt states.
const (
	AttemptAssigned  AttemptState = "assigned"
	AttemptRunning   AttemptState = "running"
	AttemptSucceeded AttemptState = "succeeded"
	AttemptFailed    AttemptState = "failed"
	AttemptCancelled AttemptState = "cancelled"
	AttemptLost      AttemptState = "lost"
	AttemptPreempted AttemptState = "preempted"
	AttemptStopped   AttemptState = "stopped" // by an operator's hard stop; requeued without spending a retry
)

// Terminal reports whether the attempt has ended.
func (s AttemptState) Terminal() bool {
	return s != AttemptAssigned && s != AttemptRunning
}

// Readiness phases of a service attempt.
const (
	PhaseStarting = "starting" // process started, port not bound yet
	PhaseWarming  = "warming"  // port bound, not answering its readiness probe yet
	PhaseReady    = "ready"    // serving: its endpoint is listed
	PhaseUnready  = "unready"  // was ready, now fails its liveness probe
	PhaseFailed   = "failed"   // did not become ready: see its failure class
)

// Failure classes of an attempt: why a service attempt did not become
// ready (seed 004), and FailureOOM for any attempt killed at its memory
// limit.
const (
	FailureWarmup        = "warmup"         // still warming when its warm-up budget ran out
	FailureStall         = "stall"          // no startup progress within its stall window
	FailureWorkloadFatal = "workload_fatal" // the workload itself broke (CUDA out of memory, engine dead)
	FailureInfraFatal    = "infra_fatal"    // the machine could not run it (port never bound, driver errors)
	FailureUnknown       = "unknown"        // exited before ready, nothing recognised
	FailureOOM           = "oom"            // the kernel killed a process of it at its memory limit (cause oom)
	// FailureCannotStart: its program could not be started — exit code
	// 126 (not executable) or 127 (not found), from the agent's own exec
	// or from a shell, before the service was ever ready. On a service's
	// first run it ends the service at once: restarting cannot help.
	FailureCannotStart = "cannot_start"
	// FailureUnschedulable: its pod stayed unschedulable (no node of the
	// Kubernetes backend fit it) past the backend's deadline.
	FailureUnschedulable = "unschedulable"
	// FailureImagePull: its pod's image could not be pulled
	// (ImagePullBackOff) within the backend's deadline.
	FailureImagePull = "image_pull"
)

// ValidFailureClass reports whether c is a failure class (Failure*), or
// empty (none).
func ValidFailureClass(c string) bool {
	switch c {
	case "", FailureWarmup, FailureStall, FailureWorkloadFatal, FailureInfraFatal, FailureUnknown, FailureOOM, FailureCannotStart,
		FailureUnschedulable, FailureImagePull:
		return true
	}
	return false
}

// Attempt is one placement of one task of a job on a worker. Everything an
// agent reports is fenced by the attempt id: reports for a superseded
// attempt are ignored.
type Attempt struct {
	ID        string       `json:"id"`
	JobID     string       `json:"job_id"`
	TaskIndex int          `json:"task_index"`
	WorkerID  string       `json:"worker_id"`
	Host      string       `json:"host"`
	GPUs      []int        `json:"gpus,omitempty"` // GPU indexes on the worker
	Port      int          `json:"port,omitempty"` // rank 0 of a gang: the coordinator's port
	State     AttemptState `json:"state"`
	ExitCode  *int         `json:"exit_code,omitempty"`
	Reason    string       `json:"reason,omitempty"`
	Progress  string       `json:"progress,omitempty"` // the last progress the job reported
	// A service's attempt: the port it serves on and its readiness phase
	// (ServicePhase*). FailureClass is the class of a failure (Failure*):
	// a service's that did not become ready, or oom for any attempt
	// killed at its memory limit.
	ServicePort  int       `json:"service_port,omitempty"`
	Phase        string    `json:"phase,omitempty"`
	FailureClass string    `json:"failure_class,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	StartedAt    time.Time `json:"started_at,omitzero"`
	FinishedAt   time.Time `json:"finished_at,omitzero"`
}

// Endpoint is where a ready service serves: listed while its attempt is
// ready and its worker keeps its lease. Host is the worker's host label,
// Address its advertised address (Worker.Address), Port the service's and
// URL "http://ADDRESS:PORT".
type Endpoint struct {
	JobID      string    `json:"job_id"`
	Name       string    `json:"name"`
	User       string    `json:"user,omitempty"`
	AttemptID  string    `json:"attempt_id"`
	Host       string    `json:"host"`
	Address    string    `json:"address"`
	Port       int       `json:"port"`
	URL        string    `json:"url"`
	Model      string    `json:"model,omitempty"`
	ReadySince time.Time `json:"ready_since"`
	LeaseUntil time.Time `json:"lease_until"`
}

// EndpointList is the response of GET /api/v1/endpoints.
type EndpointList struct {
	Endpoints []*Endpoint `json:"endpoints"`
}

// Service is an active service job with where and how its current attempt
// serves.
type Service struct {
	Job
	AttemptID string    `json:"attempt_id,omitempty"`
	Host      string    `json:"host,omitempty"`
	Address   string    `json:"address,omitempty"` // the worker's advertised address, where Port is reached
	Port      int       `json:"port,omitempty"`
	Phase     string    `json:"phase,omitempty"`     // Phase*; empty while pending
	Marker    string    `json:"marker,omitempty"`    // the last startup marker its output showed (a warming service's progress)
	Stopping  bool      `json:"stopping,omitempty"`  // its attempt is being stopped (cancelled, preempted, an operator's stop)
	RestartAt time.Time `json:"restart_at,omitzero"` // when a service waiting out its restart backoff is queued again
}

// ServiceList is the response of GET /api/v1/services.
type ServiceList struct {
	Services []*Service `json:"services"`
}
