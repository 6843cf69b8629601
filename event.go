package berth

import "time"

// Event is one thing that happened, published after it is durable.
type Event struct {
	Seq       uint64    `json:"seq"`
	Time      time.Time `json:"time"`
	Type      string    `json:"type"`
	JobID     string    `json:"job_id,omitempty"`
	Name      string    `json:"name,omitempty"` // the job's name, for job events
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
	Peer      string    `json:"peer,omitempty"`      // the federation peer a peer event is about
	Pool      string    `json:"pool,omitempty"`      // the cloud pool a pool event is about
	Instance  string    `json:"instance,omitempty"`  // the pool's instance a scale-down is about
	Count     int       `json:"count,omitempty"`     // instances a scale-up rents (or would, in a dry run)
}

// Event types: the Type of an Event, published on the event stream, sent
// to webhooks and audited.
const (
	EventJobSubmitted      = "job.submitted"
	EventJobRunning        = "job.running"
	EventJobRequeued       = "job.requeued"
	EventJobPreempted      = "job.preempted"  // a running attempt is stopped for a waiting job
	EventQuotaExceeded     = "quota.exceeded" // a job is held back by a quota rule
	EventJobSucceeded      = "job.succeeded"
	EventJobFailed         = "job.failed"
	EventJobCancelled      = "job.cancelled"
	EventWorkerRegistered  = "worker.registered"
	EventWorkerLost        = "worker.lost"
	EventWorkerDisconnects = "worker.disconnected"
	EventQuotaSet          = "quota.set"       // a quota rule was created or replaced
	EventQuotaDeleted      = "quota.deleted"   // a quota rule was deleted
	EventWorkerControl     = "worker.control"  // an operator turned a host's queue on or off
	EventServiceReady      = "service.ready"   // a service attempt passed its readiness probe: its endpoint is listed
	EventServiceUnready    = "service.unready" // a ready service attempt fails its liveness probe: its endpoint is withdrawn
	EventServiceFailed     = "service.failed"  // a service attempt did not become ready (its failure class says why)
	EventPeerSet           = "peer.set"        // a federation peer was added or changed
	EventPeerDeleted       = "peer.deleted"    // a federation peer was removed
	EventPoolScaleUp       = "pool.scale_up"   // the autoscaler rents instances (or would, in a dry run) for waiting jobs
	EventPoolScaleDown     = "pool.scale_down" // the autoscaler gives back an instance idle past its pool's timeout
	EventPoolCapped        = "pool.capped"     // waiting jobs want more than the pool's max instances or max $/h allow
)

// EventTypes are every type an Event may have, the names a webhook may
// subscribe to; a new type is added here too.
var EventTypes = []string{
	EventJobSubmitted, EventJobRunning, EventJobRequeued, EventJobPreempted, EventQuotaExceeded,
	EventJobSucceeded, EventJobFailed, EventJobCancelled, EventWorkerRegistered, EventWorkerLost,
	EventWorkerDisconnects, EventQuotaSet, EventQuotaDeleted, EventWorkerControl, EventServiceReady,
	EventServiceUnready, EventServiceFailed, EventPeerSet, EventPeerDeleted, EventPoolScaleUp,
	EventPoolScaleDown, EventPoolCapped,
}

// AuditJobAssigned is the audit record of an attempt placed on a worker:
// audited, not published (job.running follows once it starts).
const AuditJobAssigned = "job.assigned"
