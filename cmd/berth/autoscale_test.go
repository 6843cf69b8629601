package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud"
	"github.com/berth-dev/berth/cloud/vast"
	"github.com/berth-dev/berth/cloud/vast/vasttest"
	"github.com/berth-dev/berth/provision"
	"github.com/berth-dev/berth/sqlite"
)

// A rented instance is created with the pool's image and an onstart that
// starts berth agent as its host, in the pool's queues with its labels,
// joined to this server with a credential of its own bound to that host.
func TestPoolInstanceRequest(t *testing.T) {
	t.Parallel()
	rs, err := startServer(context.Background(), &serverConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close(context.Background()) })
	f := &poolFleet{server: rs.URL, credential: rs.agentCredential, log: slog.New(slog.DiscardHandler)}
	pool := &berth.Pool{Name: "rent", Image: "ghcr.io/berth/agent:1", Queues: []string{"gpu", "train"},
		Labels: map[string]string{"zone": "eu", "cloud": "vast's"}}
	req := f.request(pool, &berth.Instance{ID: "i1", Pool: "rent", WorkerHost: "rent-i1"})
	const command = `exec "$B" agent --host 'rent-i1' --queues 'gpu,train' --labels 'cloud=vast'\''s,zone=eu'`
	lines := strings.Split(strings.TrimSpace(req.Onstart), "\n")
	token, _, _ := strings.Cut(strings.TrimPrefix(lines[0], "BERTH_TOKEN="), "; export BERTH_TOKEN")
	token = strings.Trim(token, "'")
	if lines[len(lines)-1] != command || req.Image != pool.Image || req.DiskGB != instanceDiskGB || req.Env["BERTH_SERVER"] != rs.URL {
		t.Fatalf("request = %+v; want onstart ending %q, the pool's image, a disk and BERTH_SERVER", req, command)
	}
	if len(req.Onstart) > 4000 {
		t.Errorf("onstart of %d bytes: Vast takes at most 4096 with its args", len(req.Onstart))
	}
	var bound bool
	for _, tok := range rs.Tokens.List() {
		bound = bound || tok.Name == "rent-i1" && tok.Role == "agent" && tok.Worker == "rent-i1"
	}
	if len(token) < 100 || !bound {
		t.Fatalf("no agent credential bound to rent-i1 (onstart %q, tokens %+v)", req.Onstart, rs.Tokens.List())
	}
}

// An instance of a vLLM pool is a bare vLLM node: vLLM's image, its port
// exposed, an onstart that runs vllm serve into its log, and no agent
// credential.
func TestPoolVLLMInstanceRequest(t *testing.T) {
	t.Parallel()
	issued := 0
	f := &poolFleet{credential: func(context.Context, string) (string, error) { issued++; return "tok", nil }, log: slog.New(slog.DiscardHandler)}
	pool := &berth.Pool{Name: "llm", GPUs: 2, Workload: berth.WorkloadVLLM, Model: "Qwen/Qwen2.5-0.5B-Instruct", MaxModelLen: 4096, Port: 8001}
	req := f.request(pool, &berth.Instance{ID: "i1", Pool: "llm"})
	const command = "exec vllm serve Qwen/Qwen2.5-0.5B-Instruct --port 8001 --host 0.0.0.0 --served-model-name Qwen/Qwen2.5-0.5B-Instruct " +
		"--tensor-parallel-size 2 --max-model-len 4096 >>vllm.log 2>&1"
	if !strings.Contains(req.Onstart, command+"\n") || req.Image != provision.DefaultVLLMImage || req.Env["-p 8001:8001"] != "1" ||
		len(req.Env) != 1 || req.DiskGB != instanceDiskGB || issued != 0 || strings.Contains(req.Onstart, "BERTH_TOKEN") {
		t.Fatalf("request = %+v (%d credentials issued); want vLLM's image, port 8001 exposed, an onstart running %q, no credential",
			req, issued, command)
	}
}

// keyRing opens a pool's key as the pool's name and sealed bytes say.
type keyRing map[string]string

func (k keyRing) OpenPoolKey(pool string, sealed []byte) (string, error) { return k[pool], nil }

// Each pool's instances are compared with its own account's listing: an
// instance that vanished from it is ended and its worker declared gone;
// one its account still has stays, whatever another account lists.
func TestPoolFleetReconcile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	account := func(key string) string {
		market := vasttest.New(vasttest.Options{APIKey: key})
		ts := httptest.NewServer(market)
		t.Cleanup(ts.Close)
		t.Cleanup(market.Close)
		return ts.URL + vasttest.BasePath
	}
	urlA, urlB := account(vasttest.DefaultAPIKey), account("another-account")
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var gone []string
	f := &poolFleet{dataDir: t.TempDir(), store: st, keys: keyRing{"rent": vasttest.DefaultAPIKey, "other": "another-account"},
		log: slog.New(slog.DiscardHandler), gone: func(_ context.Context, host, why string) error {
			gone = append(gone, host+": "+why)
			return nil
		}}
	pool := &berth.Pool{Name: "rent", Provider: "vast", GPUType: "RTX 4090", GPUs: 1, MaxInstances: 2, MaxPrice: 1,
		URL: urlA, SealedAPIKey: []byte("sealed-a")}
	other := *pool
	other.Name, other.URL, other.SealedAPIKey = "other", urlB, []byte("sealed-b")
	// Pool other's instance is live on account B (and unknown to A).
	b, err := vast.New(vast.Config{URL: urlB, APIKey: "another-account"})
	if err != nil {
		t.Fatal(err)
	}
	contract, err := b.Create(ctx, vasttest.OfferBase+vasttest.FirstMachine, cloud.CreateRequest{Image: "img", DiskGB: 32, Label: "berth-i2"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	lostA := &berth.Instance{ID: "i1", Pool: "rent", ProviderID: contract + 4242, Phase: berth.InstanceReady, WorkerHost: "rent-i1",
		MachineID: 1001, CreatedAt: now}
	liveB := &berth.Instance{ID: "i2", Pool: "other", ProviderID: contract, Phase: berth.InstanceReady, WorkerHost: "other-i2",
		MachineID: 1001, CreatedAt: now}
	lostB := &berth.Instance{ID: "i3", Pool: "other", ProviderID: contract + 1, Phase: berth.InstanceReady, WorkerHost: "other-i3",
		MachineID: 1002, CreatedAt: now}
	for _, err := range []error{st.PutPool(ctx, pool), st.PutPool(ctx, &other), st.PutInstance(ctx, lostA), st.PutInstance(ctx, liveB),
		st.PutInstance(ctx, lostB)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := f.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]berth.InstancePhase{"i1": berth.InstanceDestroyed, "i2": berth.InstanceReady, "i3": berth.InstanceDestroyed} {
		if got, err := st.Instance(ctx, id); err != nil || got.Phase != want {
			t.Errorf("instance %s: %+v, %v; want %s", id, got, err, want)
		}
	}
	slices.Sort(gone)
	if len(gone) != 2 || !strings.HasPrefix(gone[0], "other-i3: ") || !strings.HasPrefix(gone[1], "rent-i1: ") {
		t.Errorf("gone %q, want other-i3 and rent-i1", gone)
	}
}
