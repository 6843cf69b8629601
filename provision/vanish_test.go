package provision

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud"
	"github.com/berth-dev/berth/cloud/vast/vasttest"
	"github.com/berth-dev/berth/store"
	"golang.org/x/crypto/ssh"
)

// onPhase is a store that calls do, once, when it writes an instance of
// machine in phase.
type onPhase struct {
	store.PoolStore
	machine int64
	phase   berth.InstancePhase
	do      func(i *berth.Instance)
	once    sync.Once
}

func (s *onPhase) PutInstance(ctx context.Context, i *berth.Instance) error {
	err := s.PoolStore.PutInstance(ctx, i)
	if err == nil && i.MachineID == s.machine && i.Phase == s.phase {
		s.once.Do(func() { s.do(i) })
	}
	return err
}

// An instance that vanishes from the provider while it is readied, in
// any phase, ends at the next poll — not when the phase's budget runs
// out — as Reconcile ends a running one that vanished: destroyed,
// infra-fatal, its machine's record counting the failure, Gone told; and
// the next offer is tried.
func TestProvisionVanishedWhileReadyingEndsAtOnce(t *testing.T) {
	t.Parallel()
	for _, ph := range []berth.InstancePhase{berth.InstanceCreated, berth.InstanceRunning, berth.InstanceSSH, berth.InstanceGPUChecked} {
		t.Run(string(ph), func(t *testing.T) {
			t.Parallel()
			// The stall keeps the first machine's agent from registering,
			// so that the last phase waits too.
			r := newRig(t, 3, map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultStall})
			var vanishedAt time.Time
			r.p.Store = &onPhase{PoolStore: r.st, machine: vasttest.FirstMachine, phase: ph, do: func(i *berth.Instance) {
				vanishedAt = r.clk.Now()
				r.srv.Vanish(i.ProviderID)
			}}
			gone := r.goneHosts()
			inst, err := r.p.Provision(context.Background(), r.pool)
			if err != nil {
				t.Fatal(err)
			}
			r.checkReady(t, inst, vasttest.FirstMachine+1)
			bad := r.instances(t)[0]
			if bad.MachineID != vasttest.FirstMachine || bad.Phase != berth.InstanceDestroyed || bad.Failure != berth.FailureInfraFatal ||
				!strings.Contains(bad.LastError, "vanished") {
				t.Fatalf("first instance = %+v, want destroyed, infra-fatal, vanished", bad)
			}
			if tl := phases(bad); !slices.Equal(tl[len(tl)-2:], []berth.InstancePhase{ph, berth.InstanceDestroyed}) {
				t.Errorf("timeline %v, want it to end %s, destroyed (nothing left to give back)", tl, ph)
			}
			if d := bad.EndedAt.Sub(vanishedAt); d > r.p.Poll {
				t.Errorf("ended %v after it vanished, want within one poll (%v)", d, r.p.Poll)
			}
			last := bad.Probes[len(bad.Probes)-1]
			if last.Command != showCommand(bad) || last.Class != berth.FailureInfraFatal || !strings.Contains(last.Output, "vanished") {
				t.Errorf("last probe %+v, want the provider's show saying it vanished", last)
			}
			if h := r.host(t, vasttest.FirstMachine); h == nil || h.Failures[berth.FailureInfraFatal] != 1 || cloud.Usable(h, r.clk.Now()) {
				t.Errorf("host record %+v, want the vanish counted infra-fatal, as Reconcile counts it", h)
			}
			if !slices.Equal(gone(), []string{bad.WorkerHost}) {
				t.Errorf("Gone told of %v, want %s", gone(), bad.WorkerHost)
			}
			for _, c := range r.srv.Calls() {
				if c.Endpoint == vasttest.EndpointDestroy && c.Contract == bad.ProviderID {
					t.Errorf("the vanished contract %d was destroyed: nothing was left to destroy", bad.ProviderID)
				}
			}
		})
	}
}

// outageUntil turns the fake's API outage (status) on when the first
// machine's instance is written in phase, and off once the clock has
// gone last past that (never when last is 0).
func outageUntil(r *rig, ph berth.InstancePhase, status int, last time.Duration) {
	var mu sync.Mutex
	var end time.Time
	r.p.Store = &onPhase{PoolStore: r.st, machine: vasttest.FirstMachine, phase: ph, do: func(*berth.Instance) {
		r.srv.Outage(status)
		if last > 0 {
			mu.Lock()
			end = r.clk.Now().Add(last)
			mu.Unlock()
		}
	}}
	sleep := r.p.Sleep
	r.p.Sleep = func(ctx context.Context, d time.Duration) error {
		err := sleep(ctx, d)
		mu.Lock()
		if !end.IsZero() && !r.clk.Now().Before(end) {
			r.srv.Outage(0)
			end = time.Time{}
		}
		mu.Unlock()
		return err
	}
}

// An outage of the provider's API (5xx answers, connections dropped)
// while an instance is readied blames no machine: within the phase's
// budget the wait goes on and the instance becomes ready; past it the
// provisioning ends with FailureUnknown — no quarantine, no host record,
// no next offer rented — and what it could not give back during the
// outage Reconcile gives back afterwards.
func TestProvisionAPIOutageBlamesNoHost(t *testing.T) {
	t.Parallel()
	for _, o := range []struct {
		name   string
		status int
	}{{"503", http.StatusServiceUnavailable}, {"502", http.StatusBadGateway}, {"500", http.StatusInternalServerError}, {"dropped", vasttest.OutageDrop}} {
		t.Run(o.name+"/within-budget", func(t *testing.T) {
			t.Parallel()
			r := newRig(t, 2, nil)
			r.p.Budgets.Running = 2 * time.Minute
			outageUntil(r, berth.InstanceCreated, o.status, time.Minute)
			inst, err := r.p.Provision(context.Background(), r.pool)
			if err != nil {
				t.Fatal(err)
			}
			r.checkReady(t, inst, vasttest.FirstMachine)
			if h := r.host(t, vasttest.FirstMachine); len(h.Failures) != 0 {
				t.Errorf("host record %+v, want no failure counted for the outage", h)
			}
			if !slices.ContainsFunc(inst.Probes, func(p berth.Probe) bool { return p.Class == berth.FailureUnknown }) {
				t.Errorf("probes %+v, want the outage recorded (class unknown)", inst.Probes)
			}
		})
		t.Run(o.name+"/past-budget", func(t *testing.T) {
			t.Parallel()
			r := newRig(t, 2, nil)
			r.p.Budgets.Running = time.Minute
			outageUntil(r, berth.InstanceCreated, o.status, 0)
			ctx := context.Background()
			inst, err := r.p.Provision(ctx, r.pool)
			var f *Failure
			if errors.As(err, &f) || err == nil || inst == nil {
				t.Fatalf("Provision = %+v, %v; want the instance and the error of giving it back during the outage", inst, err)
			}
			is := r.instances(t)
			if len(is) != 1 || is[0].Phase != berth.InstanceFailed || is[0].Failure != berth.FailureUnknown {
				t.Fatalf("instances %+v, want one, failed, class unknown", is)
			}
			if got := r.creates(); len(got) != 1 {
				t.Errorf("creates %v, want one: an outage is no reason to rent another machine", got)
			}
			if h := r.host(t, vasttest.FirstMachine); h != nil {
				t.Errorf("host record %+v, want none: an outage says nothing of the machine", h)
			}
			// Reconcile during the outage changes nothing; after it, it
			// gives the failed instance back.
			if _, err := r.p.Reconcile(ctx, r.pool); err == nil {
				t.Error("Reconcile during the outage: no error")
			}
			r.srv.Outage(0)
			if got, err := r.p.Reconcile(ctx, r.pool); err != nil || len(got) != 0 {
				t.Fatalf("Reconcile after the outage = %v, %v; want nothing vanished", got, err)
			}
			stored, err := r.st.Instance(ctx, is[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			if stored.Phase != berth.InstanceDestroyed || stored.Failure != berth.FailureUnknown || len(r.srv.Live()) != 0 {
				t.Errorf("after the outage: %+v, live %+v; want it given back, class unknown", stored, r.srv.Live())
			}
			if h := r.host(t, vasttest.FirstMachine); h != nil {
				t.Errorf("host record %+v, want none", h)
			}
		})
	}
}

// An outage of the provider's API while Reconcile looks at running
// instances neither takes them for vanished nor blames their machines.
func TestReconcileDuringAnAPIOutage(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, nil)
	ctx := context.Background()
	gone := r.goneHosts()
	inst, err := r.p.Provision(ctx, r.pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusInternalServerError, vasttest.OutageDrop} {
		r.srv.Outage(status)
		if got, err := r.p.Reconcile(ctx, r.pool); err == nil || len(got) != 0 {
			t.Errorf("Reconcile during outage %d = %v, %v; want an error and nothing gone", status, got, err)
		}
	}
	r.srv.Outage(0)
	if got, err := r.p.Reconcile(ctx, r.pool); err != nil || len(got) != 0 {
		t.Fatalf("Reconcile after the outage = %v, %v; want nothing gone", got, err)
	}
	stored, err := r.st.Instance(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Phase != berth.InstanceReady || stored.Failure != "" || len(gone()) != 0 {
		t.Errorf("after the outage: %+v, Gone told of %v; want it ready, untouched", stored, gone())
	}
	if h := r.host(t, inst.MachineID); h == nil || h.Successes != 1 || len(h.Failures) != 0 {
		t.Errorf("host record %+v, want its success alone", h)
	}
}

// The host key pinned at an instance's first SSH connection is kept on
// its record: a server restarted mid-provisioning refuses a machine
// that then shows another key (infra-fatal, the next offer tried), and
// accepts the one pinned.
func TestHostKeyPinSurvivesARestart(t *testing.T) {
	t.Parallel()
	for _, changed := range []bool{false, true} {
		name := "same-key"
		if changed {
			name = "changed-key"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, 2, map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultStall})
			ctx, cancel := context.WithCancel(context.Background())
			r.p.Store = &stopAt{PoolStore: r.st, phase: berth.InstanceSSH, stop: cancel}
			if _, err := r.p.Provision(ctx, r.pool); !errors.Is(err, context.Canceled) {
				t.Fatalf("Provision = %v, want it cancelled", err)
			}
			stored := r.instances(t)[0]
			if stored.Phase != berth.InstanceSSH || !strings.HasPrefix(stored.HostKey, ssh.KeyAlgoED25519+" ") {
				t.Fatalf("stored %+v, want it in phase ssh with the machine's ed25519 host key pinned", stored)
			}
			if changed {
				_, priv, err := ed25519.GenerateKey(rand.Reader)
				if err != nil {
					t.Fatal(err)
				}
				other, err := ssh.NewSignerFromKey(priv)
				if err != nil {
					t.Fatal(err)
				}
				// The record pins a key the machine no longer shows.
				stored.HostKey = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(other.PublicKey())))
				if err := r.st.PutInstance(context.Background(), stored); err != nil {
					t.Fatal(err)
				}
			}
			r.reg.register(t, stored.WorkerHost)
			inst, err := r.provisioner(t).Provision(context.Background(), r.pool) // a restarted server
			if err != nil {
				t.Fatal(err)
			}
			if !changed {
				if inst.ID != stored.ID || inst.HostKey != stored.HostKey {
					t.Errorf("resumed %s with host key %q, want %s with the pinned %q", inst.ID, inst.HostKey, stored.ID, stored.HostKey)
				}
				r.checkReady(t, inst, vasttest.FirstMachine)
				return
			}
			r.checkReady(t, inst, vasttest.FirstMachine+1)
			bad, err := r.st.Instance(context.Background(), stored.ID)
			if err != nil {
				t.Fatal(err)
			}
			if bad.Phase != berth.InstanceDestroyed || bad.Failure != berth.FailureInfraFatal || !strings.Contains(bad.LastError, errHostKeyChanged.Error()) {
				t.Errorf("the resumed instance %+v, want destroyed, infra-fatal, its host key changed", bad)
			}
			if h := r.host(t, vasttest.FirstMachine); h == nil || cloud.Usable(h, r.clk.Now()) {
				t.Errorf("host record %+v, want the machine quarantined", h)
			}
		})
	}
}
