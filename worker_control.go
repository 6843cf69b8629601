package berth

import (
	"net"
	"regexp"
	"strings"
	"time"
)

// Desired states of a worker control.
const (
	DesiredOn  = "on"
	DesiredOff = "off"
)

// Stop policies Berth ships: how turning a worker off treats its running
// attempts. The controller keeps the registry of handlers; stop_policy is
// free text to the store and the API, checked against that registry.
const (
	StopHard  = "hard"  // stop running attempts now, requeue them without spending a retry, park
	StopDrain = "drain" // take nothing new, let running attempts finish, then park
	StopPause = "pause" // take nothing new, keep running attempts and warm models
)

// AllQueues is the Queue of a control that covers every queue of its host.
const AllQueues = "*"

// WorkerControl is an operator's desired state for one queue of one host
// (or, with Queue AllQueues, every queue of it). It is desired state, kept
// apart from what agents report: an off stays off while the worker is
// silent and across restarts. Absent means on. For a given queue the
// control naming it wins over the host's AllQueues control.
type WorkerControl struct {
	Host         string    `json:"host"`
	Queue        string    `json:"queue"`         // a queue, or "*": every queue of the host
	DesiredState string    `json:"desired_state"` // on or off
	StopPolicy   string    `json:"stop_policy"`   // how an off takes effect; default hard
	RequestedBy  string    `json:"requested_by,omitempty"`
	UpdatedAt    time.Time `json:"updated_at,omitzero"`
}

// ID returns "HOST/QUEUE", unique per control.
func (c *WorkerControl) ID() string { return c.Host + "/" + c.Queue }

// Off reports whether the control turns its queues off.
func (c *WorkerControl) Off() bool { return c.DesiredState == DesiredOff }

var (
	hostRe   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9_])?$`)
	policyRe = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
)

// ValidHost checks a worker's host label: 1-253 letters, digits, '.', '_'
// or '-', starting with a letter or digit. It returns an ECodeInvalid
// *Error naming field.
func ValidHost(field, host string) error {
	if !hostRe.MatchString(host) {
		return Invalidf(field, "%q is not a host label (1-253 letters, digits, '.', '_' or '-', starting and ending with a letter or digit)", host)
	}
	return nil
}

// ValidAdvertise checks the address a worker advertises: an IP address
// (v4, or v6 without brackets) or a host name, with no port, scheme or
// path. It returns an ECodeInvalid *Error naming field.
func ValidAdvertise(field, addr string) error {
	if net.ParseIP(addr) != nil || (hostRe.MatchString(addr) && !strings.Contains(addr, "_")) {
		return nil
	}
	return Invalidf(field, "%q is not an IP address or a host name (give the address alone: no scheme, port or path)", addr)
}

// Validate checks every field but UpdatedAt and returns an ECodeInvalid
// *Error naming the first that breaks a rule. It checks the stop policy's
// form only; whether a handler exists is the controller's to say.
func (c *WorkerControl) Validate() error {
	if err := ValidHost("host", c.Host); err != nil {
		return err
	}
	if c.Queue != AllQueues && !queueRe.MatchString(c.Queue) {
		return Invalidf("queue", "%q is not a queue name (lower-case letters, digits, '_', '-') or \"*\" for every queue", c.Queue)
	}
	if c.DesiredState != DesiredOn && c.DesiredState != DesiredOff {
		return Invalidf("desired_state", "%q is not a desired state (on, off)", c.DesiredState)
	}
	if !policyRe.MatchString(c.StopPolicy) {
		return Invalidf("stop_policy", "%q is not a stop policy name (hard, drain, pause)", c.StopPolicy)
	}
	if len(c.RequestedBy) > 128 {
		return Invalidf("requested_by", "must be at most 128 bytes")
	}
	return nil
}

// ControlRequest is the body of PUT /api/v1/workers/{host}/control. An
// empty Queue means every queue of the host; an empty StopPolicy means
// hard.
type ControlRequest struct {
	Queue        string `json:"queue,omitempty"`
	DesiredState string `json:"desired_state"`
	StopPolicy   string `json:"stop_policy,omitempty"`
	RequestedBy  string `json:"requested_by,omitempty"`
}

// ControlResponse answers a control change: the controls now in force on
// the host, and the attempts the change is stopping (hard policy).
type ControlResponse struct {
	Controls []*WorkerControl `json:"controls"`
	Stopping []string         `json:"stopping,omitempty"`
	// Workers counts the workers registered with the host: 0 for a
	// host no agent has joined as (yet), or a typo.
	Workers int `json:"workers"`
}

// ControlList is the body of GET /api/v1/workers/{host}/control.
type ControlList struct {
	Controls []*WorkerControl `json:"controls"`
}

// OperatorStopReason is the reason of an attempt stopped because queue of
// host ("*": every queue) was turned off with policy, by whom.
func OperatorStopReason(host, queue, policy, by string) string {
	what := "every queue of " + host
	if queue != AllQueues {
		what = "queue " + queue + " of " + host
	}
	if by != "" {
		by = " by " + by
	}
	return "stopped by operator: " + what + " turned off (" + policy + ")" + by
}

// Causes: why the agent ended an attempt it was not asked to cancel by a
// user, each reported with its own exit code (seed 001's watchdog codes).
const (
	CauseBudget     = "budget"     // max_runtime exceeded
	CauseStall      = "stall"      // no output and no progress for stall_timeout
	CauseReassigned = "reassigned" // the server says the attempt belongs elsewhere
	CauseGPUHealth  = "gpu_health" // an assigned GPU disappeared or reported a fault
	CauseReadiness  = "readiness"  // a service did not become ready (see its failure class)
	CauseOperator   = "operator"   // an operator turned the worker off with the hard policy
	CauseShutdown   = "shutdown"   // the agent was asked to stop (SIGTERM, Ctrl-C) and stopped its attempts
	CauseOOM        = "oom"        // the kernel killed a process of the attempt at its memory limit (resources.memory)
	// CausePortBusy: rank 0 of a gang was not started because its
	// MASTER_PORT was in use on its machine; the gang is placed again
	// with another port.
	CausePortBusy = "port_busy"
)

// CauseWorkerGone: the server ended the attempt because its worker's
// machine is known gone (a rented instance vanished from its provider):
// no agent reported it, so it has no exit code, and it is not the job's
// doing.
const CauseWorkerGone = "worker_gone"

var causeCodes = map[string]int{CauseBudget: 75, CauseStall: 76, CauseReassigned: 77, CauseGPUHealth: 78, CauseOperator: 79,
	CauseReadiness: 80, CauseShutdown: 81, CauseOOM: 82, CausePortBusy: 83}

// CauseExitCode returns the exit code Berth reports for an attempt ended
// by cause, and false for an unknown cause.
func CauseExitCode(cause string) (int, bool) {
	code, ok := causeCodes[cause]
	return code, ok
}

// CauseSpendsRetry reports whether an attempt ended by cause counts
// against its job's retries: the job's own doing (budget, stall) does;
// hardware, reassignment, operators, the shutdown of its agent and a busy
// rendezvous port and a machine gone do not.
func CauseSpendsRetry(cause string) bool {
	return cause != CauseGPUHealth && cause != CauseReassigned && cause != CauseOperator && cause != CauseShutdown &&
		cause != CausePortBusy && cause != CauseWorkerGone
}
