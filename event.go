package berth

import "time"

// Event is one thing that happened, published after it is durable.
type Event struct {
	Seq       uint64    `json:"seq"`
	Time      time.Time `json:"time"`
	Type      string    `json:"type"`
	JobID     string    `json:"job_id,omitempty"`
	State     JobState  `json:"state,omitempty"`
	WorkerID  string    `json:"worker_id,omitempty"`
	Host      string    `json:"host,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	ExitCode  *int      `json:"exit_code,omitempty"` // a finished job's exit code, when its process ran
	Quota     string    `json:"quota,omitempty"`     // id of the rule a quota event is about
	Limits    string    `json:"limits,omitempty"`    // a set rule's limits, e.g. "gpus<=8 jobs<=4"
	Actor     string    `json:"actor,omitempty"`     // who made the change; empty until requests carry a user identity
	User      string    `json:"user,omitempty"`      // the job's user, for quota events
	Requested int       `json:"requested,omitempty"` // what a held-back job asked for
	Limit     int       `json:"limit,omitempty"`     // the rule's limit
	Queue     string    `json:"queue,omitempty"`     // worker control: the queue ("*": every queue)
	Desired   string    `json:"desired,omitempty"`   // worker control: on or off
	Policy    string    `json:"policy,omitempty"`    // worker control: the stop policy
	Attempts  []string  `json:"attempts,omitempty"`  // attempts a control stopped, or the one a requeue follows
}
