package berth

import (
	"regexp"
	"strings"
	"time"
)

// JobState is the state of a job: pending → running → succeeded | failed | cancelled.
type JobState string

// Job states.
const (
	JobPending   JobState = "pending"
	JobRunning   JobState = "running"
	JobSucceeded JobState = "succeeded"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
)

// Terminal reports whether the job can no longer change state.
func (s JobState) Terminal() bool {
	return s == JobSucceeded || s == JobFailed || s == JobCancelled
}

// ParseJobState returns the state named s, or an error naming the valid ones.
func ParseJobState(s string) (JobState, error) {
	switch st := JobState(s); st {
	case JobPending, JobRunning, JobSucceeded, JobFailed, JobCancelled:
		return st, nil
	}
	return "", Invalidf("state", "%q is not a job state (pending, running, succeeded, failed, cancelled)", s)
}

// Job kinds.
const (
	KindBatch   = "batch"
	KindService = "service"
)

// Resources is what one node (task) of a job needs.
type Resources struct {
	GPUs int `json:"gpus,omitempty" yaml:"gpus,omitempty"` // whole GPUs; in JSON and YAML also a fraction below 1 (0.5), kept in GPUMilli
	// GPUMilli is a fraction of one GPU in thousandths (1..999: 500 is
	// half), shared with other fractions; never with GPUs.
	GPUMilli  int     `json:"gpu_milli,omitempty" yaml:"gpu_milli,omitempty"`
	GPUMemory Bytes   `json:"gpu_memory,omitempty" yaml:"gpu_memory,omitempty"` // per GPU, at least; for a fraction, the GPU memory it takes
	GPUType   string  `json:"gpu_type,omitempty" yaml:"gpu_type,omitempty"`     // a whole word of the model, case-insensitive (GPU.HasType)
	CPUs      float64 `json:"cpus,omitempty" yaml:"cpus,omitempty"`
	Memory    Bytes   `json:"memory,omitempty" yaml:"memory,omitempty"`
}

// Constraints restrict which workers a job may run on.
type Constraints struct {
	Host   string            `json:"host,omitempty" yaml:"host,omitempty"`
	Labels map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
}

// JobSpec is what a user asks for. The zero value is not valid; start from
// DefaultJobSpec.
type JobSpec struct {
	Name           string            `json:"name,omitempty" yaml:"name,omitempty"`
	User           string            `json:"user,omitempty" yaml:"user,omitempty"`
	Queue          string            `json:"queue" yaml:"queue,omitempty"`
	Kind           string            `json:"kind" yaml:"kind,omitempty"`
	Priority       int               `json:"priority" yaml:"priority,omitempty"`
	Nodes          int               `json:"nodes" yaml:"nodes,omitempty"`
	Resources      Resources         `json:"resources" yaml:"resources,omitempty"`
	Constraints    Constraints       `json:"constraints,omitempty" yaml:"constraints,omitempty"`
	Command        Argv              `json:"command" yaml:"command"`
	Env            map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
	Workdir        string            `json:"workdir,omitempty" yaml:"workdir,omitempty"`
	Template       string            `json:"template,omitempty" yaml:"template,omitempty"`
	Vars           map[string]string `json:"vars,omitempty" yaml:"vars,omitempty"`
	MaxRuntime     Duration          `json:"max_runtime,omitempty" yaml:"max_runtime,omitempty"`
	StallTimeout   Duration          `json:"stall_timeout,omitempty" yaml:"stall_timeout,omitempty"`
	Retries        int               `json:"retries,omitempty" yaml:"retries,omitempty"`
	Preemptible    bool              `json:"preemptible,omitempty" yaml:"preemptible,omitempty"`
	Model          string            `json:"model,omitempty" yaml:"model,omitempty"` // placed preferably where it is loaded
	IdempotencyKey string            `json:"idempotency_key,omitempty" yaml:"idempotency_key,omitempty"`
	Parent         string            `json:"parent,omitempty" yaml:"parent,omitempty"`
	Backend        string            `json:"backend,omitempty" yaml:"backend,omitempty"` // where it runs: "" or "agents", the agent pool
	Cluster        string            `json:"cluster,omitempty" yaml:"cluster,omitempty"` // the federation peer it is handed to; "" local
	// Image is the container image it runs in, on a backend that runs
	// containers (Kubernetes: required there unless the backend has a
	// default image); the agent pool does not use it.
	Image string `json:"image,omitempty" yaml:"image,omitempty"`
	// Origin marks a job received from a federation peer; only the
	// handoff endpoint sets it (docs/federation.md).
	Origin *JobOrigin `json:"origin,omitempty" yaml:"-"`
}

// SubmitRequest is one submission: a spec, run Array times when Array > 0
// (each job gets BERTH_ARRAY_INDEX 0..Array-1). A spec that no worker
// could ever run is refused (ECodeUnsatisfiable) unless HoldUntilFits,
// which queues it with a warning until a worker that fits joins.
type SubmitRequest struct {
	JobSpec       `yaml:",inline"`
	Array         int  `json:"array,omitempty" yaml:"array,omitempty"`
	HoldUntilFits bool `json:"hold_until_fits,omitempty" yaml:"hold_until_fits,omitempty"`
}

// Defaults and limits of a job spec.
const (
	DefaultQueue     = "default"
	DefaultPriority  = 100
	MaxPriority      = 1000
	MaxNodes         = 256
	MaxGPUsPerWorker = 64
	MaxArray         = 100_000
	MaxRetries       = 100
	MaxCommandBytes  = 64 << 10
	// DefaultServiceRestarts is how many times in a row a service is
	// restarted before it fails, when its retries are not set.
	DefaultServiceRestarts = 10
)

// DefaultJobSpec returns a spec with every default filled in; decode user
// input over it so that absent fields keep their defaults.
func DefaultJobSpec() JobSpec {
	return JobSpec{Queue: DefaultQueue, Kind: KindBatch, Priority: DefaultPriority, Nodes: 1}
}

var (
	nameRe  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	queueRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	envRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Validate checks every field of s and returns an ECodeInvalid *Error naming
// the first field that breaks a rule.
func (s *JobSpec) Validate() error {
	if s.Name != "" && !nameRe.MatchString(s.Name) {
		return Invalidf("name", "must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	if len(s.User) > 128 {
		return Invalidf("user", "must be at most 128 characters")
	}
	if !queueRe.MatchString(s.Queue) {
		return Invalidf("queue", "must be 1-63 lower-case letters, digits, '_' or '-'")
	}
	if s.Parent != "" && !validID(s.Parent) {
		return Invalidf("parent", "must be a job id, such as $BERTH_JOB_ID in a job")
	}
	if s.Kind != KindBatch && s.Kind != KindService {
		return Invalidf("kind", "must be %q or %q", KindBatch, KindService)
	}
	if s.Priority < 0 || s.Priority > MaxPriority {
		return Invalidf("priority", "must be between 0 and %d", MaxPriority)
	}
	if s.Nodes < 1 || s.Nodes > MaxNodes {
		return Invalidf("nodes", "must be between 1 and %d", MaxNodes)
	}
	if err := s.Resources.validate(); err != nil {
		return err
	}
	for k := range s.Constraints.Labels {
		if k == "" {
			return Invalidf("constraints.labels", "label names must not be empty")
		}
	}
	if s.Template == "" && (len(s.Command) == 0 || strings.TrimSpace(s.Command[0]) == "" || emptyShell(s.Command)) {
		return Invalidf("command", "must not be empty")
	}
	n := 0
	for _, a := range s.Command {
		n += len(a)
	}
	if n > MaxCommandBytes {
		return Invalidf("command", "must be at most %d bytes in all", MaxCommandBytes)
	}
	for k, v := range s.Env {
		if !envRe.MatchString(k) {
			return Invalidf("env", "%q is not a valid variable name", k)
		}
		if strings.HasPrefix(k, "BERTH_") || k == "CUDA_VISIBLE_DEVICES" {
			return Invalidf("env", "%s is set by Berth and cannot be overridden", k)
		}
		n += len(k) + len(v)
	}
	if n > MaxCommandBytes {
		return Invalidf("env", "command and environment must be at most %d bytes in all", MaxCommandBytes)
	}
	if s.Workdir != "" && !strings.HasPrefix(s.Workdir, "/") {
		return Invalidf("workdir", "must be an absolute path")
	}
	for k := range s.Vars {
		if !envRe.MatchString(k) {
			return Invalidf("vars", "%q is not a valid variable name", k)
		}
	}
	if s.MaxRuntime < 0 || time.Duration(s.MaxRuntime) > 366*24*time.Hour {
		return Invalidf("max_runtime", "must be between 0 (no limit) and 366 days")
	}
	if s.StallTimeout < 0 || time.Duration(s.StallTimeout) > 366*24*time.Hour {
		return Invalidf("stall_timeout", "must be between 0 (none) and 366 days")
	}
	if s.Retries < 0 || s.Retries > MaxRetries {
		return Invalidf("retries", "must be between 0 and %d", MaxRetries)
	}
	if len(s.Model) > 256 {
		return Invalidf("model", "must be at most 256 characters")
	}
	if len(s.IdempotencyKey) > 256 {
		return Invalidf("idempotency_key", "must be at most 256 characters")
	}
	if len(s.Backend) > 64 {
		return Invalidf("backend", "must be at most 64 characters") // which backends exist is the server's to say
	}
	if s.Image != "" {
		if err := validImage("image", s.Image); err != nil {
			return err
		}
	}
	if s.Cluster != "" && !ValidPeerName(s.Cluster) {
		return Invalidf("cluster", "%q: must be a peer's name (berth peers lists them)", s.Cluster) // which peers exist is the server's to say
	}
	return nil
}

// emptyShell reports whether cmd is a shell command with nothing to run:
// "command": "" decodes to sh -c "".
func emptyShell(cmd Argv) bool {
	return len(cmd) == 3 && cmd[0] == "sh" && cmd[1] == "-c" && strings.TrimSpace(cmd[2]) == ""
}

func (r *Resources) validate() error {
	switch {
	case r.GPUs < 0 || r.GPUs > MaxGPUsPerWorker:
		return Invalidf("resources.gpus", "must be between 0 and %d", MaxGPUsPerWorker)
	case r.GPUMemory < 0 || r.GPUMemory > 4<<40:
		return Invalidf("resources.gpu_memory", "must be between 0 and 4TiB")
	case r.GPUMilli < 0 || r.GPUMilli >= WholeGPU:
		return Invalidf("resources.gpu_milli", "must be between 1 and 999 (thousandths of one GPU); whole GPUs go in resources.gpus")
	case r.GPUMilli > 0 && r.GPUs > 0:
		return Invalidf("resources.gpu_milli", "a fraction never spans GPUs: ask for whole GPUs (resources.gpus) or a fraction of one (resources.gpu_milli), not both")
	case r.GPUMemory > 0 && !r.WantsGPUs():
		return Invalidf("resources.gpu_memory", "needs resources.gpus (a whole number, or a fraction such as 0.5)")
	case r.GPUType != "" && !r.WantsGPUs():
		return Invalidf("resources.gpu_type", "needs resources.gpus (a whole number, or a fraction such as 0.5)")
	case len(r.GPUType) > 64:
		return Invalidf("resources.gpu_type", "must be at most 64 characters")
	case r.CPUs < 0 || r.CPUs > 4096:
		return Invalidf("resources.cpus", "must be between 0 and 4096")
	case r.Memory < 0 || r.Memory > 64<<40:
		return Invalidf("resources.memory", "must be between 0 and 64TiB")
	}
	return nil
}

// Validate checks the spec and the array size.
func (r *SubmitRequest) Validate() error {
	if r.Array < 0 || r.Array > MaxArray {
		return Invalidf("array", "must be between 0 and %d", MaxArray)
	}
	return r.JobSpec.Validate()
}

// Job is one submitted unit of work and its observed state.
type Job struct {
	ID string `json:"id"`
	JobSpec
	ArrayIndex *int     `json:"array_index,omitempty"`
	State      JobState `json:"state"`
	Reason     string   `json:"reason,omitempty"` // why pending, or why it ended
	ExitCode   *int     `json:"exit_code,omitempty"`
	// Attempts counts the attempts started so far that spend the retry
	// budget (at most Retries+1): one an operator stopped, a preemption, a
	// withdrawal, or an end whose cause spends no retry is given back.
	Attempts   int       `json:"attempts"`
	CreatedAt  time.Time `json:"created_at"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Host is where the job runs or ran: the worker host of its latest
	// attempt; a gang's is its rank 0's host and "+N" for the other
	// members. Set in listings (GET /api/v1/jobs), not stored; empty
	// before any attempt.
	Host string `json:"host,omitempty"`
}

// JobDetail is a job with its attempts, oldest first.
type JobDetail struct {
	*Job
	AttemptList []*Attempt `json:"attempt_list"`
	// Handoffs are the handles of a job handed to a federation peer, by
	// incarnation; absent for a local job.
	Handoffs []*Handoff `json:"handoffs,omitempty"`
}

// ValidName reports whether s is a valid job name.
func ValidName(s string) bool { return nameRe.MatchString(s) }

// ValidQueue reports whether s is a valid queue name.
func ValidQueue(s string) bool { return queueRe.MatchString(s) }
