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

// Attempt is one placement of one task of a job on a worker. Everything an
// agent reports is fenced by the attempt id: reports for a superseded
// attempt are ignored.
type Attempt struct {
	ID         string       `json:"id"`
	JobID      string       `json:"job_id"`
	TaskIndex  int          `json:"task_index"`
	WorkerID   string       `json:"worker_id"`
	Host       string       `json:"host"`
	GPUs       []int        `json:"gpus,omitempty"` // GPU indexes on the worker
	Port       int          `json:"port,omitempty"` // rank 0 of a gang: the coordinator's port
	State      AttemptState `json:"state"`
	ExitCode   *int         `json:"exit_code,omitempty"`
	Reason     string       `json:"reason,omitempty"`
	Progress   string       `json:"progress,omitempty"` // the last progress the job reported
	CreatedAt  time.Time    `json:"created_at"`
	StartedAt  time.Time    `json:"started_at,omitzero"`
	FinishedAt time.Time    `json:"finished_at,omitzero"`
}
