package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// Webhook subscriptions (docs/webhooks.md): unlike the swap webhook of
// seed 000, which Sender fires once, a Dispatcher records every delivery
// durably before trying it and retries it until the receiver answers 2xx.

// Headers of a subscription delivery.
const (
	BerthEventHeader     = "X-Berth-Event"     // the event's type, e.g. job.succeeded
	BerthDeliveryHeader  = "X-Berth-Delivery"  // the delivery's id: the same on every attempt
	BerthSignatureHeader = "X-Berth-Signature" // sha256=<hex HMAC-SHA256 of the raw body>, when the webhook has a secret
)

// Defaults of a Dispatcher.
const (
	// MaxAttempts is how many times a delivery is tried before it fails.
	MaxAttempts = 8
	// AttemptTimeout bounds one attempt, from connecting to reading the
	// answer.
	AttemptTimeout = 10 * time.Second
	// MaxBackoff caps the doubling wait between attempts.
	MaxBackoff = 10 * time.Minute
	// DefaultPoll is how often due deliveries are looked for; new and
	// redelivered ones are tried at once.
	DefaultPoll = time.Second
	// DefaultDeliveriesInFlight bounds the attempts running at once.
	DefaultDeliveriesInFlight = 16
)

// maxErrorText bounds the LastError a delivery records.
const maxErrorText = 1000

// Backoff returns the wait after failed attempt n (1, 2, …) before the
// next: 1 s, doubling, at most MaxBackoff.
func Backoff(n int) time.Duration { return berth.DoublingDelay(n, MaxBackoff) }

// Payload is the JSON body of a delivery.
type Payload struct {
	Event      string      `json:"event"`       // the event's type
	DeliveryID string      `json:"delivery_id"` // as in X-Berth-Delivery
	Time       time.Time   `json:"time"`        // when the event happened
	Data       berth.Event `json:"data"`
}

// Store is where a Dispatcher keeps webhooks and their deliveries; every
// store.Store is one.
type Store = store.WebhookStore

// Events is the stream a Dispatcher reads; *controller.Bus is one.
type Events interface {
	// Counts returns the seq of the newest event, 0 when none, and how
	// many events of each type had been published up to it.
	Counts() (uint64, map[string]uint64)
	// ReadCounting waits until there are events after seq and returns
	// them, with how many were missed (no longer kept) and, when some
	// were, how many events of each type were no longer kept, counted
	// like Counts; it returns ctx's error when ctx ends first.
	ReadCounting(ctx context.Context, after uint64) ([]berth.Event, uint64, map[string]uint64, error)
}

// DispatcherConfig configures a Dispatcher. Store and Events are
// required; the rest have defaults.
type DispatcherConfig struct {
	// Store keeps the webhooks and the delivery log (the server's store).
	Store Store
	// Events is where events are read from (the controller's bus).
	Events Events
	// Client sends the POSTs (default: one on http.DefaultTransport that
	// follows no redirects: a 3xx answer fails the attempt); each attempt
	// is bounded by Timeout besides.
	Client *http.Client
	// Now is the clock deliveries are scheduled by (default time.Now).
	Now func() time.Time
	// Log gets failed attempts and store errors (default: discarded).
	Log *slog.Logger
	// Poll is how often due deliveries are looked for and webhooks are
	// re-read (default DefaultPoll).
	Poll time.Duration
	// MaxAttempts is how many attempts a delivery gets before it fails
	// (default MaxAttempts).
	MaxAttempts int
	// Timeout bounds one attempt (default AttemptTimeout).
	Timeout time.Duration
	// MaxInFlight bounds the attempts running at once (default
	// DefaultDeliveriesInFlight).
	MaxInFlight int
}

// Dispatcher delivers Berth's events to the webhooks subscribed to them.
// For each event read from Events after Start, it durably records one
// pending delivery per matching webhook (AddDeliveries), then POSTs it
// (see Payload and the Berth*Header constants) until the receiver answers
// 2xx, waiting Backoff(n) after failed attempt n, and marks it failed
// after MaxAttempts. Pending deliveries survive a restart: the next
// Dispatcher on the store tries them. Delivery is at least once: an
// attempt whose outcome was not recorded (a crash, a store error) is made
// again. Its methods are safe for concurrent use.
type Dispatcher struct {
	cfg DispatcherConfig
	ids berth.IDGen

	mu       sync.Mutex
	hooks    map[string]*berth.Webhook // cache of the store's, by id; nil: to be read
	inflight map[string]bool           // deliveries being attempted; true: redelivery asked for meanwhile
	started  bool
	stopped  bool

	wake     chan struct{} // nudges the delivery loop
	done     chan string   // ids of finished attempts, for the delivery loop
	stopping chan struct{} // closed by Stop
	loops    sync.WaitGroup
	attempts sync.WaitGroup

	// Attempts made since the Dispatcher was made, by the delivery's state
	// after them (Outcomes).
	delivered, retrying, failed atomic.Uint64

	ctx        context.Context // of store writes and attempts; cancelled when Stop gives up draining
	cancel     context.CancelFunc
	cancelRead context.CancelFunc // ends the wait for events
}

// NewDispatcher returns a Dispatcher configured by cfg, not yet started.
func NewDispatcher(cfg DispatcherConfig) *Dispatcher {
	if cfg.Client == nil {
		cfg.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = MaxAttempts
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = AttemptTimeout
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultDeliveriesInFlight
	}
	return &Dispatcher{cfg: cfg, inflight: map[string]bool{}, wake: make(chan struct{}, 1),
		done: make(chan string, cfg.MaxInFlight), stopping: make(chan struct{})}
}

// Start reads the webhooks, then delivers the events published after
// this call and the deliveries already pending in the store, until Stop.
// It returns an error, starting nothing, when the store cannot be read,
// when Store or Events is missing, or when d was started before.
func (d *Dispatcher) Start(ctx context.Context) error {
	if d.cfg.Store == nil || d.cfg.Events == nil {
		return berth.Errorf(berth.ECodeInternal, "webhook dispatcher: Store and Events are required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return berth.Errorf(berth.ECodeConflict, "webhook dispatcher already started")
	}
	hooks, err := d.cfg.Store.Webhooks(ctx)
	if err != nil {
		return fmt.Errorf("start webhook dispatcher: %w", err)
	}
	d.hooks = byID(hooks)
	d.started = true
	d.ctx, d.cancel = context.WithCancel(context.WithoutCancel(ctx))
	var readCtx context.Context
	readCtx, d.cancelRead = context.WithCancel(d.ctx)
	after, seen := d.cfg.Events.Counts()
	d.loops.Add(2)
	go d.recordLoop(readCtx, after, seen)
	go d.deliverLoop()
	return nil
}

// Stop stops reading events and starting attempts, records the events
// already published, waits for the attempts running to end, and returns.
// When ctx ends first it cancels what is left (an attempt cut short stays
// pending, to be made again by the next Dispatcher) and returns ctx's
// error. Stopping a Dispatcher that is not running, or a nil one, does
// nothing.
func (d *Dispatcher) Stop(ctx context.Context) error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	if !d.started || d.stopped {
		d.mu.Unlock()
		return nil
	}
	d.stopped = true
	d.mu.Unlock()
	d.cancelRead()
	close(d.stopping)
	drained := make(chan struct{})
	go func() {
		d.loops.Wait()
		d.attempts.Wait()
		close(drained)
	}()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = ctx.Err()
		d.cancel()
		<-drained
	}
	d.reapFinished()
	d.cancel()
	return err
}

// Create validates req, makes the webhook (created by by) and stores it,
// after before (when not nil) accepts it: before's error (an audit record
// that could not be written) creates nothing and is returned. Bad input
// is ECodeInvalid naming the field. The webhook gets the events
// published from then on.
func (d *Dispatcher) Create(ctx context.Context, req berth.WebhookRequest, by string, before func(*berth.Webhook) error) (*berth.Webhook, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	now := d.cfg.Now().UTC()
	events := req.Events
	if events == nil {
		events = []string{}
	}
	w := &berth.Webhook{ID: d.ids.New(now), URL: req.URL, Secret: req.Secret, SecretSet: req.Secret != "",
		Events: events, CreatedBy: by, CreatedAt: now}
	if before != nil {
		if err := before(w); err != nil {
			return nil, err
		}
	}
	if err := d.cfg.Store.CreateWebhook(ctx, w); err != nil {
		return nil, err
	}
	d.invalidate()
	return w, nil
}

// Webhooks returns every webhook, oldest first, with its secret (which
// answers must not show: berth.Webhook does not encode it), or the
// store's error.
func (d *Dispatcher) Webhooks(ctx context.Context) ([]*berth.Webhook, error) {
	return d.cfg.Store.Webhooks(ctx)
}

// webhook returns the stored webhook id, or an ECodeNotFound error.
func (d *Dispatcher) webhook(ctx context.Context, id string) (*berth.Webhook, error) {
	hooks, err := d.cfg.Store.Webhooks(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range hooks {
		if w.ID == id {
			return w, nil
		}
	}
	return nil, &berth.Error{Code: berth.ECodeNotFound, Field: "id", Message: fmt.Sprintf("no webhook %s", id)}
}

// Delete deletes webhook id and its delivery log after before (when not
// nil) accepts it; before's error deletes nothing and is returned. An
// unknown id is ECodeNotFound. Attempts already running finish.
func (d *Dispatcher) Delete(ctx context.Context, id string, before func(*berth.Webhook) error) error {
	w, err := d.webhook(ctx, id)
	if err != nil {
		return err
	}
	if before != nil {
		if err := before(w); err != nil {
			return err
		}
	}
	if err := d.cfg.Store.DeleteWebhook(ctx, id); err != nil {
		return err
	}
	d.invalidate()
	return nil
}

// Deliveries returns up to limit (0: all) of webhook webhookID's
// deliveries, newest first; an unknown webhook is ECodeNotFound.
func (d *Dispatcher) Deliveries(ctx context.Context, webhookID string, limit int) ([]*berth.Delivery, error) {
	if _, err := d.webhook(ctx, webhookID); err != nil {
		return nil, err
	}
	return d.cfg.Store.Deliveries(ctx, webhookID, limit)
}

// Delivery returns delivery id; an unknown id is ECodeNotFound.
func (d *Dispatcher) Delivery(ctx context.Context, id string) (*berth.Delivery, error) {
	return d.cfg.Store.Delivery(ctx, id)
}

// Redeliver queues delivery id, in any state, for an attempt now, and
// returns it as queued (pending, due now). The attempt counts like any
// other: a delivery that had used up its attempts gets this one, and
// fails again if it fails. A delivery being attempted right now is
// stored as queued once that attempt ends; the answer shows it queued
// already. An unknown id is ECodeNotFound; a store error is returned.
func (d *Dispatcher) Redeliver(ctx context.Context, id string) (*berth.Delivery, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dl, err := d.cfg.Store.Delivery(ctx, id)
	if err != nil {
		return nil, err
	}
	if _, busy := d.inflight[id]; busy {
		d.inflight[id] = true // the loop stores it queued when the attempt ends
		d.queue(dl)
		return dl, nil
	}
	if err := d.requeue(ctx, dl); err != nil {
		return nil, err
	}
	d.nudge()
	return dl, nil
}

// queue sets dl pending, due now.
func (d *Dispatcher) queue(dl *berth.Delivery) {
	dl.State, dl.NextAttemptAt = berth.DeliveryPending, d.cfg.Now().UTC()
}

// requeue stores dl as pending, due now.
func (d *Dispatcher) requeue(ctx context.Context, dl *berth.Delivery) error {
	d.queue(dl)
	if err := d.cfg.Store.UpdateDelivery(ctx, dl); err != nil {
		return fmt.Errorf("redeliver %s: %w", dl.ID, err)
	}
	return nil
}

// invalidate makes the next event re-read the webhooks.
func (d *Dispatcher) invalidate() {
	d.mu.Lock()
	d.hooks = nil
	d.mu.Unlock()
}

// nudge wakes the delivery loop.
func (d *Dispatcher) nudge() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func byID(hooks []*berth.Webhook) map[string]*berth.Webhook {
	m := make(map[string]*berth.Webhook, len(hooks))
	for _, w := range hooks {
		m[w.ID] = w
	}
	return m
}

// sortedHooks returns hooks' webhooks by id.
func sortedHooks(hooks map[string]*berth.Webhook) []*berth.Webhook {
	list := slices.Collect(maps.Values(hooks))
	slices.SortFunc(list, func(a, b *berth.Webhook) int { return strings.Compare(a.ID, b.ID) })
	return list
}

// cachedWebhooks returns the webhooks, read from the store when the cache
// was invalidated.
func (d *Dispatcher) cachedWebhooks(ctx context.Context) (map[string]*berth.Webhook, error) {
	d.mu.Lock()
	hooks := d.hooks
	d.mu.Unlock()
	if hooks != nil {
		return hooks, nil
	}
	list, err := d.cfg.Store.Webhooks(ctx)
	if err != nil {
		return nil, fmt.Errorf("read webhooks: %w", err)
	}
	hooks = byID(list)
	d.mu.Lock()
	d.hooks = hooks
	d.mu.Unlock()
	return hooks, nil
}

// recordLoop records a delivery of each event after after for each
// webhook it matches, until ctx ends; then it records those already
// published and returns. seen counts, by type, the events up to after.
func (d *Dispatcher) recordLoop(ctx context.Context, after uint64, seen map[string]uint64) {
	defer d.loops.Done()
	for {
		events, missed, evicted, err := d.cfg.Events.ReadCounting(ctx, after)
		if err != nil {
			return // stopped
		}
		if len(events) == 0 {
			continue
		}
		if missed > 0 {
			skipped := map[string]uint64{}
			for typ, n := range evicted {
				if n > seen[typ] {
					skipped[typ] = n - seen[typ]
				}
			}
			d.skipped(after+1, missed, skipped)
			seen = evicted
		}
		for _, e := range events {
			seen[e.Type]++
		}
		if !d.record(ctx, events) {
			return
		}
		after = events[len(events)-1].Seq
	}
}

// skipped reports the missed events first, first+1, … (missed of them,
// skipped of each type), which left the event ring before they were
// read: the events are not kept anywhere the dispatcher can read them
// again (the store keeps them only when it is shared, and then only the
// newest store.KeptEvents), so their deliveries are lost. Each webhook
// that subscribes to some of them gets one error naming it, how many of
// its deliveries were skipped, of which types, and the events' range; a
// webhook they do not concern, or no webhook, gets none.
func (d *Dispatcher) skipped(first, missed uint64, skipped map[string]uint64) {
	last := first + missed - 1
	hooks, err := d.cachedWebhooks(d.ctx)
	if err != nil {
		d.cfg.Log.Error("webhooks: events missed (the dispatcher fell behind the event ring); their deliveries were skipped",
			"first_seq", first, "last_seq", last, "missed", missed, "err", err)
		return
	}
	types := slices.Sorted(maps.Keys(skipped))
	for _, w := range sortedHooks(hooks) {
		var n uint64
		var of []string
		for _, typ := range types {
			if w.Matches(typ) {
				n += skipped[typ]
				of = append(of, fmt.Sprintf("%s=%d", typ, skipped[typ]))
			}
		}
		if n > 0 {
			d.cfg.Log.Error("webhooks: deliveries skipped: the dispatcher fell behind the event ring",
				"webhook", w.ID, "deliveries", n, "types", strings.Join(of, ","), "first_seq", first, "last_seq", last)
		}
	}
}

// record stores the deliveries of events, retrying after store errors
// every Poll. It returns false, having stored what it could, when ctx
// ends while it cannot store them.
func (d *Dispatcher) record(ctx context.Context, events []berth.Event) bool {
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d.cfg.Poll):
			return true
		}
	}
	var ds []*berth.Delivery
	for {
		hooks, err := d.cachedWebhooks(d.ctx)
		if err == nil {
			ds = d.deliveriesOf(events, hooks)
			break
		}
		d.cfg.Log.Error("webhooks: events not recorded yet", "err", err)
		if !pause() {
			return false
		}
	}
	for len(ds) > 0 {
		chunk := ds[:min(len(ds), store.MaxDeliveriesPerAdd)]
		err := d.cfg.Store.AddDeliveries(d.ctx, chunk)
		if err != nil {
			// The write may have committed though it failed (a lost
			// connection): then its first delivery is there.
			if _, e := d.cfg.Store.Delivery(d.ctx, chunk[0].ID); e == nil {
				err = nil
			}
		}
		if err != nil {
			d.cfg.Log.Error("webhooks: deliveries not recorded yet", "deliveries", len(chunk), "err", err)
			if !pause() {
				return false
			}
			continue
		}
		ds = ds[len(chunk):]
		d.nudge()
	}
	return true
}

// deliveriesOf returns a new pending delivery, due now, of each event for
// each webhook it matches.
func (d *Dispatcher) deliveriesOf(events []berth.Event, hooks map[string]*berth.Webhook) []*berth.Delivery {
	if len(hooks) == 0 {
		return nil
	}
	list := sortedHooks(hooks)
	now := d.cfg.Now().UTC()
	var ds []*berth.Delivery
	for _, e := range events {
		for _, w := range list {
			if !w.Matches(e.Type) {
				continue
			}
			id := d.ids.New(now)
			body, err := json.Marshal(Payload{Event: e.Type, DeliveryID: id, Time: e.Time, Data: e})
			if err != nil {
				d.cfg.Log.Error("webhooks: encode event", "seq", e.Seq, "type", e.Type, "err", err)
				continue
			}
			ds = append(ds, &berth.Delivery{ID: id, WebhookID: w.ID, EventSeq: e.Seq, EventType: e.Type, Body: body,
				State: berth.DeliveryPending, NextAttemptAt: now, CreatedAt: now})
		}
	}
	return ds
}

// deliverLoop starts the attempts of due deliveries: at start, every
// Poll, when deliveries are added or redelivered, and when an attempt
// ends, until Stop.
func (d *Dispatcher) deliverLoop() {
	defer d.loops.Done()
	tick := time.NewTicker(d.cfg.Poll)
	defer tick.Stop()
	for {
		d.startDue()
		select {
		case <-d.stopping:
			return
		case <-tick.C:
			d.invalidate() // pick up webhooks other servers changed
		case <-d.wake:
		case id := <-d.done:
			d.finished(id)
		}
	}
}

// finished ends the attempt of delivery id: it is no longer in flight,
// and is queued again if a redelivery was asked for meanwhile. Only the
// delivery loop (or Stop, once it has ended) removes deliveries from the
// flight, between its reads of due deliveries, so that a read never sees
// a delivery between the end of its attempt and the write of the outcome.
func (d *Dispatcher) finished(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	again := d.inflight[id]
	delete(d.inflight, id)
	if !again {
		return
	}
	dl, err := d.cfg.Store.Delivery(d.ctx, id)
	if err == nil {
		err = d.requeue(d.ctx, dl)
	}
	if err != nil && berth.ErrorCode(err) != berth.ECodeNotFound {
		d.cfg.Log.Error("webhooks: redelivery not queued", "delivery", id, "err", err)
	}
}

// reapFinished records the attempts that have ended, without waiting.
func (d *Dispatcher) reapFinished() {
	for {
		select {
		case id := <-d.done:
			d.finished(id)
		default:
			return
		}
	}
}

// startDue starts an attempt of each due delivery not in flight, while
// fewer than MaxInFlight run.
func (d *Dispatcher) startDue() {
	d.reapFinished() // first the attempts that ended meanwhile
	d.mu.Lock()
	running := len(d.inflight)
	d.mu.Unlock()
	if running >= d.cfg.MaxInFlight {
		return
	}
	due, err := d.cfg.Store.DueDeliveries(d.ctx, d.cfg.Now().UTC(), d.cfg.MaxInFlight+running)
	if err != nil {
		if d.ctx.Err() == nil {
			d.cfg.Log.Error("webhooks: read due deliveries", "err", err)
		}
		return
	}
	for _, dl := range due {
		d.mu.Lock()
		_, busy := d.inflight[dl.ID]
		full := len(d.inflight) >= d.cfg.MaxInFlight
		if !busy && !full {
			d.inflight[dl.ID] = false
			d.attempts.Add(1)
		}
		d.mu.Unlock()
		if full {
			return
		}
		if !busy {
			go d.attempt(dl)
		}
	}
}

// attempt POSTs dl once and records the outcome.
func (d *Dispatcher) attempt(dl *berth.Delivery) {
	defer d.attempts.Done()
	defer func() { d.done <- dl.ID }()
	hooks, err := d.cachedWebhooks(d.ctx)
	if err != nil {
		d.cfg.Log.Error("webhooks: delivery not attempted", "delivery", dl.ID, "err", err)
		select { // stays due: try again after a pause, not at once
		case <-d.ctx.Done():
		case <-time.After(d.cfg.Poll):
		}
		return
	}
	w := hooks[dl.WebhookID]
	if w == nil { // perhaps created by another server
		d.invalidate()
		if hooks, err = d.cachedWebhooks(d.ctx); err != nil {
			return
		}
		if w = hooks[dl.WebhookID]; w == nil {
			return // deleted: its deliveries are never due again
		}
	}
	status, err := d.post(w, dl)
	if d.ctx.Err() != nil {
		return // cut short by Stop: stays pending
	}
	now := d.cfg.Now().UTC()
	dl.Attempts++
	dl.LastStatus = status
	switch {
	case err == nil:
		dl.State, dl.LastError, dl.NextAttemptAt, dl.DeliveredAt = berth.DeliveryDelivered, "", time.Time{}, now
		d.delivered.Add(1)
	case dl.Attempts >= d.cfg.MaxAttempts:
		dl.State, dl.LastError, dl.NextAttemptAt = berth.DeliveryFailed, errorText(err), time.Time{}
		d.failed.Add(1)
	default:
		dl.State, dl.LastError, dl.NextAttemptAt = berth.DeliveryPending, errorText(err), now.Add(Backoff(dl.Attempts))
		d.retrying.Add(1)
	}
	if err != nil {
		d.cfg.Log.Warn("webhook delivery failed", "delivery", dl.ID, "webhook", w.ID, "event", dl.EventType,
			"attempt", dl.Attempts, "state", dl.State, "err", err)
	}
	if err := d.cfg.Store.UpdateDelivery(d.ctx, dl); err != nil {
		d.cfg.Log.Error("webhooks: outcome of an attempt not recorded; it will be made again", "delivery", dl.ID, "err", err)
	}
}

// Outcomes counts the delivery attempts made since the Dispatcher was
// made, by outcome: delivered, retrying (failed, to be tried again) and
// failed (the last attempt failed), for /metrics.
func (d *Dispatcher) Outcomes() map[string]uint64 {
	return map[string]uint64{"delivered": d.delivered.Load(), "retrying": d.retrying.Load(), "failed": d.failed.Load()}
}

// post sends dl's body to w and returns the answer's status (0 for none)
// and an error unless it is 2xx.
func (d *Dispatcher) post(w *berth.Webhook, dl *berth.Delivery) (int, error) {
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.Timeout)
	defer cancel()
	header := map[string]string{"User-Agent": "berth-webhook", BerthEventHeader: dl.EventType, BerthDeliveryHeader: dl.ID}
	if w.Secret != "" {
		header[BerthSignatureHeader] = Sign([]byte(w.Secret), dl.Body)
	}
	resp, answer, err := post(ctx, d.cfg.Client, w.URL, dl.Body, header)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode/100 != 2 {
		msg := fmt.Sprintf("answered %s", resp.Status)
		if text := strings.TrimSpace(string(answer)); text != "" {
			msg += ": " + text
		}
		return resp.StatusCode, fmt.Errorf("%s", msg)
	}
	return resp.StatusCode, nil
}

// errorText is err's message, shortened to maxErrorText bytes on a rune
// boundary.
func errorText(err error) string {
	return berth.Clip(strings.ToValidUTF8(err.Error(), "?"), maxErrorText)
}
