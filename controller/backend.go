package controller

import (
	"iter"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
)

// Backend is an execution substrate behind the controller's one job
// namespace: where the attempts the lifecycle decides on run. The
// controller places attempts on a backend's workers, tells it to launch
// and stop them, and hears back of their ends; the backend owns how an
// attempt reaches a process and how it knows its workers are alive. The
// agent pool (the WebSocket sessions of berth agent, agentPool) is the one
// implementation; a job names its backend in JobSpec.Backend, "" (or
// AgentPoolBackend) meaning the agent pool, any other name being refused
// at submit.
//
// A federation peer is not a backend: a peer receives whole jobs (seed
// 002, Model D) and runs its own controller, scheduler and backends over
// them, so it sits in front of a controller, not behind its lifecycle.
//
// Backend methods run on the controller's loop and must not block: what
// they send goes out once the loop's batch is durable.
type Backend interface {
	// Capacity appends the backend's workers, as the scheduler sees them
	// (free GPUs, CPUs, memory and slots; Off when taking no work), to
	// into and returns it.
	Capacity(into []*scheduler.Worker) []*scheduler.Worker
	// Reach yields the workers the backend could ever run an attempt on,
	// as the scheduler sees them; only their totals (GPUs, CPUs, memory)
	// count. For the agent pool these are its workers connected or heard
	// from since since, parked and disconnected ones too; a backend that
	// rents machines would yield the largest it could rent. Submit
	// refuses a job that none of any backend's could take (admit.go),
	// stopping at the first that fit.
	Reach(since time.Time) iter.Seq[*scheduler.Worker]
	// Launch starts attempt a of job j, with env added to the job's
	// environment, once the batch that created a is durable. It cannot
	// fail: an attempt that does not start is reported ended (or times
	// out unaccepted).
	Launch(j *berth.Job, a *berth.Attempt, env map[string]string)
	// Stop asks for attempt a to be stopped (SIGTERM, grace, SIGKILL),
	// with reason and cause (a berth.Cause*, or "") for its record; its end
	// is reported as any end is. A stop for an attempt on a worker out of
	// reach is dropped: Reconcile stops it when the worker is back.
	Stop(a *berth.Attempt, reason, cause string)
	// Reconcile settles, when worker comes back (after a restart of the
	// server or of its agent), the attempts the controller holds there
	// (desired) against those the worker reports running and finished
	// (actual): it starts or ends the held attempts the report
	// contradicts, and returns the reported running attempts the worker
	// is to keep and those it is to kill.
	Reconcile(worker string, running, finished []string, now time.Time) (keep, kill []string)
	// Expire is the backend's liveness: it cuts off the workers not heard
	// from since deadline and returns their ids, for the controller to
	// declare them lost and their attempts with them.
	Expire(deadline time.Time) []string
}

// AgentPoolBackend is the name of the agent pool backend, the default.
const AgentPoolBackend = "agents"

// backends returns every backend of this server, for what asks them all.
func (c *Controller) backends() []Backend { return []Backend{c.pool} }

// backendFor returns the backend a job spec names, or an ECodeInvalid
// error on backend when this server has none of that name.
func (c *Controller) backendFor(spec *berth.JobSpec) (Backend, error) {
	switch spec.Backend {
	case "", AgentPoolBackend:
		return c.pool, nil
	}
	return nil, berth.Invalidf("backend", "no backend %q on this server (backends: %s)", spec.Backend, AgentPoolBackend)
}
