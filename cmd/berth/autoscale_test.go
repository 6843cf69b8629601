package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/berth-dev/berth"
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
	const onstart = `berth agent --host 'rent-i1' --queues 'gpu,train' --labels 'cloud=vast'\''s,zone=eu'`
	if req.Onstart != onstart || req.Image != pool.Image || req.DiskGB != instanceDiskGB || req.Env["BERTH_SERVER"] != rs.URL {
		t.Fatalf("request = %+v; want onstart %q, the pool's image, a disk and BERTH_SERVER", req, onstart)
	}
	var bound bool
	for _, tok := range rs.Tokens.List() {
		bound = bound || tok.Name == "rent-i1" && tok.Role == "agent" && tok.Worker == "rent-i1"
	}
	if req.Env["BERTH_TOKEN"] == "" || !bound {
		t.Fatalf("no agent credential bound to rent-i1 (BERTH_TOKEN %q, tokens %+v)", req.Env["BERTH_TOKEN"], rs.Tokens.List())
	}
}
