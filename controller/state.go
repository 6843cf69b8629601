package controller

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/store"
)

// ReasonCancelRequested begins the reason of a running job whose cancel is
// on its way to the agent, "cancel requested by ACTOR"; it survives a
// restart so the cancel is carried out, and the job ends "cancelled by
// ACTOR".
const ReasonCancelRequested = "cancel requested"

type jobState struct {
	// cur is the loop's copy of the job (batches get copies), or, while
	// the job is as its array was submitted, the array's template that
	// its untouched jobs share (shared): read it with view, change it
	// through own, copy it out with clone.
	cur     *berth.Job
	id      string // the job's ID, the jobs map's key
	task    *scheduler.Task
	members []*attemptState // active attempts by rank (a gang has several); nil while queued
	live    int32           // active members
	index   int32           // the array index of a shared job
	failure *memberEnd      // the first member to end otherwise than succeeded
	// again is nil until the job is retried, restarted or handed off:
	// most queued jobs never are, and each holds a jobState.
	again *jobAgain
}

// jobAgain is what a job that was retried, restarted or handed off keeps.
type jobAgain struct {
	// restartAt is when a job waiting to retry or restart is queued
	// again; zero when it is not waiting.
	restartAt time.Time
	// avoid lists the workers where the job's attempts failed or were
	// lost, for its retries to go elsewhere (scheduler.Task.Avoid).
	avoid []string
	// incarnation is the job's last handoff to a federation peer (0:
	// never handed off; federation.go).
	incarnation int
}

// newJobState returns the state of j, which it owns.
func newJobState(j *berth.Job) *jobState { return &jobState{cur: j, id: j.ID} }

// sharedJobState returns the state of the job id, index index of an array
// whose jobs are all template but for their IDs and indexes (a template
// has neither: see arrayTemplate).
func sharedJobState(template *berth.Job, id string, index int) *jobState {
	return &jobState{cur: template, id: id, index: int32(index)}
}

// arrayTemplate returns what the jobs of j's array share while they are
// as submitted: j without its ID and array index. Never changed once
// made: a job that changes makes its own copy first (own).
func arrayTemplate(j *berth.Job) *berth.Job {
	t := *j
	t.ID, t.ArrayIndex = "", nil
	return &t
}

// sharesTemplate reports whether j is template but for its ID and array
// index (its host too, which the store does not keep), so that its state
// may share template (arrayTemplate).
func sharesTemplate(template, j *berth.Job) bool {
	t, s := &template.JobSpec, &j.JobSpec
	return template.State == j.State && template.Reason == j.Reason && template.ExitCode == nil && j.ExitCode == nil &&
		template.Attempts == j.Attempts && template.CreatedAt == j.CreatedAt && template.StartedAt == j.StartedAt &&
		template.FinishedAt == j.FinishedAt && template.Host == j.Host &&
		t.Name == s.Name && t.User == s.User && t.Queue == s.Queue && t.Kind == s.Kind && t.Priority == s.Priority &&
		t.Nodes == s.Nodes && t.Resources == s.Resources && t.Constraints.Host == s.Constraints.Host &&
		maps.Equal(t.Constraints.Labels, s.Constraints.Labels) && slices.Equal(t.Command, s.Command) &&
		maps.Equal(t.Env, s.Env) && t.Workdir == s.Workdir && t.Template == s.Template && maps.Equal(t.Vars, s.Vars) &&
		t.MaxRuntime == s.MaxRuntime && t.StallTimeout == s.StallTimeout && t.Retries == s.Retries &&
		t.Preemptible == s.Preemptible && t.Model == s.Model && t.IdempotencyKey == s.IdempotencyKey &&
		t.Parent == s.Parent && t.Backend == s.Backend && t.Cluster == s.Cluster && t.Image == s.Image &&
		t.Origin == nil && s.Origin == nil
}

// shared reports whether js is a job of an array still as submitted,
// whose cur is the template its array shares.
func (js *jobState) shared() bool { return js.cur.ID == "" }

// view returns the job for reading. Never write through it (own): while
// the job is shared it is its array's template, whose ID and ArrayIndex
// are empty (js.id and clone have them).
func (js *jobState) view() *berth.Job { return js.cur }

// own returns the job for changing: a shared job first gets its own copy
// of its template, with its ID and array index, which the other jobs of
// its array never see.
func (js *jobState) own() *berth.Job {
	if js.shared() {
		js.cur = js.clone()
	}
	return js.cur
}

// clone returns a copy of the job as it is, its ID and array index
// included, for a caller off the loop or a batch.
func (js *jobState) clone() *berth.Job {
	j := *js.cur
	if js.shared() {
		j.ID = js.id
		index := int(js.index)
		j.ArrayIndex = &index
	}
	return &j
}

// retried returns js's jobAgain, made the first time it is asked for.
func (js *jobState) retried() *jobAgain {
	if js.again == nil {
		js.again = &jobAgain{}
	}
	return js.again
}

// restartAt is when the job, waiting to retry or restart, is queued again;
// zero when it is not waiting.
func (js *jobState) restartAt() time.Time {
	if js.again == nil {
		return time.Time{}
	}
	return js.again.restartAt
}

// avoid lists the workers where the job's attempts failed or were lost.
func (js *jobState) avoid() []string {
	if js.again == nil {
		return nil
	}
	return js.again.avoid
}

// incarnation is the job's last handoff to a federation peer (0: never).
func (js *jobState) incarnation() int {
	if js.again == nil {
		return 0
	}
	return js.again.incarnation
}

// restarted clears the job's restart time: it is queued again.
func (js *jobState) restarted() {
	if js.again != nil {
		js.again.restartAt = time.Time{}
	}
}

// memberEnd is how one member of a job's current placement ended.
type memberEnd struct {
	state     berth.AttemptState
	code      *int
	reason    string
	cause     string               // berth.Cause*, when its agent ended it
	stoppedBy *berth.WorkerControl // the control whose hard stop ended it
	attempt   string
	worker    string // the attempt's worker ID
	class     string // a service attempt's failure class (berth.Failure*)
}

// placed reports whether the job has active attempts.
func (js *jobState) placed() bool { return js.live > 0 }

// active calls fn for each active member.
func (js *jobState) active(fn func(*attemptState)) {
	for _, as := range js.members {
		if as != nil {
			fn(as)
		}
	}
}

func (js *jobState) cancelRequested() bool {
	return strings.HasPrefix(js.view().Reason, ReasonCancelRequested)
}

// cancelRequestedBy is the reason of a job whose cancel actor requested
// ("" when the request named nobody).
func cancelRequestedBy(actor string) string {
	return ReasonCancelRequested + " by " + cmp.Or(actor, "user")
}

// cancelledFor is the reason a job ends with, and its attempts are stopped
// with, after a cancel requested with reason requested: "cancelled by
// ACTOR".
func cancelledFor(requested string) string {
	return "cancelled" + strings.TrimPrefix(requested, ReasonCancelRequested)
}

// update returns the job's row as it is to be stored. A job placed but
// not yet started (pending, with assigned attempts) is stored without the
// attempt it is making: its assignment writes the attempts only, and the
// job's row counts it once an agent accepts (markRunning), which keeps one
// row write off every assignment. rebuild counts it back in.
func (js *jobState) update() store.JobUpdate {
	j := js.view()
	attempts := j.Attempts
	if j.State == berth.JobPending && js.placed() {
		attempts--
	}
	return store.JobUpdate{ID: js.id, State: j.State, Reason: j.Reason, ExitCode: j.ExitCode,
		Attempts: attempts, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt}
}

type attemptState struct {
	a           *berth.Attempt
	job         *jobState
	worker      *workerState
	run         *scheduler.Running // what the scheduler sees of it
	runAt       int                // where run is in its worker's Running list
	logSize     int64
	preemptedBy string               // job it is being stopped for
	stoppedBy   *berth.WorkerControl // the control whose hard stop is stopping it
	cause       string               // why its agent ended it, as reported (berth.Cause*)
	// readySince and leaseUntil, for a ready service attempt: when it
	// became ready, and until when its endpoint is listed unless its
	// worker is heard from again.
	readySince, leaseUntil time.Time
	// marker is a service attempt's last startup marker, as its agent
	// reported it (the gateway names a warming model's phase after it).
	marker string
}

// stopReason says why the attempt is being stopped, or "" if it is not:
// its job is cancelled, it is preempted, an operator stopped its worker,
// or another member of its gang ended.
func (as *attemptState) stopReason() string {
	switch {
	case as.job.cancelRequested():
		return cancelledFor(as.job.view().Reason)
	case as.preemptedBy != "":
		return "preempted by job " + as.preemptedBy
	case as.stoppedBy != nil:
		return operatorStop(as.stoppedBy)
	case as.job.failure != nil:
		return "another member of the gang ended"
	}
	return ""
}

// stopCause is the cause a stop of the attempt carries to its agent: an
// operator's hard stop, or none.
func (as *attemptState) stopCause() string {
	if as.stoppedBy != nil && !as.job.cancelRequested() && as.preemptedBy == "" { // stopReason's earlier cases win
		return berth.CauseOperator
	}
	return ""
}

func (as *attemptState) copy() *berth.Attempt {
	a := *as.a
	return &a
}

type workerState struct {
	w     *berth.Worker
	sched *scheduler.Worker
	sess  *session // nil while disconnected
	// hosted is the added backend whose worker this is (a Kubernetes
	// node), nil for an agent's; cordoned says that backend takes no new
	// work there.
	hosted   *hostedBackend
	cordoned bool
	lastSeen int64 // unix nanos of the last message, or of disconnect/start
	attempts map[string]*attemptState
	asked    bool // sent ready_for_work; owed no_work if nothing is placed
	got      bool // placed something this pass

	// From its host's controls (applyControl): queues it serves but takes
	// nothing from, the only queues it takes from (a host-wide off with
	// queues turned back on by name), and whether it takes nothing.
	offQueues  []string
	onlyQueues []string
	parked     bool
	faulty     []int // GPU indexes its agent reports missing or faulted
	gpuMilli   []int // aligned with w.GPUs: the milli-GPUs its attempts hold of each
	// leaving is the session of an agent shutting down (it ended an
	// attempt with cause shutdown): nothing more is placed on the worker
	// until an agent registers it again, in a new session.
	leaving *session
}

func newWorkerState(w *berth.Worker) *workerState {
	ws := &workerState{w: w, attempts: map[string]*attemptState{}, sched: &scheduler.Worker{ID: w.ID}}
	ws.recompute()
	return ws
}

// recompute sets the scheduler's view of free capacity from the worker's
// declared capacity and its active attempts.
func (ws *workerState) recompute() {
	w, s := ws.w, ws.sched
	s.Host, s.Queues, s.OffQueues, s.Labels, s.GPUs = w.Host, w.Queues, ws.offQueues, w.Labels, w.GPUs
	if ws.hosted == nil { // an agent's: a job naming the agent pool may go there
		s.Labels = maps.Clone(w.Labels)
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[BackendLabel] = AgentPoolBackend
	}
	if ws.onlyQueues != nil {
		s.Queues = ws.onlyQueues
	}
	s.CPUs, s.Memory = w.CPUs, w.Memory
	s.GPUMilliUsed, ws.gpuMilli = make([]int, len(w.GPUs)), make([]int, len(w.GPUs))
	s.FreeCPUs, s.FreeMemory, s.FreeSlots = w.CPUs, w.Memory, w.Slots
	s.Running, w.GPUsInUse, w.GPUMilliShared = s.Running[:0], 0, 0
	for _, as := range ws.attempts {
		ws.take(as)
	}
	ws.markFaulty()
	s.Off = ws.parked
	if ws.hosted != nil {
		s.Off = s.Off || ws.cordoned || w.State == berth.WorkerLost
	} else {
		s.Off = s.Off || ws.sess == nil || ws.sess == ws.leaving
	}
	w.Running = len(ws.attempts)
}

// markFaulty keeps the scheduler off the faulty GPUs by counting them
// used whole.
func (ws *workerState) markFaulty() {
	s := ws.sched
	for _, idx := range ws.faulty {
		for i, g := range s.GPUs {
			if g.Index == idx {
				s.GPUMilliUsed[i] = berth.WholeGPU
			}
		}
	}
}

// addGPUUse adds milli (negative: gives back) to the use of GPU idx, in
// the scheduler's view (markFaulty then counts faulty ones whole) and in
// the worker's count of GPUs in use.
func (ws *workerState) addGPUUse(idx, milli int) {
	s := ws.sched
	for i, g := range s.GPUs {
		if g.Index != idx {
			continue
		}
		before := ws.gpuMilli[i]
		ws.gpuMilli[i] += milli
		s.GPUMilliUsed[i] = min(ws.gpuMilli[i], berth.WholeGPU)
		switch {
		case before == 0 && ws.gpuMilli[i] > 0:
			ws.w.GPUsInUse++
		case before > 0 && ws.gpuMilli[i] <= 0:
			ws.w.GPUsInUse--
		}
	}
	ws.w.GPUMilliShared = 0
	for i, m := range ws.gpuMilli {
		if m > 0 && m < berth.WholeGPU && !slices.Contains(ws.faulty, s.GPUs[i].Index) {
			ws.w.GPUMilliShared += berth.WholeGPU - m
		}
	}
}

// gpuShare returns the share of each of its GPUs as holds on ws, in
// milli-GPUs: a whole GPU, or a fraction's share of its GPU
// (Resources.MilliOn).
func (ws *workerState) gpuShare(as *attemptState) int {
	r := &as.job.view().Resources
	if r.GPUMilli == 0 || len(as.a.GPUs) == 0 {
		return berth.WholeGPU
	}
	for _, g := range ws.w.GPUs {
		if g.Index == as.a.GPUs[0] {
			return r.MilliOn(g)
		}
	}
	return r.GPUMilli
}

// gpusFull counts the GPUs its attempts hold whole or fill with fractions.
func (ws *workerState) gpusFull() int {
	n := 0
	for _, m := range ws.gpuMilli {
		if m >= berth.WholeGPU {
			n++
		}
	}
	return n
}

func (ws *workerState) take(as *attemptState) {
	s := ws.sched
	as.runAt = len(s.Running)
	s.Running = append(s.Running, as.run)
	share := ws.gpuShare(as)
	if as.job.view().Resources.GPUMilli > 0 {
		as.run.GPUMilli = share
	}
	for _, idx := range as.a.GPUs {
		ws.addGPUUse(idx, share)
	}
	r := as.job.view().Resources
	s.FreeCPUs -= r.CPUs
	s.FreeMemory -= r.Memory
	s.FreeSlots--
}

// release frees the capacity as held. An attempt its agent ended because
// it is shutting down also takes the worker out of placement for the rest
// of the session, so that its job goes elsewhere.
func (ws *workerState) release(as *attemptState) {
	delete(ws.attempts, as.a.ID)
	s := ws.sched
	if as.cause == berth.CauseShutdown && ws.sess != nil {
		ws.leaving, s.Off = ws.sess, true
	}
	i := as.runAt
	if i >= len(s.Running) || s.Running[i] != as.run {
		i = slices.Index(s.Running, as.run)
	}
	if i >= 0 {
		// The last takes its place: the scheduler orders Running itself
		// where order matters, and a worker runs up to a thousand no-op
		// attempts, whose shifting was 3 % of a busy server's CPU (and
		// finding the attempt in the list 1 %, hence runAt).
		last := len(s.Running) - 1
		moved := s.Running[last]
		s.Running[i], s.Running[last] = moved, nil
		s.Running = s.Running[:last]
		if m := ws.attempts[moved.AttemptID]; m != nil && m.run == moved {
			m.runAt = i
		}
	}
	share := ws.gpuShare(as)
	for _, idx := range as.a.GPUs {
		ws.addGPUUse(idx, -share)
	}
	ws.markFaulty()
	r := as.job.view().Resources
	s.FreeCPUs += r.CPUs
	s.FreeMemory += r.Memory
	s.FreeSlots++
	ws.w.Running = len(ws.attempts)
}

// observedState is what ws is doing: lost, disconnected, draining or
// parked (turned off), busy (no free slot, or every GPU that is not
// faulty held by its attempts) or ready. Loop only.
func (l *lifecycle) observedState(ws *workerState) berth.WorkerState {
	switch {
	case ws.w.State == berth.WorkerLost:
		return berth.WorkerLost
	case ws.hosted != nil && ws.cordoned:
		return berth.WorkerParked
	case ws.sess == nil && ws.hosted == nil:
		return berth.WorkerDisconnected
	case ws.parked && l.draining(ws):
		return berth.WorkerDraining
	case ws.parked:
		return berth.WorkerParked
	case ws.sched.FreeSlots <= 0 || (ws.w.GPUsInUse > 0 && ws.gpusFull() >= len(ws.w.GPUs)-len(ws.faulty)):
		return berth.WorkerBusy
	}
	return berth.WorkerReady
}

// jobLoader makes the states of the jobs a start loads, part by part as
// the store hands them out (store.JobStore.LoadActive), in id order,
// while the store reads the next: each job goes into the jobs map and
// loaded, and a job with no active attempt into the queue at once (in id
// order: the queue's FIFO order); the others wait for the rebuild (rest).
type jobLoader struct {
	c        *Controller
	begun    bool
	placed   map[string]bool // the jobs of the active attempts
	loaded   []*jobState     // in id order
	rest     []*jobState     // the jobs of placed, in id order
	template *berth.Job      // of the array being loaded, if any (sharesTemplate)
}

// begin readies the loader for the jobs of a: the handles of the
// federation and the jobs the active attempts place.
func (ld *jobLoader) begin(a *store.Active) {
	if ld.begun {
		return
	}
	ld.begun = true
	ld.c.indexHandles(&a.Federation)
	ld.placed = make(map[string]bool, len(a.Attempts))
	for _, at := range a.Attempts {
		ld.placed[at.JobID] = true
	}
}

// add makes the states of a part's jobs and members, read with the rest
// of a; left more are to come.
func (ld *jobLoader) add(a *store.Active, jobs []*berth.Job, members []store.ArrayMember, left int) {
	c := ld.c
	if !ld.begun { // the first part: room for them all
		ld.begin(a)
		n := len(jobs) + len(members) + left
		ld.loaded = make([]*jobState, 0, n)
		c.jobs = make(map[string]*jobState, n)
	}
	part := store.Active{Jobs: jobs, Members: members}
	for j, m := range part.ByID() {
		var js *jobState
		switch {
		case m != nil && m.Like.Origin == nil: // as its array was submitted: m.Like is its template
			js = sharedJobState(m.Like, m.ID, m.Index)
		case m != nil:
			js = newJobState(m.Job())
		case j.ArrayIndex == nil || j.State != berth.JobPending || j.Origin != nil:
			js = newJobState(j)
		case ld.template != nil && sharesTemplate(ld.template, j):
			js = sharedJobState(ld.template, j.ID, *j.ArrayIndex)
		default:
			ld.template = arrayTemplate(j)
			js = sharedJobState(ld.template, j.ID, *j.ArrayIndex)
		}
		ld.loaded = append(ld.loaded, js)
		c.addJob(js)
		if j := js.view(); j.IdempotencyKey != "" {
			k := idemKeyOf(&j.JobSpec)
			c.idem[k] = append(c.idem[k], js.id)
		}
		if ld.placed[js.id] {
			ld.rest = append(ld.rest, js)
			continue
		}
		c.loadHandles(js)
		c.stats.counted(js, false) // its cluster is known: loadHandles ran
		c.enqueue(js)
	}
}

// rebuild restores memory from what the store holds, the jobs' states
// made and the unplaced ones queued (jobLoader): active attempts go back
// on their workers, which count as disconnected until their agents
// register again.
func (c *Controller) rebuild(a *store.Active, ld *jobLoader) {
	ld.begin(a) // with no job, no part began it
	now := c.now()
	for _, w := range a.Workers {
		ws := newWorkerState(w)
		ws.lastSeen = now.UnixNano()
		c.addWorker(ws)
	}
	for _, js := range ld.loaded { // once every parent is in
		c.adopt(js)
	}
	c.loadFederation(&a.Federation)
	for _, at := range a.Attempts {
		js := c.jobs[at.JobID]
		if js == nil {
			continue // its job ended; the attempt row is stale
		}
		ws := c.workers[at.WorkerID]
		if ws == nil {
			ws = newWorkerState(&berth.Worker{ID: at.WorkerID, Host: at.Host, State: berth.WorkerDisconnected})
			ws.lastSeen = now.UnixNano()
			c.addWorker(ws)
		}
		as := &attemptState{a: at, job: js, worker: ws, logSize: a.LogSizes[at.ID]}
		as.run = c.running(as)
		js.addMember(as)
		c.attempts[at.ID] = as
		ws.attempts[at.ID] = as
	}
	c.loadControls(a.Controls)
	for _, ws := range c.order {
		c.applyControl(ws) // marks hard stops; their agents stop them at register
		if ws.w.State != berth.WorkerLost {
			ws.w.State = berth.WorkerDisconnected
		}
	}
	for _, js := range ld.rest { // in id order
		c.stats.counted(js, false) // its cluster is known: loadFederation ran
		if !js.placed() {
			c.enqueue(js)
			continue
		}
		if js.view().State == berth.JobPending {
			js.own().Attempts++ // assigned, not yet started: its row leaves it out (see update)
		}
		if int(js.live) < max(js.view().Nodes, 1) {
			// A member of this gang ended before the restart: the gang
			// ends too. Its agents stop the others when they register.
			js.failure = &memberEnd{state: berth.AttemptLost, reason: "another member of the gang ended while the server restarted"}
			js.active(func(as *attemptState) { as.run.Stopping = true })
		}
	}
	c.loadQuotas(a.Quotas)
	c.loadPeers(a.Federation.Peers)
	c.loadEvents(a.Events)
	c.rebuildReceived(a)
	c.stats.loadCounts(a.Counts)
	c.dirty = true
}

// addMember records as as the active attempt of its rank.
func (js *jobState) addMember(as *attemptState) {
	if js.members == nil {
		js.members = make([]*attemptState, max(js.view().Nodes, 1))
	}
	if r := as.a.TaskIndex; r >= 0 && r < len(js.members) && js.members[r] == nil {
		js.members[r] = as
		js.live++
	}
}

// running returns the scheduler's view of an attempt.
func (l *lifecycle) running(as *attemptState) *scheduler.Running {
	j := as.job.view()
	started := as.a.StartedAt
	if started.IsZero() {
		started = as.a.CreatedAt
	}
	r := j.Resources
	return &scheduler.Running{AttemptID: as.a.ID, JobID: as.job.id, Rank: as.a.TaskIndex, Queue: j.Queue, User: j.User,
		Template: j.Template, Priority: j.Priority, Preemptible: j.Preemptible, Gang: j.Nodes > 1, Spread: spreadKey(j), Started: started,
		MaxRuntime: time.Duration(j.MaxRuntime), GPUs: as.a.GPUs, CPUs: r.CPUs, Memory: r.Memory,
		Stopping: as.stopReason() != ""}
}

// spreadKey names the replica set of a service job: its user's services of
// one name spread across hosts. Other jobs have none.
func spreadKey(j *berth.Job) string {
	if j.Kind != berth.KindService || j.Name == "" {
		return ""
	}
	return j.User + "/" + j.Name
}

// taskSpec returns what js asks the scheduler for: the one its array's
// jobs share while js is shared (made for the first of them enqueued, the
// jobs of an array are enqueued one after another), else its own. The
// fields it copies never change while the job is active.
func (l *lifecycle) taskSpec(js *jobState) *scheduler.TaskSpec {
	j := js.view()
	if js.shared() && l.lastSpec.of == j {
		return l.lastSpec.spec
	}
	ts := &scheduler.TaskSpec{Nodes: j.Nodes, Queue: j.Queue, User: j.User, Template: j.Template, Model: j.Model,
		Spread: spreadKey(j), MaxRuntime: time.Duration(j.MaxRuntime), Submitted: j.CreatedAt, Resources: j.Resources,
		Constraints: j.Constraints, NoImage: j.Image == ""}
	if j.Backend != "" {
		ts.Constraints.Labels = maps.Clone(j.Constraints.Labels)
		if ts.Constraints.Labels == nil {
			ts.Constraints.Labels = map[string]string{}
		}
		ts.Constraints.Labels[BackendLabel] = j.Backend
	}
	if js.shared() {
		l.lastSpec.of, l.lastSpec.spec = j, ts
	}
	return ts
}

// enqueue puts a job's task in the scheduler queue; a job handed to a
// federation peer never goes there.
func (l *lifecycle) enqueue(js *jobState) {
	if js.federated() {
		return
	}
	if js.task == nil {
		l.seq++
		js.task = &scheduler.Task{TaskSpec: l.taskSpec(js), JobID: js.id, Priority: js.view().Priority, Seq: l.seq}
	}
	js.task.Avoid = js.avoid()
	l.queue.Push(js.task)
}
