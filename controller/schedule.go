package controller

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/wire"
)

// Rendezvous ports: rank 0 of a gang gets one of these for its coordinator.
const (
	firstRendezvousPort = 29500
	rendezvousPorts     = 1000
)

// addWorker registers a new worker state, keeping the order by id that
// snapshots use.
func (l *lifecycle) addWorker(ws *workerState) {
	l.workers[ws.w.ID] = ws
	i := sort.Search(len(l.order), func(i int) bool { return l.order[i].w.ID >= ws.w.ID })
	l.order = slices.Insert(l.order, i, ws)
}

// snapshot is the cluster as the scheduler sees it now.
func (c *Controller) snapshot() *scheduler.Snapshot {
	now := c.now().UTC()
	s := &scheduler.Snapshot{Now: now, Workers: c.capacity(), Quotas: c.quotaRules()}
	if len(s.Quotas) > 0 {
		s.Workers = c.federatedUsage(s.Workers)
	}
	window := now.Add(-c.cfg.Scheduler.PreemptWindow)
	for len(c.preempted) > 0 && !c.preempted[0].After(window) {
		c.preempted = c.preempted[1:]
	}
	s.RecentPreemptions = len(c.preempted)
	return s
}

// capacity returns every backend's workers, as the scheduler sees them,
// by id. Loop only.
func (c *Controller) capacity() []*scheduler.Worker {
	into := make([]*scheduler.Worker, len(c.order))
	for i, ws := range c.order {
		into[i] = ws.sched
	}
	return into
}

// runPass runs one scheduler pass and applies its plan: each assignment
// becomes a durable attempt, then a job_assign to the worker's agent;
// preemptions stop their victims; reservations and quota holds become
// visible.
func (c *Controller) runPass() {
	c.dirty = false
	start := time.Now()
	for _, ws := range c.workers {
		ws.got = false
	}
	s := c.snapshot()
	plan := scheduler.RunPass(c.queue, s)
	c.applyPlan(&plan, s.Now)
	if plan.Examined+plan.Skipped > 0 {
		c.reserved = map[string]string{}
		for _, r := range plan.Reservations {
			for _, w := range r.Workers {
				c.reserved[w] = r.JobID
			}
		}
	}
	if len(plan.QuotaExceeded) > 0 {
		events := make([]berth.Event, len(plan.QuotaExceeded))
		for i, q := range plan.QuotaExceeded {
			events[i] = berth.Event{Time: s.Now, Type: berth.EventQuotaExceeded, JobID: q.JobID, User: q.User, Quota: q.Rule,
				Reason:    fmt.Sprintf("%s<=%d: %d in use, %d requested", q.Resource, q.Limit, q.InUse, q.Requested),
				Requested: q.Requested, Limit: q.Limit}
		}
		c.emit(events...)
	}
	for _, ws := range c.workers {
		if ws.asked && ws.sess != nil {
			ws.asked = false
			if !ws.got {
				c.sendAfterCommit(ws.sess, wire.TypeNoWork, &wire.NoWork{})
			}
		}
	}
	c.stats.passes.observe(time.Since(start))
}

// applyPlan makes the transitions a scheduler pass decided: each
// assignment (all ranks of a gang together) becomes an attempt, assigned,
// written in one batch and launched on its job's backend; each preemption
// stops its victim.
func (l *lifecycle) applyPlan(plan *scheduler.Plan, now time.Time) {
	if n := len(plan.Assignments); n > 0 {
		b := &store.Batch{Attempts: make([]*berth.Attempt, 0, n)}
		for i := 0; i < n; {
			k := i + 1
			for k < n && plan.Assignments[k].Task == plan.Assignments[i].Task {
				k++
			}
			l.assign(plan.Assignments[i:k], now, b)
			i = k
		}
		l.write(b)
	}
	for _, p := range plan.Preemptions {
		l.preempt(p, now)
	}
}

// assign starts a job's members (all ranks of a gang at once): durable
// attempts, then a job_assign to each member's agent.
func (l *lifecycle) assign(members []scheduler.Assignment, now time.Time, b *store.Batch) {
	js := l.jobs[members[0].Task.JobID]
	l.queue.Remove(js.task)
	j := js.own()
	j.Attempts++
	js.failure = nil
	var rank0 *attemptState
	for _, pa := range members {
		ws := l.workers[pa.WorkerID]
		a := &berth.Attempt{ID: l.ids.New(now), JobID: j.ID, TaskIndex: pa.Rank, WorkerID: ws.w.ID,
			Host: ws.w.Host, GPUs: pa.GPUs, State: berth.AttemptAssigned, CreatedAt: now}
		a.Reason = pa.Why // how the placement chose the worker (fgd, bestfit), until the attempt ends
		as := &attemptState{a: a, job: js, worker: ws}
		as.run = l.running(as)
		js.addMember(as)
		l.attempts[a.ID] = as
		ws.attempts[a.ID] = as
		ws.take(as)
		ws.w.Running = len(ws.attempts)
		ws.got = true
		var env map[string]string
		if len(members) > 1 {
			if pa.Rank == 0 {
				rank0 = as
				a.Port = l.rendezvousPort(ws.w.Address(), now)
			}
			env = memberEnv(rank0, len(members), j.Resources.GPUs, pa.Rank)
		}
		b.Attempts = append(b.Attempts, as.copy())
		l.audit(&berth.Event{Time: now, Type: berth.AuditJobAssigned, JobID: j.ID, State: j.State, WorkerID: ws.w.ID, Host: ws.w.Host,
			Attempts: []string{a.ID}, Reason: pa.Why})
		l.backendOf(ws).Launch(j, a, env)
	}
	l.stats.placed.observe(now.Sub(j.CreatedAt))
	if j.Model != "" {
		l.hooks.prewarm(j, now)
	}
}

// referencesSecrets reports whether j's command, env or workdir may
// reference a secret, without allocating (it is asked of every job).
func referencesSecrets(j *berth.Job) bool {
	if berth.HasSecretRefs(j.Workdir) || slices.ContainsFunc(j.Command, berth.HasSecretRefs) {
		return true
	}
	for _, v := range j.Env {
		if berth.HasSecretRefs(v) {
			return true
		}
	}
	return false
}

// jobText returns the parts of j that may reference secrets: its command,
// environment values and workdir.
func jobText(j *berth.Job) []string {
	text := append([]string{j.Workdir}, j.Command...)
	for _, v := range j.Env {
		text = append(text, v)
	}
	return text
}

// prewarmEvery is how long a model hinted to a worker is not hinted again
// while no worker reports it warm.
const prewarmEvery = 10 * time.Minute

// prewarm sends a prewarm_hint for j's model to one idle worker when no
// worker has it warm, so that the next job of that model (another replica,
// the next step) finds a warm worker. The idle worker is connected, takes
// work from j's queue and runs nothing; the first by id is chosen.
func (c *Controller) prewarm(j *berth.Job, now time.Time) {
	if at, ok := c.hinted[j.Model]; ok && now.Sub(at) < prewarmEvery {
		return
	}
	var idle *workerState
	for _, ws := range c.order {
		if slices.Contains(ws.sched.Models, j.Model) {
			return // warm somewhere
		}
		if idle == nil && ws.sess != nil && !ws.sched.Off && len(ws.attempts) == 0 && ws.w.Serves(j.Queue) &&
			c.controlOf(ws.w.Host, j.Queue) == nil {
			idle = ws
		}
	}
	if idle == nil {
		return
	}
	c.hinted[j.Model] = now
	s, msg := idle.sess, &wire.PrewarmHint{Model: j.Model}
	c.sendAfterCommit(s, wire.TypePrewarmHint, msg)
}

// rendezvous returns the environment every member of a gang of n shares:
// rank 0's address and port, in Berth's names and torchrun's, and the
// processes per node torchrun is to start (--nproc_per_node): one per
// GPU, at least one.
func rendezvous(addr string, port, n, gpus int) map[string]string {
	p, nn, local := strconv.Itoa(port), strconv.Itoa(n), strconv.Itoa(max(gpus, 1))
	return map[string]string{"BERTH_NNODES": nn, "BERTH_COORDINATOR": net.JoinHostPort(addr, p),
		"MASTER_ADDR": addr, "MASTER_PORT": p, "WORLD_SIZE": nn, "LOCAL_WORLD_SIZE": local, "BERTH_GPUS_PER_NODE": local}
}

// memberEnv returns Berth's environment for rank's member of a gang of n
// whose rank 0 is the attempt rank0 (its worker's address and its
// rendezvous port).
func memberEnv(rank0 *attemptState, n, gpus, rank int) map[string]string {
	env := rendezvous(rank0.worker.w.Address(), rank0.a.Port, n, gpus)
	for _, k := range []string{"BERTH_NODE_RANK", "RANK", "NODE_RANK"} {
		env[k] = strconv.Itoa(rank)
	}
	return env
}

// mergeEnv returns Berth's environment for a job with the job's own added
// over it (a job that sets MASTER_PORT keeps its own), sharing the job's
// map when Berth adds nothing.
func mergeEnv(job, berthEnv map[string]string) map[string]string {
	if len(berthEnv) == 0 {
		return job
	}
	out := make(map[string]string, len(job)+len(berthEnv))
	maps.Copy(out, berthEnv)
	maps.Copy(out, job)
	return out
}

// busyPortFor is how long a rendezvous port found in use on a machine is
// not handed out there again.
const busyPortFor = 10 * time.Minute

// rendezvousKey names a port on the machine at addr.
func rendezvousKey(addr string, port int) string { return net.JoinHostPort(addr, strconv.Itoa(port)) }

// rendezvousPort picks a coordinator port on the machine at addr (every
// worker advertising addr: agents that share a machine share its ports)
// that no active gang there holds and that a rank 0 did not find in use
// there in the last busyPortFor. The agent checks it is free before it
// starts rank 0 (wire.JobAssign.RendezvousPort).
func (l *lifecycle) rendezvousPort(addr string, now time.Time) int {
	used := map[int]bool{}
	for _, ws := range l.order {
		if ws.w.Address() != addr {
			continue
		}
		for _, as := range ws.attempts {
			used[as.a.Port] = true
		}
	}
	for k, at := range l.busyPorts {
		if now.Sub(at) > busyPortFor {
			delete(l.busyPorts, k)
		}
	}
	for i := range rendezvousPorts {
		p := firstRendezvousPort + (l.nextPort+i)%rendezvousPorts
		if _, busy := l.busyPorts[rendezvousKey(addr, p)]; !used[p] && !busy {
			l.nextPort = (l.nextPort + i + 1) % rendezvousPorts
			return p
		}
	}
	return firstRendezvousPort
}

// preempt stops a victim attempt for a waiting job; when its agent reports
// the end, the attempt ends preempted and its job is requeued without
// spending a retry.
func (l *lifecycle) preempt(p scheduler.Preemption, now time.Time) {
	as := l.attempts[p.AttemptID]
	if as == nil || as.preemptedBy != "" {
		return
	}
	as.preemptedBy = p.For
	as.run.Stopping = true
	l.preempted = append(l.preempted, now)
	reason := "preempted by job " + p.For
	l.sendCancel(as, reason)
	ev := berth.Event{Time: now, Type: berth.EventJobPreempted, JobID: as.job.id, WorkerID: as.worker.w.ID,
		Host: as.worker.w.Host, Reason: reason}
	l.emit(ev)
}
