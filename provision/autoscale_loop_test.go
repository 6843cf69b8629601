package provision

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud"
	"github.com/berth-dev/berth/cloud/vast"
	"github.com/berth-dev/berth/cloud/vast/vasttest"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
)

// marketRenter stands in for the provisioner over the fake Vast API: it
// stores each instance (creating, with its offer's price) before its
// create, never rents an offer dearer than what the pool's cap leaves,
// and holds each rental until the test makes it ready.
type marketRenter struct {
	t        *testing.T
	provider cloud.Provider
	st       store.PoolStore
	created  chan *berth.Instance // each instance once its contract is stored

	mu    sync.Mutex
	seq   int
	ready map[string]chan struct{}
}

func (m *marketRenter) Provision(ctx context.Context, pool *berth.Pool) (*berth.Instance, error) {
	inst, err := m.provision(ctx, pool)
	if err != nil {
		m.t.Logf("rental: %v", err)
	}
	return inst, err
}

func (m *marketRenter) provision(ctx context.Context, pool *berth.Pool) (*berth.Instance, error) {
	live, err := m.st.Instances(ctx, store.InstanceFilter{Pool: pool.Name, Live: true})
	if err != nil {
		return nil, err
	}
	left := pool.MaxPrice
	for _, i := range live {
		left -= i.PricePerH
	}
	offers, err := m.provider.SearchOffers(ctx, cloud.OfferQuery{GPUName: pool.GPUType, GPUs: pool.GPUs, MaxPricePerHour: left, OrderBy: "dph_total asc", Limit: 8})
	if err != nil {
		return nil, err
	}
	if len(offers) == 0 {
		return nil, fmt.Errorf("no offer under $%.2f/h", left)
	}
	o := offers[0]
	m.mu.Lock()
	m.seq++
	id := fmt.Sprintf("i%d", m.seq)
	ready := make(chan struct{})
	m.ready[id] = ready
	m.mu.Unlock()
	now := time.Now().UTC()
	inst := &berth.Instance{ID: id, Pool: pool.Name, OfferID: o.ID, MachineID: o.MachineID, GPUName: o.GPUName, GPUs: o.NumGPUs,
		PricePerH: o.PricePerHour, Phase: berth.InstanceCreating, CreatedAt: now, Timeline: []berth.PhaseChange{{Phase: berth.InstanceCreating, At: now}}}
	if err := m.st.PutInstance(ctx, inst); err != nil {
		return nil, err
	}
	if inst.ProviderID, err = m.provider.Create(ctx, o.ID, cloud.CreateRequest{Label: "berth-" + id, Image: "img", DiskGB: 16}); err != nil {
		return nil, err
	}
	inst.Phase = berth.InstanceCreated
	if err := m.st.PutInstance(ctx, inst); err != nil {
		return nil, err
	}
	m.created <- inst
	select {
	case <-ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	inst.Phase, inst.WorkerHost, inst.ReadyAt = berth.InstanceReady, "host-"+id, t0
	return inst, m.st.PutInstance(ctx, inst)
}

func (m *marketRenter) Destroy(ctx context.Context, inst *berth.Instance, reason string) error {
	if err := m.provider.Destroy(ctx, inst.ProviderID); err != nil {
		return err
	}
	c := *inst
	c.Phase, c.LastError, c.EndedAt = berth.InstanceDestroyed, reason, time.Now().UTC()
	return m.st.PutInstance(ctx, &c)
}

// idleHosts adds the rented instances' hosts, idle since t0, to the
// controller's view: their agents are not what this test is about.
type idleHosts struct {
	*controller.Controller
	hosts []string
}

func (v *idleHosts) PendingDemand(ctx context.Context, before time.Time) (*controller.PoolView, error) {
	view, err := v.Controller.PendingDemand(ctx, before)
	if err != nil {
		return nil, err
	}
	for _, h := range v.hosts {
		view.Hosts = append(view.Hosts, controller.HostActivity{Host: h, Connected: true})
	}
	return view, nil
}

// TestAutoscalerAgainstTheMarket: a burst of 100 jobs asking for a 4090
// that no worker has rents, one create at a time, never more than the
// pool's max $/h and then never more than its max instances, each
// decision an event; a dry run rents nothing and says so once; once the
// jobs are gone, instances idle past the timeout are given back at the
// marketplace.
func TestAutoscalerAgainstTheMarket(t *testing.T) {
	ctx := t.Context()
	market := vasttest.New(vasttest.Options{Machines: 10})
	t.Cleanup(market.Close)
	ts := httptest.NewServer(market)
	t.Cleanup(ts.Close)
	provider, err := vast.New(vast.Config{URL: ts.URL + vasttest.BasePath, APIKey: vasttest.DefaultAPIKey, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := controller.New(controller.Config{Store: st, Now: func() time.Time { return t0 }})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Stop(sctx)
	})
	pool := pool4090()
	pool.MaxPrice, pool.UpdatedAt = 1.20, t0
	if err := st.PutPool(ctx, pool); err != nil {
		t.Fatal(err)
	}
	spec := berth.DefaultJobSpec()
	spec.Command = berth.Argv{"train"}
	spec.Resources.GPUs, spec.Resources.GPUType = 1, "4090"
	if _, err := c.Submit(ctx, &berth.SubmitRequest{JobSpec: spec, Array: 100}); err != nil {
		t.Fatal(err)
	}

	view := &idleHosts{Controller: c}
	now := t0.Add(time.Minute)
	clock := func() time.Time { return now }

	// A dry run rents nothing and says so once.
	dry := New(Config{Pools: st, View: view, DryRun: true, Now: clock})
	for range 3 {
		if err := dry.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if calls := market.Calls(); len(calls) != 0 {
		t.Fatalf("a dry run sent %d creates or destroys", len(calls))
	}
	if ev := poolEvents(t, c, berth.EventPoolScaleUp); len(ev) != 1 || !strings.HasPrefix(ev[0].Reason, "dry run: would be renting 1") ||
		!strings.Contains(ev[0].Reason, "100 waiting jobs want 100 instances") {
		t.Fatalf("dry run scale-ups = %+v; want one saying what it would rent", ev)
	}

	renter := &marketRenter{t: t, provider: provider, st: st, created: make(chan *berth.Instance, 16), ready: map[string]chan struct{}{}}
	a := New(Config{Pools: st, View: view, Renter: renter, Now: clock})
	t.Cleanup(a.Wait)
	var live []*berth.Instance
	tick := func() {
		t.Helper()
		before := renter.seq
		if err := a.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		started := a.renting[pool.Name] - len(live)
		a.mu.Unlock()
		for range started {
			select {
			case inst := <-renter.created:
				live = append(live, inst)
			case <-time.After(10 * time.Second):
				t.Fatalf("a rental started (%d before) but stored no contract", before)
			}
		}
		spend := 0.0
		for _, in := range market.Live() {
			for _, i := range live {
				if i.ProviderID == in.ID {
					spend += i.PricePerH
				}
			}
		}
		if n := len(market.Live()); n > pool.MaxInstances || spend > pool.MaxPrice+1e-9 {
			t.Fatalf("%d instances at $%.2f/h live at the marketplace; caps %d and $%.2f/h", n, spend, pool.MaxInstances, pool.MaxPrice)
		}
	}
	for range 6 {
		tick()
	}
	// $0.30 + $0.35 + $0.40 leaves $0.15 under $1.20, less than any offer.
	if len(live) != 3 || len(market.Live()) != 3 {
		t.Fatalf("rented %d (%d live at the marketplace) under $1.20/h; want 3", len(live), len(market.Live()))
	}
	if ev := poolEvents(t, c, berth.EventPoolCapped); len(ev) != 1 || !strings.Contains(ev[0].Reason, "max $1.20/h reached") {
		t.Fatalf("capped events = %+v; want one, at max $/h", ev)
	}

	pool.MaxPrice, pool.UpdatedAt = 10, t0.Add(time.Second)
	if err := st.PutPool(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		tick()
	}
	if len(live) != 4 || len(market.Live()) != 4 {
		t.Fatalf("rented %d (%d live) with max instances 4; want 4", len(live), len(market.Live()))
	}
	capped := poolEvents(t, c, berth.EventPoolCapped)
	if len(capped) != 2 || !strings.Contains(capped[1].Reason, "max instances 4 reached (4 live)") {
		t.Fatalf("capped events = %+v; want a second, at max instances", capped)
	}
	if ups := poolEvents(t, c, berth.EventPoolScaleUp); len(ups) != 5 { // the dry run's and 4
		t.Fatalf("%d scale-up events; want 5", len(ups))
	}

	// The jobs go; the instances become ready and idle; past the idle
	// timeout they are given back.
	if _, err := c.CancelMatching(ctx, berth.CancelRequest{Queue: berth.DefaultQueue}); err != nil {
		t.Fatal(err)
	}
	renter.mu.Lock()
	for id, ch := range renter.ready {
		close(ch)
		view.hosts = append(view.hosts, "host-"+id)
	}
	renter.mu.Unlock()
	a.Wait() // the rentals end once ready
	tick()
	if len(market.Live()) != 4 {
		t.Fatalf("%d live before the idle timeout; want 4", len(market.Live()))
	}
	now = now.Add(10 * time.Minute)
	tick()
	a.Wait()
	if n := len(market.Live()); n != 0 {
		t.Fatalf("%d instances live at the marketplace after the idle timeout; want none", n)
	}
	downs := poolEvents(t, c, berth.EventPoolScaleDown)
	if len(downs) != 4 || !strings.Contains(downs[0].Reason, "idle for") || downs[0].Instance == "" {
		t.Fatalf("scale-down events = %+v; want 4 saying how long each was idle", downs)
	}
	stored, err := st.Instances(ctx, store.InstanceFilter{Pool: pool.Name, Live: true})
	if err != nil || len(stored) != 0 {
		t.Fatalf("live instances stored = %d, %v; want none", len(stored), err)
	}
}

// poolEvents returns the events of type typ published so far.
func poolEvents(t *testing.T, c *controller.Controller, typ string) []berth.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if c.Bus().Last() == 0 {
		return nil
	}
	events, _, err := c.Bus().Read(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []berth.Event
	for _, e := range events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// countingRenter counts its rentals, each of which ends at once.
type countingRenter struct {
	mu    sync.Mutex
	pools []string
}

func (r *countingRenter) Provision(_ context.Context, pool *berth.Pool) (*berth.Instance, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pools = append(r.pools, pool.Name)
	return nil, fmt.Errorf("resumed nothing")
}

func (r *countingRenter) Destroy(context.Context, *berth.Instance, string) error { return nil }

// noDemand is a controller with nothing waiting and no host.
type noDemand struct{}

func (noDemand) PendingDemand(context.Context, time.Time) (*controller.PoolView, error) {
	return &controller.PoolView{}, nil
}
func (noDemand) RecordPoolEvent(context.Context, berth.Event) error { return nil }

// TestAdoptResumesOnce: the instances found part way at start are
// resumed by one rental each on the first tick, and only then; a ready
// one is not.
func TestAdoptResumesOnce(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutPool(ctx, pool4090()); err != nil {
		t.Fatal(err)
	}
	for _, in := range []*berth.Instance{inst("i1", berth.InstanceSSH, 0.3, ""), inst("i2", berth.InstanceCreating, 0.3, ""),
		inst("i3", berth.InstanceReady, 0.3, "h3")} {
		if err := st.PutInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	r := &countingRenter{}
	a := New(Config{Pools: st, View: noDemand{}, Renter: r, Now: func() time.Time { return t0 }})
	if err := a.Adopt(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := a.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		a.Wait()
	}
	if strings.Join(r.pools, ",") != "rent,rent" {
		t.Fatalf("rentals = %v; want two for pool rent (its two instances part way), once", r.pools)
	}
}

// waiting is a controller where one 4090 job has waited a minute.
type waiting struct{ noDemand }

func (waiting) PendingDemand(context.Context, time.Time) (*controller.PoolView, error) {
	return &controller.PoolView{Demand: []controller.Demand{wants(1, "4090", 1)}}, nil
}

// After a rental fails the pool waits before it rents again, longer
// after each failure in a row.
func TestFailedRentalsBackOff(t *testing.T) {
	now := t0
	r := &countingRenter{}
	a := New(Config{Pools: staticPools{pool4090()}, View: waiting{}, Renter: r, Now: func() time.Time { return now }})
	rentals := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.pools)
	}
	tickAt := func(at time.Duration) {
		t.Helper()
		now = t0.Add(at)
		if err := a.Tick(t.Context()); err != nil {
			t.Fatal(err)
		}
		a.Wait()
	}
	for _, step := range []struct {
		at   time.Duration
		want int
	}{{0, 1}, {500 * time.Millisecond, 1}, {time.Second, 2}, {2 * time.Second, 2}, {3 * time.Second, 3}, {6 * time.Second, 3}, {7 * time.Second, 4}} {
		tickAt(step.at)
		if got := rentals(); got != step.want {
			t.Fatalf("at +%s: %d rentals; want %d", step.at, got, step.want)
		}
	}
}
