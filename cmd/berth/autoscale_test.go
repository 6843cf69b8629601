package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud/vast/vasttest"
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

// keyRing opens a pool's key as the pool's name and sealed bytes say.
type keyRing map[string]string

func (k keyRing) OpenPoolKey(pool string, sealed []byte) (string, error) { return k[pool], nil }

// An instance that vanished from the provider's listing is ended and its
// worker declared gone; with pools on two accounts nothing is reconciled.
func TestPoolFleetReconcile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	market := vasttest.New(vasttest.Options{})
	ts := httptest.NewServer(market)
	t.Cleanup(ts.Close)
	t.Cleanup(market.Close)
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
		URL: ts.URL + vasttest.BasePath, SealedAPIKey: []byte("sealed")}
	lost := &berth.Instance{ID: "i1", Pool: "rent", ProviderID: 4242, Phase: berth.InstanceReady, WorkerHost: "rent-i1", MachineID: 1001,
		CreatedAt: time.Now().UTC()}
	for _, err := range []error{st.PutPool(ctx, pool), st.PutInstance(ctx, lost)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	other := *pool
	other.Name = "other"
	if err := st.PutPool(ctx, &other); err != nil {
		t.Fatal(err)
	}
	if err := f.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Instance(ctx, "i1"); err != nil || got.Phase != berth.InstanceReady || len(gone) != 0 {
		t.Fatalf("two accounts: instance %+v, %v, gone %q; want it left ready", got, err, gone)
	}
	if err := st.DeletePool(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if err := f.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := st.Instance(ctx, "i1")
	if err != nil || got.Phase != berth.InstanceDestroyed || len(gone) != 1 || !strings.HasPrefix(gone[0], "rent-i1: ") {
		t.Fatalf("one account: instance %+v, %v, gone %q; want it destroyed and rent-i1 gone", got, err, gone)
	}
}
