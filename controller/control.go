package controller

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/wire"
)

// stopPolicy is how turning a queue off treats the attempts of that queue
// that run on the host's workers. New policies are new entries of
// stopPolicies: the store and the API keep stop_policy as free text.
type stopPolicy struct {
	// onOff acts on one attempt running in a queue that is off under ctl.
	// It is called on every change of control, register and restart, so
	// it must be idempotent.
	onOff func(l *lifecycle, as *attemptState, ctl *berth.WorkerControl)
	// drains: attempts left running are finishing, and the worker shows
	// draining until they have; otherwise it parks at once and keeps them.
	drains bool
}

// stopPolicies is the registry of stop policies, by name.
var stopPolicies = map[string]stopPolicy{
	berth.StopHard:  {onOff: hardStop},
	berth.StopDrain: {onOff: keepRunning, drains: true},
	berth.StopPause: {onOff: keepRunning},
}

// fallbackPolicy applies to a control whose stop_policy has no handler (it
// can only be written to the store directly): nothing running is killed.
const fallbackPolicy = berth.StopDrain

// StopPolicies returns the names of the stop policies, sorted.
func StopPolicies() []string { return slices.Sorted(maps.Keys(stopPolicies)) }

func policyOf(ctl *berth.WorkerControl) stopPolicy {
	if p, ok := stopPolicies[ctl.StopPolicy]; ok {
		return p
	}
	return stopPolicies[fallbackPolicy]
}

// hardStop stops the attempt now; when its agent reports the end it is
// stopped and its job requeued at the front without spending a retry.
func hardStop(l *lifecycle, as *attemptState, ctl *berth.WorkerControl) {
	if as.stoppedBy != nil || as.stopReason() != "" {
		return
	}
	stoppedBy := *ctl
	as.stoppedBy = &stoppedBy
	as.run.Stopping = true
	l.sendCancel(as, as.stopReason())
}

func keepRunning(*lifecycle, *attemptState, *berth.WorkerControl) {}

// operatorStop says who stopped an attempt and why.
func operatorStop(ctl *berth.WorkerControl) string {
	return berth.OperatorStopReason(ctl.Host, ctl.Queue, ctl.StopPolicy, ctl.RequestedBy)
}

// controlOf returns the control that turns queue of host off, or nil when
// it is on: a control naming the queue wins over the host's "*" control.
func (l *lifecycle) controlOf(host, queue string) *berth.WorkerControl {
	byQueue := l.controls[host]
	ctl := byQueue[queue]
	if ctl == nil {
		ctl = byQueue[berth.AllQueues]
	}
	if ctl == nil || !ctl.Off() {
		return nil
	}
	return ctl
}

// wireControl is the desired state of host as its agents are told it.
func (l *lifecycle) wireControl(host string, ws *workerState) *wire.Control {
	out := &wire.Control{}
	for _, q := range slices.Sorted(maps.Keys(l.controls[host])) {
		ctl := l.controls[host][q]
		if ctl.Off() {
			out.Off = append(out.Off, wire.QueueOff{Queue: q, Policy: ctl.StopPolicy, RequestedBy: ctl.RequestedBy})
		} else if q != berth.AllQueues {
			out.On = append(out.On, q)
		}
	}
	out.Parked = ws != nil && ws.parked
	return out
}

// applyControl sets what ws takes work from after a change of its host's
// controls, and acts on its attempts in queues now off. It returns the
// attempts a policy is stopping. Loop only.
func (l *lifecycle) applyControl(ws *workerState) []string {
	host := ws.w.Host
	ws.offQueues, ws.onlyQueues, ws.parked = nil, nil, false
	if len(ws.w.Queues) > 0 {
		for _, q := range ws.w.Queues {
			if l.controlOf(host, q) != nil {
				ws.offQueues = append(ws.offQueues, q)
			}
		}
		ws.parked = len(ws.offQueues) == len(ws.w.Queues)
	} else if l.controlOf(host, berth.AllQueues) != nil {
		// Every queue is off but those turned on by name.
		for q, ctl := range l.controls[host] {
			if q != berth.AllQueues && !ctl.Off() {
				ws.onlyQueues = append(ws.onlyQueues, q)
			}
		}
		sort.Strings(ws.onlyQueues)
		ws.parked = len(ws.onlyQueues) == 0
	} else {
		for q, ctl := range l.controls[host] {
			if ctl.Off() {
				ws.offQueues = append(ws.offQueues, q)
			}
		}
		sort.Strings(ws.offQueues)
	}
	var stopping []string
	for _, as := range ws.attempts {
		if ctl := l.controlOf(host, as.job.view().Queue); ctl != nil {
			policyOf(ctl).onOff(l, as, ctl)
			if as.stoppedBy != nil {
				stopping = append(stopping, as.a.ID)
			}
		}
	}
	sort.Strings(stopping)
	ws.recompute()
	return stopping
}

// draining reports whether an attempt of a queue off under a draining
// policy still runs on ws.
func (l *lifecycle) draining(ws *workerState) bool {
	for _, as := range ws.attempts {
		if ctl := l.controlOf(ws.w.Host, as.job.view().Queue); ctl != nil && policyOf(ctl).drains {
			return true
		}
	}
	return false
}

// pushControl tells ws's agent its desired state once what is written so
// far is durable.
func (l *lifecycle) pushControl(ws *workerState) {
	if s := ws.sess; s != nil {
		msg := l.wireControl(ws.w.Host, ws)
		l.sendAfterCommit(s, wire.TypeControl, msg)
	}
}

// SetWorkerControl sets the desired state of one queue of host (every
// queue when req.Queue is empty) and returns, once it is durable, the
// controls now in force on the host and the attempts it is stopping.
// Without a queue it also overwrites the host's per-queue controls, so that
// it holds for every queue. The change is pushed to the host's agents and
// acted on by its stop policy at once. Invalid input returns an
// ECodeInvalid *berth.Error naming the field and writes nothing.
func (c *Controller) SetWorkerControl(ctx context.Context, host string, req berth.ControlRequest) (*berth.ControlResponse, error) {
	ctl := berth.WorkerControl{Host: host, Queue: req.Queue, DesiredState: req.DesiredState,
		StopPolicy: req.StopPolicy, RequestedBy: req.RequestedBy}
	if ctl.Queue == "" {
		ctl.Queue = berth.AllQueues
	}
	if ctl.StopPolicy == "" {
		ctl.StopPolicy = berth.StopHard
	}
	if err := ctl.Validate(); err != nil {
		return nil, err
	}
	if _, ok := stopPolicies[ctl.StopPolicy]; !ok {
		return nil, berth.Invalidf("stop_policy", "%q is not a stop policy (%s)", ctl.StopPolicy, strings.Join(StopPolicies(), ", "))
	}
	resp := &berth.ControlResponse{}
	var written <-chan struct{}
	if err := c.do(ctx, func() {
		ctl.UpdatedAt = c.now().UTC()
		rows := []*berth.WorkerControl{&ctl}
		if ctl.Queue == berth.AllQueues {
			for q := range c.controls[host] {
				if q != berth.AllQueues {
					row := ctl
					row.Queue = q
					rows = append(rows, &row)
				}
			}
		}
		resp.Stopping = c.setControls(rows, ctl.UpdatedAt, berth.ActorFrom(ctx))
		resp.Controls = c.hostControls(host)
		for _, ws := range c.workers {
			if ws.w.Host == host {
				resp.Workers++
			}
		}
		written = c.durable()
	}); err != nil {
		return nil, err
	}
	if err := c.awaitDurable(ctx, written); err != nil {
		return nil, err
	}
	return resp, nil
}

// setControls writes controls (all of one host), applies them to the
// host's workers and publishes one event per control, made by actor (""
// for a row's requested_by). It returns the attempts being stopped. Loop
// only.
func (l *lifecycle) setControls(rows []*berth.WorkerControl, now time.Time, actor string) []string {
	host := rows[0].Host
	if l.controls[host] == nil {
		l.controls[host] = map[string]*berth.WorkerControl{}
	}
	stored := make([]*berth.WorkerControl, len(rows))
	for i, r := range rows {
		kept, copied := *r, *r
		l.controls[host][r.Queue] = &kept
		stored[i] = &copied
	}
	l.controlGen++
	l.write(&store.Batch{Controls: stored})
	var stopping []string
	for _, ws := range l.order {
		if ws.w.Host == host {
			stopping = append(stopping, l.applyControl(ws)...)
			l.pushControl(ws)
		}
	}
	l.dirty = true
	events := make([]berth.Event, len(rows))
	for i, r := range rows {
		events[i] = berth.Event{Time: now, Type: berth.EventWorkerControl, Host: host, Queue: r.Queue, Desired: r.DesiredState,
			Policy: r.StopPolicy, Actor: cmp.Or(actor, r.RequestedBy)}
	}
	events[0].Attempts = stopping
	l.emit(events...)
	return stopping
}

// hostControls returns copies of host's controls, by queue. Loop only.
func (l *lifecycle) hostControls(host string) []*berth.WorkerControl {
	out := make([]*berth.WorkerControl, 0, len(l.controls[host]))
	for _, q := range slices.Sorted(maps.Keys(l.controls[host])) {
		ctl := *l.controls[host][q]
		out = append(out, &ctl)
	}
	return out
}

// WorkerControls returns host's controls as stored, by queue; none is not
// an error. A malformed host returns an ECodeInvalid *berth.Error.
func (c *Controller) WorkerControls(ctx context.Context, host string) ([]*berth.WorkerControl, error) {
	if err := berth.ValidHost("host", host); err != nil {
		return nil, err
	}
	all, err := c.store.WorkerControls(ctx)
	if err != nil {
		return nil, err
	}
	out := []*berth.WorkerControl{}
	for _, ctl := range all {
		if ctl.Host == host {
			out = append(out, ctl)
		}
	}
	return out, nil
}

// loadControls puts the stored controls in the loop's memory, at start.
func (l *lifecycle) loadControls(list []*berth.WorkerControl) {
	for _, ctl := range list {
		if l.controls[ctl.Host] == nil {
			l.controls[ctl.Host] = map[string]*berth.WorkerControl{}
		}
		l.controls[ctl.Host][ctl.Queue] = ctl
	}
}

// pollControls reads the controls back from the store every interval, and
// whenever a store that others write to says they changed, and applies
// those written there by others (plain SQL) since: the safety
// reconciliation behind the controller's own writes.
func (c *Controller) pollControls(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var changed <-chan struct{}
	if w, ok := c.store.(store.ControlWatcher); ok {
		ch, err := w.WatchControls(ctx)
		if err != nil {
			c.log.Warn("cannot watch worker controls; reading them back every interval only", "err", err, "interval", every)
		}
		changed = ch
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case _, ok := <-changed:
			if !ok {
				changed = nil
				continue
			}
		}
		if c.reloadControls(ctx) != nil {
			return
		}
	}
}

// reloadControls reads the controls from the store and applies what others
// changed. It returns an error only when the controller or ctx stopped.
func (c *Controller) reloadControls(ctx context.Context) error {
	var gen uint64
	var written <-chan struct{}
	if err := c.do(ctx, func() { gen, written = c.controlGen, c.durable() }); err != nil {
		return err
	}
	if err := c.awaitDurable(ctx, written); err != nil {
		return err
	}
	list, err := c.store.WorkerControls(ctx)
	if err != nil {
		c.log.Warn("reading worker controls back failed", "err", err)
		return nil
	}
	return c.post(ctx, func() {
		if c.controlGen == gen { // else the loop wrote since the read; the next read sees it
			c.syncControls(list)
		}
	})
}

// syncControls applies every stored control that differs from memory.
// Loop only.
func (c *Controller) syncControls(list []*berth.WorkerControl) {
	changed := map[string][]*berth.WorkerControl{}
	for _, ctl := range list {
		if ctl.Validate() != nil {
			c.log.Warn("ignoring malformed worker control in the store", "host", ctl.Host, "queue", ctl.Queue)
			continue
		}
		if old := c.controls[ctl.Host][ctl.Queue]; old == nil || *old != *ctl {
			if _, ok := stopPolicies[ctl.StopPolicy]; !ok {
				c.log.Warn("worker control has an unknown stop policy; it acts as "+fallbackPolicy,
					"host", ctl.Host, "queue", ctl.Queue, "stop_policy", ctl.StopPolicy)
			}
			changed[ctl.Host] = append(changed[ctl.Host], ctl)
		}
	}
	now := c.now().UTC()
	for _, host := range slices.Sorted(maps.Keys(changed)) {
		c.setControls(changed[host], now, "")
	}
}

// WorkerGone declares the workers of host lost at once, for why: their
// machine is known gone (a rented instance vanished from its provider),
// so their lease is not waited out. Their attempts end lost and their
// jobs are queued again without spending a retry
// (berth.CauseWorkerGone). It returns once that is durable; a host
// without a worker is no error.
func (c *Controller) WorkerGone(ctx context.Context, host, why string) error {
	return c.doDurable(ctx, func() { c.workerGone(host, why) })
}
