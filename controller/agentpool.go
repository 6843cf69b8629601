package controller

import (
	"iter"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/wire"
)

// agentPool is the Backend of berth agent: workers that register over a
// WebSocket session (session.go), take job_assign and job_cancel messages
// and report back. It shares the lifecycle's worker table and makes its
// transitions; cfg gives the grace, services and secrets of an
// assignment. Loop only.
type agentPool struct {
	l   *lifecycle
	cfg *Config
}

// Capacity appends every registered worker's scheduler view, by id.
func (p *agentPool) Capacity(into []*scheduler.Worker) []*scheduler.Worker {
	for _, ws := range p.l.order {
		into = append(into, ws.sched)
	}
	return into
}

// Reach yields the workers connected now or whose last heartbeat is
// after since.
func (p *agentPool) Reach(since time.Time) iter.Seq[*scheduler.Worker] {
	return func(yield func(*scheduler.Worker) bool) {
		for _, ws := range p.l.order {
			if (ws.sess != nil || ws.w.LastHeartbeat.After(since)) && !yield(ws.sched) {
				return
			}
		}
	}
}

// Launch sends the attempt's worker a job_assign, with the job's secrets
// resolved and its service settings, once durable.
func (p *agentPool) Launch(j *berth.Job, a *berth.Attempt, env map[string]string) {
	l := p.l
	msg := &wire.JobAssign{AttemptID: a.ID, JobID: j.ID, TaskIndex: a.TaskIndex, ArrayIndex: j.ArrayIndex,
		JobName: j.Name, User: j.User, Attempt: j.Attempts, Queue: j.Queue, Model: j.Model, Command: j.Command,
		Env: mergeEnv(j.Env, env), Workdir: j.Workdir, GPUs: a.GPUs, CPUs: j.Resources.CPUs, Memory: j.Resources.Memory,
		MaxRuntime: time.Duration(j.MaxRuntime), StallTimeout: time.Duration(j.StallTimeout), Grace: p.cfg.Grace}
	if j.Resources.GPUMilli > 0 {
		msg.GPUMilli, msg.GPUMemory = j.Resources.GPUMilli, j.Resources.GPUMemory
	}
	if a.TaskIndex == 0 && a.Port > 0 && j.Env["MASTER_PORT"] == "" {
		msg.RendezvousPort = a.Port
	}
	if j.Kind == berth.KindService && p.cfg.Services != nil {
		msg.Service = p.cfg.Services.Service(j)
	}
	if p.cfg.Secrets != nil && referencesSecrets(j) {
		msg.Secrets = p.cfg.Secrets.Resolve(j.User, jobText(j)...)
	}
	l.sendAfterCommit(l.workers[a.WorkerID].sess, wire.TypeJobAssign, msg)
}

// Stop sends the attempt's agent a job_cancel once durable, when it is
// connected.
func (p *agentPool) Stop(a *berth.Attempt, reason, cause string) {
	if s := p.l.workers[a.WorkerID].sess; s != nil {
		p.l.sendAfterCommit(s, wire.TypeJobCancel, &wire.JobCancel{AttemptID: a.ID, Reason: reason, Cause: cause})
	}
}

// Reconcile settles a registering agent's report: it keeps what the agent
// still runs if it is still this worker's and not being stopped, and kills
// the rest; of the attempts held on the worker, one the agent reports but
// that was still assigned started (its job_accepted was lost with the old
// session), one it does not report ends: withdrawn when it was never
// accepted (no retry spent), lost otherwise.
func (p *agentPool) Reconcile(worker string, running, finished []string, now time.Time) (keep, kill []string) {
	l := p.l
	ws := l.workers[worker]
	reported := map[string]bool{}
	for _, id := range running {
		reported[id] = true
		if as := l.attempts[id]; as != nil && as.worker == ws && as.stopReason() == "" {
			keep = append(keep, id)
		} else {
			kill = append(kill, id)
		}
	}
	for _, id := range finished {
		reported[id] = true
	}
	for id, as := range ws.attempts {
		switch {
		case reported[id] && as.a.State == berth.AttemptAssigned:
			l.markRunning(as, now)
		case !reported[id] && as.a.State == berth.AttemptAssigned:
			l.endAttempt(as, berth.AttemptCancelled, nil, reasonWithdrawn, now)
		case !reported[id]:
			l.endAttempt(as, berth.AttemptLost, nil, "agent restarted without it", now)
		}
	}
	return keep, kill
}

// Expire closes the sessions of the workers unheard since deadline (a
// lease and its fence margin ago) and returns their ids; workers already
// lost are left out.
func (p *agentPool) Expire(deadline time.Time) []string {
	var lost []string
	d := deadline.UnixNano()
	for _, ws := range p.l.workers {
		if ws.w.State == berth.WorkerLost || ws.lastSeen > d {
			continue
		}
		if ws.sess != nil {
			ws.sess.close("lease expired: no message within the lease")
			ws.sess.worker = nil
			ws.sess = nil
		}
		lost = append(lost, ws.w.ID)
	}
	return lost
}
