package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// poolTests check store.PoolStore.
var poolTests = []test{
	{"Pools", testPools},
	{"Instances", testInstances},
	{"InstanceFilter", testInstanceFilter},
	{"Hosts", testHosts},
}

// fullPool returns pool name with every field but APIKey (never stored)
// set to a value that is not its zero value.
func fullPool(name string) *berth.Pool {
	return &berth.Pool{
		Name: name, Provider: "vast", GPUType: "RTX 4090", GPUs: 2, MaxInstances: 3, MaxPrice: 1.37,
		IdleTimeout: berth.Duration(90 * time.Second), Strictness: berth.StrictnessBalanced,
		Image: "vastai/base:cuda-12.4", URL: "http://127.0.0.1:8099/api/v0", Queues: []string{"train", "ünï"},
		Labels: map[string]string{"cloud": "vast", "tier": "spot"}, PreserveOnFailure: true,
		SealedAPIKey: []byte{0, 1, 2, 0xfe, 0xff}, CreatedAt: base, UpdatedAt: base.Add(time.Minute),
		Workload: berth.WorkloadVLLM, Model: "Qwen/Qwen2.5-0.5B-Instruct", MaxModelLen: 4096, Port: 8001,
	}
}

func testPools(t *testing.T, s store.Store) {
	ctx := context.Background()
	if ps, err := s.Pools(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("Pools of a new store = %v, %v; want none", ps, err)
	}
	a, b := fullPool("a-pool"), fullPool("B-pool") // "B" sorts first, byte-wise
	b.Strictness, b.MaxPrice, b.Queues, b.Labels = berth.StrictnessStrict, 0.25, nil, nil
	for _, p := range []*berth.Pool{a, b} {
		if err := s.PutPool(ctx, p); err != nil {
			t.Fatalf("PutPool(%s): %v", p.Name, err)
		}
	}
	got, err := s.Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "Pools, by name, every field kept", got, []*berth.Pool{b, a})

	// A put replaces the whole pool: lists and the key it no longer has
	// are gone, not merged.
	keyed := *a
	keyed.APIKey = "plain-text key"
	keyed.Queues, keyed.Labels, keyed.SealedAPIKey = nil, nil, nil
	keyed.GPUs, keyed.MaxInstances, keyed.IdleTimeout, keyed.PreserveOnFailure = 1, 0, 0, false
	keyed.Image, keyed.URL, keyed.UpdatedAt = "", "", base.Add(time.Hour)
	keyed.Workload, keyed.Model, keyed.MaxModelLen, keyed.Port = berth.WorkloadAgent, "", 0, 0
	if err := s.PutPool(ctx, &keyed); err != nil {
		t.Fatal(err)
	}
	want := keyed
	want.APIKey = ""
	got, _ = s.Pools(ctx)
	checkEqual(t, "Pools after a replace (the plain API key not stored)", got, []*berth.Pool{b, &want})

	if err := s.PutPool(ctx, &berth.Pool{Provider: "vast"}); berth.ErrorCode(err) != berth.ECodeInvalid {
		t.Fatalf("PutPool without a name: got %v, want invalid", err)
	}
	if err := s.DeletePool(ctx, "nope"); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("DeletePool of an unknown name: got %v, want not found", err)
	}
	if err := s.DeletePool(ctx, "a-pool"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePool(ctx, "a-pool"); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("DeletePool twice: got %v, want not found", err)
	}
	got, _ = s.Pools(ctx)
	checkEqual(t, "Pools after a delete and a nameless put", got, []*berth.Pool{b})
}

// fullInstance returns instance id of pool, created at created, with
// every field set to a value that is not its zero value.
func fullInstance(id, pool string, created time.Time) *berth.Instance {
	return &berth.Instance{
		ID: id, Pool: pool, ProviderID: 1<<40 + 7, OfferID: 9876543, MachineID: 42, GPUName: "RTX 4090", GPUs: 2,
		PricePerH: 0.4123, Phase: berth.InstanceReady, Failure: berth.FailureWarmup, LastError: "ssh: handshake failed — ünï",
		WorkerHost: "vast-" + id, SSHAddr: "127.0.0.1:41022", Endpoint: "127.0.0.1:41800",
		HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
		Timeline: []berth.PhaseChange{
			{Phase: berth.InstanceCreating, At: created},
			{Phase: berth.InstanceCreated, At: created.Add(2 * time.Second), Reason: "contract 1099511627783"},
			{Phase: berth.InstanceReady, At: created.Add(time.Minute + time.Nanosecond)},
		},
		Probes: []berth.Probe{
			{Phase: berth.InstanceSSH, Command: "ssh -p 41022 root@127.0.0.1 true", ExitCode: intPtr(255),
				Output: "Permission denied (publickey).\n\"quoted\" \u0000 <tag>", Class: berth.FailureWarmup, At: created.Add(time.Second)},
			{Phase: berth.InstanceGPUChecked, Command: "nvidia-smi -L", ExitCode: intPtr(0), Output: "GPU 0: RTX 4090",
				At: created.Add(3 * time.Second)},
			{Phase: berth.InstanceRunning, Command: "GET /instances/1099511627783", At: created.Add(4 * time.Second)},
		},
		CreatedAt: created, ReadyAt: created.Add(time.Minute), IdleSince: created.Add(time.Hour),
		EndedAt: created.Add(2 * time.Hour),
	}
}

func testInstances(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.Instance(ctx, "nope"); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("Instance of an unknown id: got %v, want not found", err)
	}
	in := fullInstance("i-1", "p", base)
	// A time in another zone comes back the same instant, in UTC.
	in.Probes[1].At = in.Probes[1].At.In(time.FixedZone("UTC+5:30", 5*3600+1800))
	if err := s.PutInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	got, err := s.Instance(ctx, "i-1")
	if err != nil {
		t.Fatal(err)
	}
	want := fullInstance("i-1", "p", base)
	checkEqual(t, "Instance, every field, timeline and probes kept", got, want)

	// A put replaces the whole instance: probes it no longer has are gone.
	next := *want
	next.Phase, next.Failure, next.LastError, next.Probes = berth.InstanceDestroyed, "", "", nil
	next.Timeline = append(next.Timeline[:len(next.Timeline):len(next.Timeline)],
		berth.PhaseChange{Phase: berth.InstanceDestroyed, At: base.Add(3 * time.Hour), Reason: "idle"})
	next.ReadyAt, next.IdleSince = time.Time{}, time.Time{}
	if err := s.PutInstance(ctx, &next); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Instance(ctx, "i-1")
	checkEqual(t, "Instance after a replace", got, &next)

	bare := &berth.Instance{ID: "i-2", Pool: "p", Phase: berth.InstanceCreating, CreatedAt: base.Add(time.Second)}
	if err := s.PutInstance(ctx, bare); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Instance(ctx, "i-2")
	checkEqual(t, "an instance with no timeline, probes or times", got, bare)
	if err := s.PutInstance(ctx, &berth.Instance{Pool: "p"}); berth.ErrorCode(err) != berth.ECodeInvalid {
		t.Fatalf("PutInstance without an id: got %v, want invalid", err)
	}
	all, err := s.Instances(ctx, store.InstanceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "Instances after puts, one without an id", all, []*berth.Instance{&next, bare})
}

func testInstanceFilter(t *testing.T, s store.Store) {
	ctx := context.Background()
	if is, err := s.Instances(ctx, store.InstanceFilter{}); err != nil || len(is) != 0 {
		t.Fatalf("Instances of a new store = %v, %v; want none", is, err)
	}
	if err := s.PutPool(ctx, fullPool("p1")); err != nil {
		t.Fatal(err)
	}
	// Put out of creation order; two created at the same time sort by id.
	mk := func(id, pool string, created time.Duration, phase berth.InstancePhase) *berth.Instance {
		i := fullInstance(id, pool, base.Add(created))
		i.Phase = phase
		return i
	}
	var (
		gone  = mk("i-gone", "p1", 1*time.Second, berth.InstanceDestroyed)
		late  = mk("i-late", "p1", 5*time.Second, berth.InstanceRunning)
		first = mk("i-b", "p1", 0, berth.InstanceFailed) // failed and kept: still billed
		tie   = mk("i-a", "p1", 0, berth.InstanceDraining)
		other = mk("i-other", "p2", 3*time.Second, berth.InstanceCreating)
		dead  = mk("i-dead", "p2", 2*time.Second, berth.InstanceDestroyed)
	)
	for _, i := range []*berth.Instance{late, gone, other, first, dead, tie} {
		if err := s.PutInstance(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, f store.InstanceFilter, want ...*berth.Instance) {
		t.Helper()
		got, err := s.Instances(ctx, f)
		if err != nil {
			t.Fatalf("Instances(%+v): %v", f, err)
		}
		checkEqual(t, what, got, want)
	}
	check("every instance, oldest first", store.InstanceFilter{}, tie, first, gone, dead, other, late)
	check("pool p1's", store.InstanceFilter{Pool: "p1"}, tie, first, gone, late)
	check("live ones", store.InstanceFilter{Live: true}, tie, first, other, late)
	check("pool p2's live ones", store.InstanceFilter{Pool: "p2", Live: true}, other)
	check("an unknown pool's", store.InstanceFilter{Pool: "nope"})

	if err := s.DeletePool(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	check("pool p1's after the pool is deleted (records stay)", store.InstanceFilter{Pool: "p1"}, tie, first, gone, late)
}

func testHosts(t *testing.T, s store.Store) {
	ctx := context.Background()
	if hs, err := s.Hosts(ctx, "vast"); err != nil || len(hs) != 0 {
		t.Fatalf("Hosts of a new store = %v, %v; want none", hs, err)
	}
	quarantined := &berth.HostRecord{Provider: "vast", MachineID: 1 << 40, GPUName: "RTX 4090", Driver: "550.54.15",
		Successes: 3, Failures: map[string]int{berth.FailureInfraFatal: 2, berth.FailureWarmup: 1}, LastSeen: base,
		LastFailure: "cdi: unresolvable CDI devices nvidia.com/gpu=all", QuarantinedUntil: base.Add(24 * time.Hour)}
	blocked := &berth.HostRecord{Provider: "vast", MachineID: 7, GPUName: "RTX 3090", LastSeen: base.Add(time.Second), Blocked: true}
	clean := &berth.HostRecord{Provider: "vast", MachineID: 300, GPUName: "A100", Successes: 12, LastSeen: base}
	elsewhere := &berth.HostRecord{Provider: "other", MachineID: 7, Successes: 1, LastSeen: base}
	for _, h := range []*berth.HostRecord{quarantined, elsewhere, clean, blocked} {
		if err := s.PutHost(ctx, h); err != nil {
			t.Fatalf("PutHost(%s/%d): %v", h.Provider, h.MachineID, err)
		}
	}
	got, err := s.Hosts(ctx, "vast")
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "Hosts, by machine id, every field kept", got, []*berth.HostRecord{blocked, clean, quarantined})

	// A put replaces the record: the failures and quarantine it no longer
	// has are gone.
	released := *quarantined
	released.Failures, released.QuarantinedUntil, released.LastFailure = nil, time.Time{}, ""
	released.Successes = 4
	unblocked := *blocked
	unblocked.Blocked = false
	for _, h := range []*berth.HostRecord{&released, &unblocked} {
		if err := s.PutHost(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	got, _ = s.Hosts(ctx, "vast")
	checkEqual(t, "Hosts after replacing two", got, []*berth.HostRecord{&unblocked, clean, &released})
	if err := s.PutHost(ctx, &berth.HostRecord{MachineID: 8}); berth.ErrorCode(err) != berth.ECodeInvalid {
		t.Fatalf("PutHost without a provider: got %v, want invalid", err)
	}
	if hs, err := s.Hosts(ctx, ""); err != nil || len(hs) != 0 {
		t.Fatalf("Hosts of provider \"\" after a put without one = %v, %v; want none", hs, err)
	}

	if n, err := s.DeleteHosts(ctx, "vast"); err != nil || n != 3 {
		t.Fatalf("DeleteHosts(vast) = %d, %v; want 3", n, err)
	}
	if n, err := s.DeleteHosts(ctx, "vast"); err != nil || n != 0 {
		t.Fatalf("DeleteHosts(vast) again = %d, %v; want 0", n, err)
	}
	if hs, err := s.Hosts(ctx, "vast"); err != nil || len(hs) != 0 {
		t.Fatalf("Hosts after DeleteHosts = %v, %v; want none", hs, err)
	}
	got, _ = s.Hosts(ctx, "other")
	checkEqual(t, "another provider's hosts after DeleteHosts(vast)", got, []*berth.HostRecord{elsewhere})
}

// testReopenKeepsInstances checks that an instance's record, its pinned
// SSH host key included, is the same after the store is closed and
// reopened (a server restart), and that a pin written after the reopen
// is kept over another.
func testReopenKeepsInstances(t *testing.T, reopen func() (store.Store, string)) {
	ctx := context.Background()
	s, _ := reopen()
	in := fullInstance("i-1", "p", base)
	bare := &berth.Instance{ID: "i-2", Pool: "p", Phase: berth.InstanceRunning, CreatedAt: base.Add(time.Second)}
	for _, i := range []*berth.Instance{in, bare} {
		if err := s.PutInstance(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	s, _ = reopen()
	all, err := s.Instances(ctx, store.InstanceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "Instances after a reopen, the host key pinned", all, []*berth.Instance{fullInstance("i-1", "p", base), bare})

	pinned := *bare
	pinned.Phase, pinned.HostKey = berth.InstanceSSH, "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTY="
	if err := s.PutInstance(ctx, &pinned); err != nil {
		t.Fatal(err)
	}
	s, _ = reopen()
	got, err := s.Instance(ctx, "i-2")
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "an instance pinned after a reopen, after another", got, &pinned)
}
