package provision

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud"
	"github.com/berth-dev/berth/cloud/vast"
	"github.com/berth-dev/berth/cloud/vast/vasttest"
	"github.com/berth-dev/berth/internal/fakeclock"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
	"golang.org/x/crypto/ssh"
)

// rig is a provisioner against the fake Vast API (vasttest) whose
// machines are real (vasttest.SSHHost: a real sshd per instance, fake
// nvidia-smi and libcuda, onstart run as a real process), with a real
// SQLite store and a fake clock that the provisioner's waits advance (no
// real sleeps). An instance's onstart "registers" its agent by writing a
// file named for its host in the registry directory.
type rig struct {
	srv  *vasttest.Server
	vast *vast.Client
	st   *sqlite.Store
	clk  *fakeclock.Clock
	reg  *testRegistry
	pool *berth.Pool
	p    *Provisioner
	data string
}

func newRig(t *testing.T, machines int, faults map[int64]vasttest.Fault, opts ...vasttest.SSHHostOption) *rig {
	t.Helper()
	if _, err := os.Stat(vasttest.SSHD); err != nil {
		t.Skipf("needs OpenSSH's sshd at %s (apt-get install openssh-server; .ci/run installs it): %v", vasttest.SSHD, err)
	}
	ctx := context.Background()
	r := &rig{clk: fakeclock.New(time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)), reg: &testRegistry{dir: t.TempDir()}, data: t.TempDir()}
	host, err := vasttest.NewSSHHost(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	r.srv = vasttest.New(vasttest.Options{Machines: machines, Faults: faults, Host: host,
		Clock: r.clk.Now, Stage: 5 * time.Second, VanishAfter: time.Hour})
	ts := httptest.NewServer(r.srv)
	t.Cleanup(func() { ts.Close(); r.srv.Close() })
	r.vast, err = vast.New(vast.Config{URL: ts.URL + vasttest.BasePath, APIKey: vasttest.DefaultAPIKey, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.st, err = sqlite.Open(ctx, filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.st.Close() })
	r.pool = &berth.Pool{Name: "rent", Provider: "vast", GPUType: vasttest.DefaultGPUName, GPUs: 1, MaxInstances: 4, MaxPrice: 5,
		Strictness: berth.StrictnessBalanced, Image: "vllm/vllm-openai:latest", APIKey: vasttest.DefaultAPIKey}
	if err := r.st.PutPool(ctx, r.pool); err != nil {
		t.Fatal(err)
	}
	r.p = r.provisioner(t)
	return r
}

// provisioner returns a Provisioner of the rig, as a freshly started
// server would make it.
func (r *rig) provisioner(t *testing.T) *Provisioner {
	t.Helper()
	signer, err := EnsureSSHKey(context.Background(), r.data, r.vast)
	if err != nil {
		t.Fatal(err)
	}
	return &Provisioner{Provider: r.vast, Store: r.st, Signer: signer, Registry: r.reg,
		Request: func(pool *berth.Pool, inst *berth.Instance) cloud.CreateRequest {
			return cloud.CreateRequest{Image: pool.Image, DiskGB: 32, Env: map[string]string{"BERTH_HOST": inst.WorkerHost},
				Onstart: "touch " + filepath.Join(r.reg.dir, inst.WorkerHost)}
		},
		Secrets: []string{vasttest.DefaultGPUs.Driver}, Poll: 5 * time.Second, DialTimeout: 5 * time.Second,
		Now: r.clk.Now, Sleep: func(ctx context.Context, d time.Duration) error { r.clk.Advance(d); return ctx.Err() }}
}

// instances returns the pool's instance records, oldest first.
func (r *rig) instances(t *testing.T) []*berth.Instance {
	t.Helper()
	is, err := r.st.Instances(context.Background(), store.InstanceFilter{Pool: r.pool.Name})
	if err != nil {
		t.Fatal(err)
	}
	return is
}

// host returns machine's record (nil: none).
// goneHosts has r's provisioner record the worker host of each instance
// its Gone hook is told of; the function returned gives them so far.
func (r *rig) goneHosts() func() []string {
	var mu sync.Mutex
	var hosts []string
	r.p.Gone = func(inst *berth.Instance) {
		mu.Lock()
		defer mu.Unlock()
		hosts = append(hosts, inst.WorkerHost)
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(hosts)
	}
}

func (r *rig) host(t *testing.T, machine int64) *berth.HostRecord {
	t.Helper()
	hs, err := r.st.Hosts(context.Background(), "vast")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.MachineID == machine {
			return h
		}
	}
	return nil
}

// creates returns the offers of the creates the fake was sent.
func (r *rig) creates() []int64 {
	var offers []int64
	for _, c := range r.srv.Calls() {
		if c.Endpoint == vasttest.EndpointCreate {
			offers = append(offers, c.Offer)
		}
	}
	return offers
}

func phases(inst *berth.Instance) []berth.InstancePhase {
	var ps []berth.InstancePhase
	for _, c := range inst.Timeline {
		ps = append(ps, c.Phase)
	}
	return ps
}

var toReady = []berth.InstancePhase{berth.InstanceCreating, berth.InstanceCreated, berth.InstanceRunning, berth.InstanceSSH,
	berth.InstanceGPUChecked, berth.InstanceReady}

var failedOut = []berth.InstancePhase{berth.InstanceFailed, berth.InstanceDestroyed}

// checkReady checks that inst is the stored ready instance on machine.
func (r *rig) checkReady(t *testing.T, inst *berth.Instance, machine int64) {
	t.Helper()
	if inst == nil || inst.Phase != berth.InstanceReady || inst.MachineID != machine {
		t.Fatalf("instance = %+v, want ready on machine %d", inst, machine)
	}
	stored, err := r.st.Instance(context.Background(), inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := phases(stored); !slices.Equal(got, toReady) {
		t.Errorf("stored timeline = %v, want %v", got, toReady)
	}
	if h := r.host(t, machine); h == nil || h.Successes != 1 {
		t.Errorf("host record of machine %d = %+v, want one success", machine, h)
	}
	live := r.srv.Live()
	if len(live) != 1 || live[0].ID != inst.ProviderID || live[0].Payload.Label != Label(inst.ID) {
		t.Errorf("live at the provider = %+v, want only contract %d labelled %s", live, inst.ProviderID, Label(inst.ID))
	}
}

func TestProvisionHappyPath(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, nil)
	inst, err := r.p.Provision(context.Background(), r.pool)
	if err != nil {
		t.Fatal(err)
	}
	r.checkReady(t, inst, vasttest.FirstMachine)
	if got := r.creates(); len(got) != 1 {
		t.Errorf("creates = %v, want one", got)
	}
	if inst.WorkerHost != Label(inst.ID) {
		t.Errorf("worker host %q not the registered label", inst.WorkerHost)
	}
	var gpu *berth.Probe
	for i := range inst.Probes {
		if inst.Probes[i].Phase == berth.InstanceSSH && inst.Probes[i].Command == DefaultGPUCheck {
			gpu = &inst.Probes[i]
		}
	}
	switch {
	case gpu == nil:
		t.Fatalf("no GPU check among the probes %+v", inst.Probes)
	case gpu.ExitCode == nil || *gpu.ExitCode != 0 || gpu.Class != "":
		t.Errorf("GPU probe = %+v, want exit 0, passed", gpu)
	case !strings.Contains(gpu.Output, "NVIDIA GeForce RTX 4090, ***, 24564 MiB"):
		t.Errorf("GPU probe output %q: want nvidia-smi's line with the secret redacted", gpu.Output)
	}
	// The host record has the offer's driver version.
	offers, err := r.vast.SearchOffers(context.Background(), cloud.Query(r.pool, r.pool.MaxPrice, nil))
	if err != nil || len(offers) == 0 || offers[0].DriverVersion == "" {
		t.Fatalf("offers %+v, %v: want one with a driver version", offers, err)
	}
	if h := r.host(t, inst.MachineID); h == nil || h.Driver != offers[0].DriverVersion {
		t.Errorf("host record %+v, want driver %q from the offer", h, offers[0].DriverVersion)
	}
	// The SSH key: created once, 0600, registered with the account.
	fi, err := os.Stat(filepath.Join(r.data, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, %v; want mode 0600", fi, err)
	}
	_, pub, err := LoadOrCreateKey(r.data)
	if err != nil {
		t.Fatal(err)
	}
	if keys := r.srv.Keys(); len(keys) != 1 || !strings.HasPrefix(pub, strings.Join(strings.Fields(keys[0])[:2], " ")) {
		t.Errorf("account keys = %q, want only %q", keys, pub)
	}
}

// checkFailedOver checks that the first instance ended on machine 1001
// with class, destroyed and the machine quarantined, and that the second
// is ready on machine 1002.
func (r *rig) checkFailedOver(t *testing.T, inst *berth.Instance, err error, class string) *berth.Instance {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	r.checkReady(t, inst, vasttest.FirstMachine+1)
	is := r.instances(t)
	if len(is) != 2 {
		t.Fatalf("instances = %d, want 2", len(is))
	}
	bad := is[0]
	if bad.MachineID != vasttest.FirstMachine || bad.Phase != berth.InstanceDestroyed || bad.Failure != class || bad.LastError == "" {
		t.Errorf("first instance = %+v, want destroyed on machine %d with %s", bad, vasttest.FirstMachine, class)
	}
	if tl := phases(bad); !slices.Equal(tl[len(tl)-2:], failedOut) {
		t.Errorf("first instance's timeline = %v, want it to end failed, destroyed", tl)
	}
	h := r.host(t, vasttest.FirstMachine)
	if h == nil || h.Failures[class] != 1 || (class == berth.FailureInfraFatal) == cloud.Usable(h, r.clk.Now()) {
		t.Errorf("host record of machine %d = %+v, want one %s failure (quarantined when infra-fatal)", vasttest.FirstMachine, h, class)
	}
	if got, want := r.creates(), []int64{vasttest.OfferBase + vasttest.FirstMachine, vasttest.OfferBase + vasttest.FirstMachine + 1}; !slices.Equal(got, want) {
		t.Errorf("creates on offers %v, want %v (the failed machine never again)", got, want)
	}
	return bad
}

func TestProvisionCDIIsInfraFatal(t *testing.T) {
	t.Parallel()
	r := newRig(t, 3, map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultCDI})
	inst, err := r.p.Provision(context.Background(), r.pool)
	bad := r.checkFailedOver(t, inst, err, berth.FailureInfraFatal)
	if tl := phases(bad); slices.Contains(tl, berth.InstanceRunning) {
		t.Errorf("timeline %v: a CDI failure never runs", tl)
	}
	last := bad.Probes[len(bad.Probes)-1]
	if last.Class != berth.FailureInfraFatal || !strings.Contains(last.Output, "unresolvable CDI devices") {
		t.Errorf("last probe = %+v, want the CDI status_msg, infra-fatal", last)
	}
	// Failing at once: well within the container's budget.
	if d := bad.EndedAt.Sub(bad.CreatedAt); d > time.Minute {
		t.Errorf("the CDI instance lasted %v, want it failed at the first sight of the status_msg", d)
	}
}

func TestProvisionSSHKeyRefusedOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t, 3, map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultSSHKey})
	gone := r.goneHosts() // its onstart ran: its agent may have joined and taken work
	inst, err := r.p.Provision(context.Background(), r.pool)
	bad := r.checkFailedOver(t, inst, err, berth.FailureInfraFatal)
	if g := gone(); len(g) != 1 || g[0] != bad.WorkerHost {
		t.Errorf("Gone told of %v, want the failed instance's host %s", gone(), bad.WorkerHost)
	}
	var ssh []berth.Probe
	for _, pr := range bad.Probes {
		if strings.HasPrefix(pr.Command, "ssh ") {
			ssh = append(ssh, pr)
		}
	}
	if len(ssh) != 1 || ssh[0].Class != berth.FailureInfraFatal || !strings.Contains(ssh[0].Output, "unable to authenticate") {
		t.Errorf("SSH probes = %+v, want exactly one, refused, infra-fatal", ssh)
	}
	if d := bad.EndedAt.Sub(bad.Timeline[2].At); d != 0 {
		t.Errorf("destroyed %v after running, want within the first probe (no wait)", d)
	}
}

func TestProvisionNoLibcudaIsInfraFatal(t *testing.T) {
	t.Parallel()
	r := newRig(t, 3, map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultNoLibcuda})
	inst, err := r.p.Provision(context.Background(), r.pool)
	bad := r.checkFailedOver(t, inst, err, berth.FailureInfraFatal)
	last := bad.Probes[len(bad.Probes)-1]
	if last.Command != DefaultGPUCheck || last.ExitCode == nil || *last.ExitCode != 1 || !strings.Contains(last.Output, "libcuda.so cannot found") {
		t.Errorf("last probe = %+v, want the GPU check failing on libcuda", last)
	}
	echo := bad.Probes[len(bad.Probes)-2]
	if echo.Command != EchoProbe || echo.Class != "" {
		t.Errorf("probe before the GPU check = %+v, want the echo probe, passed", echo)
	}
}

func TestProvisionStallExhaustsBudget(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultStall})
	r.p.Budgets.Ready = 3 * time.Minute
	inst, err := r.p.Provision(context.Background(), r.pool)
	var f *Failure
	if !errors.As(err, &f) || f.Class != berth.FailureWarmup {
		t.Fatalf("Provision = %v, want a warm-up failure", err)
	}
	if inst == nil || inst.Phase != berth.InstanceDestroyed || inst.Failure != berth.FailureWarmup {
		t.Fatalf("instance = %+v, want destroyed after warm-up", inst)
	}
	tl := inst.Timeline
	if got := phases(inst); !slices.Equal(got, append(slices.Clone(toReady[:5]), failedOut...)) {
		t.Errorf("timeline = %v", got)
	}
	if d := tl[len(tl)-1].At.Sub(tl[4].At); d < 3*time.Minute || d > 3*time.Minute+10*time.Second {
		t.Errorf("warm-up lasted %v, want its 3m budget", d)
	}
	if h := r.host(t, vasttest.FirstMachine); h == nil || !cloud.Usable(h, r.clk.Now()) {
		t.Errorf("host record %+v: a warm-up failure does not quarantine", h)
	}
	if len(r.srv.Live()) != 0 || len(r.creates()) != 1 {
		t.Errorf("live %v, creates %v: want nothing billed, one create", r.srv.Live(), r.creates())
	}
}

func TestProvisionRefusedContractIsDestroyed(t *testing.T) {
	t.Parallel()
	r := newRig(t, 3, map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultRefused})
	inst, err := r.p.Provision(context.Background(), r.pool)
	bad := r.checkFailedOver(t, inst, err, berth.FailureInfraFatal)
	var destroyed bool
	for _, c := range r.srv.Calls() {
		destroyed = destroyed || c.Endpoint == vasttest.EndpointDestroy && c.Contract == bad.ProviderID
	}
	if bad.ProviderID == 0 || !destroyed {
		t.Errorf("the refused create's contract %d was not destroyed (calls %+v)", bad.ProviderID, r.srv.Calls())
	}
}

// lostAnswer is a provider whose creates are made but whose answers are
// lost, once.
type lostAnswer struct {
	cloud.Provider
	once sync.Once
}

func (l *lostAnswer) Create(ctx context.Context, offer int64, req cloud.CreateRequest) (int64, error) {
	c, err := l.Provider.Create(ctx, offer, req)
	lost := false
	l.once.Do(func() { lost = true })
	if err == nil && lost {
		return 0, errors.New("read tcp 127.0.0.1:1234: connection reset by peer")
	}
	return c, err
}

func TestProvisionLostCreateAnswerIsFoundByLabel(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, nil)
	r.p.Provider = &lostAnswer{Provider: r.vast}
	inst, err := r.p.Provision(context.Background(), r.pool)
	if err != nil {
		t.Fatal(err)
	}
	r.checkReady(t, inst, vasttest.FirstMachine)
	if got := r.creates(); len(got) != 1 {
		t.Errorf("creates = %v, want one: a lost answer is looked up, never created again", got)
	}
}

// stopAt is a store whose server stops (its context is cancelled) once
// it has written an instance in phase.
type stopAt struct {
	store.PoolStore
	phase berth.InstancePhase
	stop  context.CancelFunc
}

func (s *stopAt) PutInstance(ctx context.Context, i *berth.Instance) error {
	err := s.PoolStore.PutInstance(ctx, i)
	if i.Phase == s.phase {
		s.stop()
	}
	return err
}

func TestProvisionRestartAdoptsWithoutDuplicating(t *testing.T) {
	t.Parallel()
	for _, stop := range []berth.InstancePhase{berth.InstanceCreated, berth.InstanceRunning, berth.InstanceSSH, berth.InstanceGPUChecked} {
		t.Run(string(stop), func(t *testing.T) {
			t.Parallel()
			r := newRig(t, 2, map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultStall})
			ctx, cancel := context.WithCancel(context.Background())
			r.p.Store = &stopAt{PoolStore: r.st, phase: stop, stop: cancel} // the server stops once it wrote stop
			if _, err := r.p.Provision(ctx, r.pool); !errors.Is(err, context.Canceled) {
				t.Fatalf("Provision = %v, want it cancelled", err)
			}
			is := r.instances(t)
			if len(is) != 1 || is[0].Phase != stop {
				t.Fatalf("after the stop: %d instances, want one, %s", len(is), stop)
			}
			r.reg.register(t, is[0].WorkerHost) // its agent registers meanwhile
			inst, err := r.provisioner(t).Provision(context.Background(), r.pool)
			if err != nil {
				t.Fatal(err)
			}
			if inst.ID != is[0].ID {
				t.Errorf("the restarted server drove %s, want %s adopted", inst.ID, is[0].ID)
			}
			r.checkReady(t, inst, vasttest.FirstMachine)
			if got := r.creates(); len(got) != 1 {
				t.Errorf("creates = %v, want one", got)
			}
		})
	}
}

func TestProvisionRestartWhileCreatingAdoptsByLabel(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, nil)
	ctx := context.Background()
	// A server wrote the record, sent the create, and stopped before the
	// answer came.
	now := r.clk.Now()
	inst := &berth.Instance{ID: "01JZZZZZZZZZZZZZZZZZZZZZZZ", Pool: r.pool.Name, OfferID: vasttest.OfferBase + vasttest.FirstMachine,
		MachineID: vasttest.FirstMachine, GPUs: 1, PricePerH: 0.3, Phase: berth.InstanceCreating, WorkerHost: Label("01JZZZZZZZZZZZZZZZZZZZZZZZ"),
		Timeline: []berth.PhaseChange{{Phase: berth.InstanceCreating, At: now}}, CreatedAt: now}
	if err := r.st.PutInstance(ctx, inst); err != nil {
		t.Fatal(err)
	}
	req := cloud.CreateRequest{Image: r.pool.Image, DiskGB: 32, Label: Label(inst.ID), Env: map[string]string{"BERTH_HOST": inst.WorkerHost},
		Onstart: "touch " + filepath.Join(r.reg.dir, inst.WorkerHost)}
	if _, err := r.vast.Create(ctx, inst.OfferID, req); err != nil {
		t.Fatal(err)
	}
	got, err := r.p.Provision(ctx, r.pool)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != inst.ID {
		t.Errorf("Provision drove %s, want %s adopted by its label", got.ID, inst.ID)
	}
	r.checkReady(t, got, vasttest.FirstMachine)
	if got := r.creates(); len(got) != 1 {
		t.Errorf("creates = %v, want one", got)
	}
}

func TestReconcileVanished(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, nil)
	ctx := context.Background()
	gone := r.goneHosts()
	inst, err := r.p.Provision(ctx, r.pool)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.p.Reconcile(ctx, r.pool); err != nil || len(got) != 0 {
		t.Fatalf("Reconcile = %v, %v; want nothing gone", got, err)
	}
	r.srv.Vanish(inst.ProviderID)
	got, err := r.p.Reconcile(ctx, r.pool)
	if err != nil || len(got) != 1 || got[0].ID != inst.ID {
		t.Fatalf("Reconcile = %v, %v; want %s gone", got, err, inst.ID)
	}
	stored, err := r.st.Instance(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Phase != berth.InstanceDestroyed || stored.Failure != berth.FailureInfraFatal || !strings.Contains(stored.LastError, "vanished") {
		t.Errorf("stored = %+v, want destroyed, vanished", stored)
	}
	if !slices.Equal(gone(), []string{inst.WorkerHost}) {
		t.Errorf("Gone told of %v, want %s", gone(), inst.WorkerHost)
	}
	if h := r.host(t, inst.MachineID); h == nil || h.Failures[berth.FailureInfraFatal] != 1 {
		t.Errorf("host record %+v, want the vanish counted", h)
	}
}

// testRegistry is the server's side of registration: a host's agent has
// registered once the file dir/host exists.
type testRegistry struct{ dir string }

// Registered reports whether host's agent registered.
func (r *testRegistry) Registered(host string) bool {
	_, err := os.Stat(filepath.Join(r.dir, host))
	return err == nil
}

// register registers host's agent.
func (r *testRegistry) register(t *testing.T, host string) {
	if err := os.WriteFile(filepath.Join(r.dir, host), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestProvisionPreserveOnFailureKeepsTheFailedInstance(t *testing.T) {
	t.Parallel()
	r := newRig(t, 3, map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultCDI})
	r.pool.PreserveOnFailure = true
	inst, err := r.p.Provision(context.Background(), r.pool)
	if err != nil {
		t.Fatal(err)
	}
	if inst.MachineID != vasttest.FirstMachine+1 || inst.Phase != berth.InstanceReady {
		t.Fatalf("instance = %+v, want ready on the next machine", inst)
	}
	bad := r.instances(t)[0]
	if bad.Phase != berth.InstanceFailed || bad.Failure != berth.FailureInfraFatal || !bad.Live() {
		t.Errorf("failed instance = %+v, want kept failed, infra-fatal", bad)
	}
	if live := r.srv.Live(); len(live) != 2 {
		t.Errorf("live at the provider = %+v, want the preserved one and the ready one", live)
	}
	if h := r.host(t, vasttest.FirstMachine); h == nil || cloud.Usable(h, r.clk.Now()) {
		t.Errorf("host record %+v, want quarantined all the same", h)
	}
}

func TestHostKeyPinnedAtFirstSight(t *testing.T) {
	t.Parallel()
	key := func() ssh.PublicKey {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		return s.PublicKey()
	}
	a, b := key(), key()
	i1, i2 := &berth.Instance{ID: "i1"}, &berth.Instance{ID: "i2"}
	cb := hostKeyCallback(i1)
	if err := cb("h", nil, a); err != nil {
		t.Fatalf("first sight: %v", err)
	}
	if want := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(a))); i1.HostKey != want {
		t.Errorf("pinned %q, want %q on the instance", i1.HostKey, want)
	}
	if err := cb("h", nil, a); err != nil {
		t.Errorf("the pinned key again: %v", err)
	}
	if err := cb("h", nil, b); !errors.Is(err, errHostKeyChanged) || classifySSH(err) != berth.FailureInfraFatal {
		t.Errorf("another key: %v, want errHostKeyChanged, infra-fatal", err)
	}
	if err := hostKeyCallback(i2)("h", nil, b); err != nil {
		t.Errorf("another instance's first key: %v", err)
	}
	// The pin is the instance's: a callback made afresh (a restarted
	// server, the record read back) refuses another key all the same.
	again := *i1
	if err := hostKeyCallback(&again)("h", nil, b); !errors.Is(err, errHostKeyChanged) {
		t.Errorf("another key after a restart: %v, want errHostKeyChanged", err)
	}
}

func TestLoadOrCreateKeyOnce(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	s1, pub1, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	s2, pub2, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if pub1 != pub2 || string(s1.PublicKey().Marshal()) != string(s2.PublicKey().Marshal()) || s1.PublicKey().Type() != ssh.KeyAlgoED25519 {
		t.Errorf("keys %q then %q: want one ed25519 key, kept", pub1, pub2)
	}
	if err := os.WriteFile(filepath.Join(dir, KeyFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateKey(dir); err == nil || !strings.Contains(err.Error(), KeyFile) {
		t.Errorf("a broken key file: %v, want an error naming it", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, KeyFile)); string(b) != "garbage" {
		t.Error("a broken key file was replaced")
	}
}

func TestProvisionRequestRefusedStopsAtOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t, 3, nil)
	request := r.p.Request
	r.p.Request = func(pool *berth.Pool, inst *berth.Instance) cloud.CreateRequest {
		req := request(pool, inst)
		req.DiskGB = 1 // the fake refuses it: 400 invalid_args
		return req
	}
	inst, err := r.p.Provision(context.Background(), r.pool)
	var ce *cloud.CreateError
	if inst != nil || !errors.As(err, &ce) || ce.Code != "invalid_args" {
		t.Fatalf("Provision = %+v, %v; want the create's refusal", inst, err)
	}
	if got := r.creates(); len(got) != 1 {
		t.Errorf("creates = %v, want one: every offer would refuse the same request", got)
	}
	if is := r.instances(t); len(is) != 1 || is[0].Phase != berth.InstanceDestroyed || len(r.srv.Live()) != 0 {
		t.Errorf("instances %+v, live %+v: want the one record ended, nothing billed", is, r.srv.Live())
	}
}

// failingDestroy is a provider whose first destroy fails.
type failingDestroy struct {
	cloud.Provider
	once sync.Once
}

func (f *failingDestroy) Destroy(ctx context.Context, id int64) error {
	var err error
	f.once.Do(func() { err = errors.New("dial tcp 127.0.0.1:1: connect: connection refused") })
	if err != nil {
		return err
	}
	return f.Provider.Destroy(ctx, id)
}

func TestReconcileDestroysWhatFailedToBeGivenBack(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultCDI})
	r.p.Provider = &failingDestroy{Provider: r.vast}
	ctx := context.Background()
	if _, err := r.p.Provision(ctx, r.pool); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Provision = %v, want the destroy's error", err)
	}
	is := r.instances(t)
	if len(is) != 1 || is[0].Phase != berth.InstanceFailed || len(r.srv.Live()) != 1 {
		t.Fatalf("instances %+v, live %+v: want one failed, still billed", is, r.srv.Live())
	}
	if gone, err := r.p.Reconcile(ctx, r.pool); err != nil || len(gone) != 0 {
		t.Fatalf("Reconcile = %v, %v", gone, err)
	}
	stored, err := r.st.Instance(ctx, is[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Phase != berth.InstanceDestroyed || stored.Failure != berth.FailureInfraFatal || len(r.srv.Live()) != 0 {
		t.Errorf("after Reconcile: %+v, live %+v; want destroyed, its failure kept, nothing billed", stored, r.srv.Live())
	}
}

// failAt is a store whose writes of an instance in phase fail, as if the
// server had died before them.
type failAt struct {
	store.PoolStore
	phase berth.InstancePhase
}

func (s *failAt) PutInstance(ctx context.Context, i *berth.Instance) error {
	if i.Phase == s.phase {
		return errors.New("the server died")
	}
	return s.PoolStore.PutInstance(ctx, i)
}

// An instance given back whose destroy went through at the provider but
// whose record was not written destroyed (a crash, or the write still
// under way when Reconcile lists) is no vanish: Reconcile writes it
// destroyed, keeps its failure and blames its machine no more.
func TestReconcileFinishesAGiveBackItFindsUnlisted(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultCDI})
	r.p.Store = &failAt{PoolStore: r.st, phase: berth.InstanceDestroyed}
	ctx := context.Background()
	if _, err := r.p.Provision(ctx, r.pool); err == nil || !strings.Contains(err.Error(), "the server died") {
		t.Fatalf("Provision = %v, want the write of destroyed to fail", err)
	}
	is := r.instances(t)
	if len(is) != 1 || is[0].Phase != berth.InstanceFailed || len(r.srv.Live()) != 0 {
		t.Fatalf("instances %+v, live %+v: want one failed record, nothing billed", is, r.srv.Live())
	}
	r.p.Store = r.st
	gone, err := r.p.Reconcile(ctx, r.pool)
	if err != nil || len(gone) != 0 {
		t.Fatalf("Reconcile = %v, %v; want nothing gone", gone, err)
	}
	stored, err := r.st.Instance(ctx, is[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Phase != berth.InstanceDestroyed || stored.Failure != berth.FailureInfraFatal || strings.Contains(stored.LastError, "vanished") {
		t.Errorf("after Reconcile: %+v; want destroyed, its CDI failure kept, no vanish", stored)
	}
	if h := r.host(t, vasttest.FirstMachine); h == nil || h.Failures[berth.FailureInfraFatal] != 1 {
		t.Errorf("host record %+v, want the one CDI failure counted, once", h)
	}
}

// A provisioning by hand whose caller goes away (Ctrl-C) gives back the
// instance it was making, whatever phase it had reached: nothing is left
// billed, and the machine is not blamed.
func TestProvisionByHandCancelledGivesBack(t *testing.T) {
	t.Parallel()
	for _, stop := range []berth.InstancePhase{berth.InstanceCreating, berth.InstanceCreated, berth.InstanceSSH, berth.InstanceGPUChecked} {
		t.Run(string(stop), func(t *testing.T) {
			t.Parallel()
			r := newRig(t, 2, map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultStall})
			ctx, cancel := context.WithCancel(context.Background())
			r.p.Store = &stopAt{PoolStore: r.st, phase: stop, stop: cancel} // Ctrl-C once stop is written
			if _, err := r.p.ProvisionByHand(ctx, r.pool); !errors.Is(err, context.Canceled) {
				t.Fatalf("ProvisionByHand = %v, want it cancelled", err)
			}
			if live := r.srv.Live(); len(live) != 0 {
				t.Errorf("live at the provider after the cancel: %+v, want none", live)
			}
			is := r.instances(t)
			if len(is) != 1 || is[0].Phase != berth.InstanceDestroyed || is[0].Failure != "" {
				t.Fatalf("instances %+v, want one, destroyed, with no failure class", is)
			}
			if tl := phases(is[0]); !slices.Equal(tl[len(tl)-2:], []berth.InstancePhase{berth.InstanceDraining, berth.InstanceDestroyed}) {
				t.Errorf("timeline %v, want it to end draining, destroyed", tl)
			}
			if h := r.host(t, vasttest.FirstMachine); h != nil && len(h.Failures) != 0 {
				t.Errorf("host record %+v: a cancel blames no machine", h)
			}
			if got := r.creates(); len(got) > 1 {
				t.Errorf("creates = %v, want at most one", got)
			}
		})
	}
}
