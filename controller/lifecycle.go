package controller

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/store"
)

// lifecycle is the controller's in-memory state: the tables of active
// jobs, attempts and workers, the scheduler queue and the job counters,
// with the effects the transitions made on them in this pass of the loop.
// Every change of a job's or an attempt's state goes through
// transitionJob or transitionAttempt, which keep the counters, the rows
// to write and the events in step and refuse an illegal move. It holds
// no store, bus, inbox or waiter (a worker keeps its agent's session only
// to address what it is sent): what the shell must do (write, send,
// publish, wake a waiter) is an effect or one of its hooks. Loop only.
type lifecycle struct {
	jobs     map[string]*jobState
	services map[string]*jobState            // the service jobs of jobs, by id: Services walks no other
	children map[string]map[string]*jobState // parent id → its active children, by id
	attempts map[string]*attemptState
	workers  map[string]*workerState
	order    []*workerState // every worker, by id
	queue    *scheduler.Queue
	// restarting holds the jobs waiting out their retry or restart backoff.
	restarting map[*jobState]struct{}
	idem       map[idemKey][]string                       // job ids by their user's idempotency key
	controls   map[string]map[string]*berth.WorkerControl // host → queue → control
	// controlGen counts the loop's control writes, so that a poll that
	// read the store before one does not undo it.
	controlGen uint64
	stats      stats
	fx         effects
	seq        uint64 // of the last task queued
	// lastSpec is the scheduler's spec of the last array template a task
	// was made for (taskSpec): the jobs of an array share it.
	lastSpec struct {
		of   *berth.Job
		spec *scheduler.TaskSpec
	}
	eventSeq uint64 // of the last event emitted
	// dirty says the loop is to run a scheduling pass: something changed
	// what can be placed.
	dirty bool
	// preempted holds when each preemption of the last window happened.
	preempted []time.Time
	nextPort  int // where the next rendezvous port search starts
	// busyPorts holds when a gang's rank 0 last found a rendezvous port in
	// use on its machine, by "ADDRESS:PORT" (see rendezvousPort).
	busyPorts map[string]time.Time

	ids berth.IDGen
	now func() time.Time
	log *slog.Logger // for the transitions refused
	// audited and storeEvents are Config.Audit != nil and
	// Config.StoreEvents: events go in the batch for the audit log, and
	// for the store.
	audited, storeEvents bool
	hooks                hooks
	agents               Backend   // where the attempts on agents' workers run
	fed                  receiving // the jobs received from federation origins
}

// hooks are what the lifecycle tells its shell, on the loop: a job ended
// (its waiters are woken); once durable, logs may have changed; a job of
// a model was placed (an idle worker may be asked to prewarm it); a job
// handed to a federation peer is to be cancelled (stopJob).
type hooks struct {
	jobEnded      func(id string, st berth.JobState)
	notifyLogs    func()
	prewarm       func(j *berth.Job, now time.Time)
	stopFederated func(js *jobState, requested string, now time.Time)
}

func newLifecycle(cfg *Config) lifecycle {
	return lifecycle{
		jobs:        map[string]*jobState{},
		services:    map[string]*jobState{},
		children:    map[string]map[string]*jobState{},
		attempts:    map[string]*attemptState{},
		workers:     map[string]*workerState{},
		queue:       scheduler.NewQueue(*cfg.Scheduler),
		restarting:  map[*jobState]struct{}{},
		idem:        map[idemKey][]string{},
		controls:    map[string]map[string]*berth.WorkerControl{},
		busyPorts:   map[string]time.Time{},
		stats:       newStats(),
		now:         cfg.Now,
		log:         cfg.Log,
		audited:     cfg.Audit != nil,
		storeEvents: cfg.StoreEvents,
		hooks: hooks{jobEnded: func(string, berth.JobState) {}, notifyLogs: func() {},
			prewarm: func(*berth.Job, time.Time) {}, stopFederated: func(*jobState, string, time.Time) {}},
	}
}

// effects is what the transitions of one pass of the loop decided, for
// the shell (flush) to carry out: the rows to write, as one store batch,
// then, in order once they are durable, the messages to send, the events
// to publish and the callers to answer.
type effects struct {
	batch *store.Batch
	after []effect
	// room is the lengths of the busiest lists of the last batch taken,
	// each at most maxRoom: the next batch starts with room for as many,
	// rather than growing step by step (a busy loop's batches are alike).
	room room
}

// room is how many job updates, attempts, events, audit events and
// effects a batch starts with room for.
type room struct{ updates, attempts, events, audit, after int }

// maxRoom caps each length of room: a submission's batch of 50,000 jobs
// does not make every later batch as large.
const maxRoom = 1024

// effect is one thing to do once the batch is durable: send msg on a
// session, publish events, or call fn.
type effect struct {
	to     *session
	typ    string
	msg    any
	events []berth.Event
	fn     func()
}

// take returns the effects gathered so far and starts afresh.
func (fx *effects) take() (*store.Batch, []effect) {
	b, after := fx.batch, fx.after
	fx.batch, fx.after = nil, nil
	if b != nil {
		fx.room = room{updates: min(len(b.JobUpdates), maxRoom), attempts: min(len(b.Attempts), maxRoom),
			events: min(len(b.Events), maxRoom), audit: min(len(b.Audit), maxRoom), after: min(len(after), maxRoom)}
	}
	return b, after
}

// rows returns the pending batch, to append rows to.
func (fx *effects) rows() *store.Batch {
	if fx.batch == nil {
		r := fx.room
		fx.batch = &store.Batch{JobUpdates: make([]store.JobUpdate, 0, r.updates), Attempts: make([]*berth.Attempt, 0, r.attempts),
			Events: make([]*berth.Event, 0, r.events), Audit: make([]*berth.Event, 0, r.audit)}
		if fx.after == nil {
			fx.after = make([]effect, 0, r.after)
		}
	}
	return fx.batch
}

// write adds b to the loop's pending batch; flush commits it.
func (l *lifecycle) write(b *store.Batch) { l.fx.rows().Append(b) }

// afterCommit runs fn once everything written so far is durable. fn runs on
// the committer goroutine: it must be quick, non-blocking and must not touch
// loop state.
func (l *lifecycle) afterCommit(fn func()) { l.fx.after = append(l.fx.after, effect{fn: fn}) }

// sendAfterCommit queues msg for s once everything written so far is
// durable; the session's outbox never blocks.
func (l *lifecycle) sendAfterCommit(s *session, typ string, msg any) {
	l.fx.after = append(l.fx.after, effect{to: s, typ: typ, msg: msg})
}

// errIllegal is the error of a transition the lifecycle refuses.
func errIllegal(what, id string, from, to any) error {
	return berth.Errorf(berth.ECodeInternal, "illegal transition of %s %s: %v → %v", what, id, from, to)
}

// transitionJob moves js to state to: it counts the job in its new state
// (and in its queue's backlog, or out of it), writes its row and emits ev
// (its job, state and time filled in). An active job may move to any
// state but running, which only a pending job moves to; an ended job
// moves no more. An illegal move changes nothing and returns an
// ECodeInternal error.
func (l *lifecycle) transitionJob(js *jobState, to berth.JobState, ev berth.Event) error {
	j := js.own()
	if err := checkJobMove(j, to); err != nil {
		return err
	}
	from, was := j.State, js.waiting()
	l.stats.jobs[from]--
	l.stats.jobs[to]++
	switch {
	case to.Terminal():
		l.stats.totals.JobsFinished[to]++
	case to == berth.JobPending:
		l.stats.totals.JobsRequeued++
	}
	j.State = to
	l.stats.counted(js, was)
	l.writeJob(js)
	ev.JobID, ev.Name, ev.State = j.ID, j.Name, to
	l.emit(ev)
	return nil
}

// transitionAttempt moves as to state to and writes its row: an assigned
// attempt may start (running) or end, a running one may end, an ended one
// moves no more. An illegal move changes nothing and returns an
// ECodeInternal error.
func (l *lifecycle) transitionAttempt(as *attemptState, to berth.AttemptState) error {
	a := as.a
	if err := checkAttemptMove(a, to); err != nil {
		return err
	}
	a.State = to
	if to.Terminal() {
		l.stats.totals.AttemptsEnded[to]++
	}
	l.write(&store.Batch{Attempts: []*berth.Attempt{as.copy()}}) // Append drops the progress it supersedes
	return nil
}

// checkJobMove returns transitionJob's error for moving j to state to, or
// nil when the move is legal.
func checkJobMove(j *berth.Job, to berth.JobState) error {
	if from := j.State; from.Terminal() || (to == berth.JobRunning && from != berth.JobPending) {
		return errIllegal("job", j.ID, from, to)
	}
	return nil
}

// checkAttemptMove returns transitionAttempt's error for moving a to state
// to, or nil when the move is legal.
func checkAttemptMove(a *berth.Attempt, to berth.AttemptState) error {
	if from := a.State; from.Terminal() || to == berth.AttemptAssigned || (to == berth.AttemptRunning && from != berth.AttemptAssigned) {
		return errIllegal("attempt", a.ID, from, to)
	}
	return nil
}

// illegal logs a transition the lifecycle refused: a bug, left without
// effect rather than overwriting a state.
func (l *lifecycle) illegal(err error) {
	l.log.Error("controller: transition refused", "err", err)
}

// workerDisconnected records that ws's session ended, for reason: it takes
// no work until its agent registers again, and keeps its attempts until
// then or until it is lost.
func (l *lifecycle) workerDisconnected(ws *workerState, reason string, now time.Time) {
	ws.sess = nil
	ws.lastSeen = now.UnixNano()
	ws.recompute()
	w := l.workerCopy(ws)
	l.write(&store.Batch{Workers: []*berth.Worker{w}})
	ev := berth.Event{Time: now.UTC(), Type: berth.EventWorkerDisconnects, WorkerID: w.ID, Host: w.Host, Reason: reason}
	l.emit(ev)
}

// workerLost declares ws lost, and the attempts it ran with it.
func (l *lifecycle) workerLost(ws *workerState, now time.Time) {
	for _, as := range ws.attempts {
		l.endAttempt(as, berth.AttemptLost, nil, fmt.Sprintf("worker %s lost", ws.w.Host), now)
	}
	ws.w.State = berth.WorkerLost
	ws.recompute()
	w := l.workerCopy(ws)
	l.write(&store.Batch{Workers: []*berth.Worker{w}})
	l.emit(berth.Event{Time: now, Type: berth.EventWorkerLost, WorkerID: w.ID, Host: w.Host})
}

// workerGone is WorkerGone on the loop.
func (l *lifecycle) workerGone(host, why string) {
	now := l.now().UTC()
	for _, ws := range l.order {
		if ws.w.Host != host || ws.w.State == berth.WorkerLost {
			continue
		}
		if ws.sess != nil {
			ws.sess.close(why)
			ws.sess.worker = nil
			ws.sess = nil
		}
		for _, as := range ws.attempts {
			as.cause = berth.CauseWorkerGone
		}
		l.workerLost(ws, now)
	}
}

// createJobs makes and queues the jobs of a valid request, submitted by
// actor; it returns copies for the caller.
func (l *lifecycle) createJobs(req *berth.SubmitRequest, actor string) []*berth.Job {
	now := l.now().UTC()
	n := max(req.Array, 1)
	out := make([]*berth.Job, n)
	b := &store.Batch{Jobs: make([]*berth.Job, n)}
	events := make([]berth.Event, n)
	spec := withDefaults(req.JobSpec)
	key := idemKeyOf(&spec)
	var template *berth.Job // what the jobs of an array share (arrayTemplate)
	if req.Array > 0 {
		template = &berth.Job{JobSpec: spec, State: berth.JobPending, CreatedAt: now}
	}
	for i := 0; i < n; i++ {
		j := &berth.Job{ID: l.ids.New(now), JobSpec: spec, State: berth.JobPending, CreatedAt: now}
		var js *jobState
		if template != nil {
			// The loop keeps no pointer to j: the batch and the caller
			// share it (a copy each would be a million at a million
			// jobs). federate sets its Reason before the batch is
			// written, as the job's update in the same batch does.
			idx := i
			j.ArrayIndex = &idx
			js = sharedJobState(template, j.ID, i)
			b.Jobs[i], out[i] = j, j
		} else {
			stored, reply := *j, *j
			b.Jobs[i], out[i] = &stored, &reply
			js = newJobState(j)
		}
		l.addJob(js)
		l.stats.counted(js, false)
		l.adopt(js)
		l.enqueue(js)
		if key.key != "" {
			l.idem[key] = append(l.idem[key], j.ID)
		}
		if j.Origin != nil {
			l.logChange(b, j, 0, "")
		}
		events[i] = berth.Event{Time: now, Type: berth.EventJobSubmitted, JobID: j.ID, State: berth.JobPending, Actor: actor, User: j.User}
	}
	l.stats.jobs[berth.JobPending] += n // created: their rows are inserts, not transitions
	l.stats.totals.JobsSubmitted += uint64(n)
	l.write(b)
	l.emit(events...)
	l.dirty = true
	return out
}

// addJob adds js, created or loaded, to the active jobs.
func (l *lifecycle) addJob(js *jobState) {
	l.jobs[js.id] = js
	if js.view().Kind == berth.KindService {
		l.services[js.id] = js
	}
}

// markRunning records that an attempt's process started.
func (l *lifecycle) markRunning(as *attemptState, now time.Time) {
	if err := checkAttemptMove(as.a, berth.AttemptRunning); err != nil {
		l.illegal(err)
		return
	}
	as.a.StartedAt = now
	_ = l.transitionAttempt(as, berth.AttemptRunning) // checked above
	js := as.job
	j := js.own()
	l.stats.started.observe(now.Sub(j.CreatedAt))
	l.stats.totals.AttemptsStarted++
	if j.State != berth.JobPending {
		l.writeJob(js) // it now counts the attempt (see update)
		return
	}
	if j.StartedAt.IsZero() {
		j.StartedAt = now
	}
	if !js.cancelRequested() {
		j.Reason = ""
	}
	if err := l.transitionJob(js, berth.JobRunning, berth.Event{Time: now, Type: berth.EventJobRunning, WorkerID: as.worker.w.ID, Host: as.worker.w.Host}); err != nil {
		l.illegal(err)
	}
}

// endAttempt records an attempt's end and frees its capacity. The first
// member of a gang to end otherwise than succeeded ends the gang: the other
// members are stopped. Once no member is left the job moves on: done,
// failed, cancelled or queued again per its retries.
func (l *lifecycle) endAttempt(as *attemptState, st berth.AttemptState, code *int, reason string, now time.Time) {
	a := as.a
	if err := checkAttemptMove(a, st); err != nil {
		l.illegal(err) // ended twice
		return
	}
	a.ExitCode, a.Reason, a.FinishedAt = code, reason, now
	_ = l.transitionAttempt(as, st) // checked above
	if as.cause == berth.CausePortBusy {
		l.busyPorts[rendezvousKey(as.worker.w.Address(), a.Port)] = now
	}
	delete(l.attempts, a.ID)
	as.worker.release(as)
	js := as.job
	js.members[a.TaskIndex] = nil
	js.live--
	l.dirty = true
	if st != berth.AttemptSucceeded && js.failure == nil {
		js.failure = &memberEnd{state: st, code: code, reason: reason, cause: as.cause, stoppedBy: as.stoppedBy, attempt: a.ID,
			worker: a.WorkerID, class: a.FailureClass}
		if js.live > 0 {
			why := fmt.Sprintf("gang member %d %s", a.TaskIndex, st)
			if st == berth.AttemptPreempted || st == berth.AttemptStopped {
				why = reason
			}
			js.active(func(o *attemptState) {
				o.run.Stopping = true
				l.sendCancel(o, why)
			})
		}
	}
	if js.live > 0 {
		return
	}
	js.members = nil
	j := js.own()
	f := js.failure
	switch {
	case js.cancelRequested():
		l.finishJob(js, berth.JobCancelled, code, cancelledFor(j.Reason), now)
	case f != nil && f.state == berth.AttemptStopped:
		j.Attempts-- // an operator's doing: no retry spent, back at the front
		l.requeueFront(js, f, now)
	case f != nil && (f.state == berth.AttemptPreempted || (f.state == berth.AttemptCancelled && f.reason == reasonWithdrawn) ||
		(f.cause != "" && !berth.CauseSpendsRetry(f.cause))):
		j.Attempts-- // not the job's fault: no retry spent
		l.requeue(js, f.reason, now)
	case j.Kind == berth.KindService:
		l.restartService(js, f, a, now)
	case f == nil:
		l.finishJob(js, berth.JobSucceeded, code, "", now)
	case j.Attempts <= j.Retries:
		l.retry(js, f, now)
	default:
		l.finishJob(js, berth.JobFailed, f.code, orDefault(f.reason, exitDesc(f.code)), now)
	}
}

const reasonWithdrawn = "assignment withdrawn: the agent did not start it"

func orDefault(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

func exitDesc(code *int) string {
	if code == nil {
		return "no exit code"
	}
	return fmt.Sprintf("exit code %d", *code)
}

// maxRetryDelay caps the doubling wait before a failed job's next attempt.
const maxRetryDelay = time.Minute

// retry requeues a job whose attempt f failed, once a doubling delay has
// passed (1 s after the first failure, then 2 s, 4 s, … at most
// maxRetryDelay), so that a job that fails at once does not loop, and
// prefers, from then on, workers other than f's.
func (l *lifecycle) retry(js *jobState, f *memberEnd, now time.Time) {
	if f.worker != "" && !slices.Contains(js.avoid(), f.worker) {
		js.retried().avoid = append(js.avoid(), f.worker)
	}
	j := js.own()
	delay := berth.DoublingDelay(j.Attempts, maxRetryDelay)
	js.retried().restartAt = now.Add(delay)
	l.stats.totals.JobRetries++
	l.requeue(js, fmt.Sprintf("retrying in %v after attempt %d %s: %s", delay, j.Attempts, f.state, orDefault(f.reason, exitDesc(f.code))), now)
}

// Restarting services.
const (
	// serviceStableAfter is how long a service attempt must have run for
	// its end to count as a first failure again: the restart count and
	// backoff start over.
	serviceStableAfter = 10 * time.Minute
	// maxRestartDelay caps the doubling backoff between restarts.
	maxRestartDelay = 5 * time.Minute
)

// restartService handles the end of a service's attempt last (f is how it
// failed, nil when it exited 0: a service runs until stopped). Within its
// retries the service is requeued after a doubling backoff; past them it
// fails. An attempt that ran serviceStableAfter resets the count. A
// first run whose program could not be started (class cannot_start:
// exit code 126 or 127 before it was ever ready) fails it at once, since
// restarting cannot help; a later run that does so is restarted like any
// other end. Loop only.
func (l *lifecycle) restartService(js *jobState, f *memberEnd, last *berth.Attempt, now time.Time) {
	j := js.own()
	how := "exited 0"
	if f != nil {
		how = fmt.Sprintf("%s: %s", f.state, orDefault(f.reason, exitDesc(f.code)))
	}
	if f != nil && f.class == berth.FailureCannotStart && j.Attempts == 1 {
		l.finishJob(js, berth.JobFailed, f.code, berth.FailureCannotStart+": "+orDefault(f.reason, exitDesc(f.code)), now)
		return
	}
	if !last.StartedAt.IsZero() && now.Sub(last.StartedAt) >= serviceStableAfter {
		j.Attempts = 1 // it ran well: this is a first failure again
	}
	if j.Attempts > j.Retries {
		var code *int
		if f != nil {
			code = f.code
		}
		l.finishJob(js, berth.JobFailed, code, fmt.Sprintf("service ended %d times in a row (limit %d); last: %s", j.Attempts, j.Retries, how), now)
		return
	}
	delay := berth.DoublingDelay(j.Attempts, maxRestartDelay)
	js.retried().restartAt = now.Add(delay)
	l.stats.totals.ServiceRestarts++
	if js.task != nil {
		js.task.Front = false
	}
	l.requeueEvent(js, berth.Event{Time: now, Type: berth.EventJobRequeued, JobID: j.ID, State: berth.JobPending,
		Reason:   fmt.Sprintf("restarting in %v (restart %d of %d) after attempt %s", delay, j.Attempts, j.Retries, how),
		Attempts: []string{last.ID}})
}

// requeue puts a job back in the queue.
func (l *lifecycle) requeue(js *jobState, reason string, now time.Time) {
	if js.task != nil {
		js.task.Front = false
	}
	l.requeueEvent(js, berth.Event{Time: now, Type: berth.EventJobRequeued, JobID: js.id, State: berth.JobPending, Reason: reason})
}

// requeueFront puts a job an operator stopped back at the front of its
// priority class, with an event naming who stopped it and which attempt.
func (l *lifecycle) requeueFront(js *jobState, f *memberEnd, now time.Time) {
	ev := berth.Event{Time: now, Type: berth.EventJobRequeued, JobID: js.id, State: berth.JobPending, Reason: f.reason,
		Attempts: []string{f.attempt}}
	if f.stoppedBy != nil {
		ev.Actor, ev.Host, ev.Queue, ev.Policy = f.stoppedBy.RequestedBy, f.stoppedBy.Host, f.stoppedBy.Queue, f.stoppedBy.StopPolicy
	}
	if js.task != nil {
		js.task.Front = true
	}
	l.requeueEvent(js, ev)
}

// requeueEvent puts a job back in the queue and publishes ev once durable.
func (l *lifecycle) requeueEvent(js *jobState, ev berth.Event) {
	js.own().Reason = ev.Reason
	if err := l.transitionJob(js, berth.JobPending, ev); err != nil {
		l.illegal(err)
		return
	}
	if js.restartAt().After(ev.Time) {
		l.restarting[js] = struct{}{} // queued by housekeep once due
	} else {
		l.enqueue(js)
	}
}

// requeueDue queues again the jobs whose retry or restart backoff is over
// by now.
func (l *lifecycle) requeueDue(now time.Time) {
	for js := range l.restarting {
		if !js.restartAt().After(now) {
			delete(l.restarting, js)
			js.restarted()
			l.enqueue(js)
			l.dirty = true
		}
	}
}

// stopJob cancels js, an active job, with requested as the reason (see
// cancelRequestedBy): a pending job ends at once, a placed one is marked
// and its attempts are stopped; its children are cancelled with it. A job
// whose cancel was requested before is left as it is. Loop only.
func (l *lifecycle) stopJob(js *jobState, requested string, now time.Time) {
	switch {
	case js.federated():
		l.hooks.stopFederated(js, requested, now)
	case !js.placed():
		l.queue.Remove(js.task)
		delete(l.restarting, js)
		l.finishJob(js, berth.JobCancelled, nil, cancelledFor(requested), now)
	case !js.cancelRequested():
		js.own().Reason = requested
		l.writeJob(js)
		reason := cancelledFor(requested)
		js.active(func(as *attemptState) {
			as.run.Stopping = true
			l.sendCancel(as, reason)
		})
		// Its children need not wait for its processes to end.
		l.cancelChildren(l.children[js.id], js.id, "was cancelled", now)
	}
}

// sendCancel asks the attempt's backend to stop it.
func (l *lifecycle) sendCancel(as *attemptState, reason string) {
	l.backendOf(as.worker).Stop(as.a, reason, as.stopCause())
}

// finishJob moves a job to a terminal state and drops it from memory.
func (l *lifecycle) finishJob(js *jobState, st berth.JobState, code *int, reason string, now time.Time) {
	j := js.own()
	if err := checkJobMove(j, st); err != nil {
		l.illegal(err)
		return
	}
	j.ExitCode, j.Reason, j.FinishedAt = code, reason, now
	delete(l.jobs, j.ID)
	delete(l.services, j.ID)
	l.orphan(j, st, now) // its children's ends come first, as they always did
	l.hooks.jobEnded(j.ID, st)
	_ = l.transitionJob(js, st, berth.Event{Time: now, Type: "job." + string(st), Reason: reason, ExitCode: code}) // checked above
	l.afterCommit(l.hooks.notifyLogs)
}
