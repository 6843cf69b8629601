package storetest

import (
	"context"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// backendTests check store.BackendStore.
var backendTests = []test{
	{"Backends", testBackends},
}

// fullBackend returns backend name with every stored field set to a value
// that is not its zero value.
func fullBackend(name string) *berth.BackendSpec {
	return &berth.BackendSpec{
		Name: name, Kind: berth.BackendKindKubernetes, Queues: []string{"gpu", "ünï"},
		Kubernetes: &berth.KubernetesBackend{
			Context: "cw-prod", Namespace: "ml-jobs", ImageDefault: "nvcr.io/nvidia/pytorch:25.01-py3",
			NodeSelector: map[string]string{"nvidia.com/gpu.product": "H100", "tier": `"quoted" ünï`},
			Placement:    berth.PlacementKube,
		},
		SealedCredentials: []byte{0, 1, 2, 0xfe, 0xff},
		CreatedAt:         base,
	}
}

func testBackends(t *testing.T, s store.Store) {
	ctx := context.Background()
	if bs, err := s.Backends(ctx); err != nil || len(bs) != 0 {
		t.Fatalf("Backends of a new store = %v, %v; want none", bs, err)
	}
	a, b := fullBackend("k8s-a"), fullBackend("k8s-0") // "0" sorts first
	b.Queues, b.Kubernetes.NodeSelector, b.Kubernetes.Context, b.SealedCredentials = nil, nil, "", nil
	b.Kubernetes.Placement = berth.PlacementBerth
	// The plain kubeconfig is sealed by the caller and never stored.
	withPlain := *a
	k := *a.Kubernetes
	k.Kubeconfig = "apiVersion: v1\nusers: [{name: admin, user: {token: plain-text}}]\n"
	withPlain.Kubernetes = &k
	for _, x := range []*berth.BackendSpec{&withPlain, b} {
		if err := s.AddBackend(ctx, x); err != nil {
			t.Fatalf("AddBackend(%s): %v", x.Name, err)
		}
	}
	if k.Kubeconfig == "" {
		t.Fatal("AddBackend cleared the caller's kubeconfig")
	}
	got, err := s.Backends(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "Backends, by name, every field kept, the plain kubeconfig not stored", got, []*berth.BackendSpec{b, a})

	// A second add under a name is refused and changes nothing.
	other := fullBackend("k8s-a")
	other.Kubernetes.Namespace, other.SealedCredentials = "other", []byte("other")
	if err := s.AddBackend(ctx, other); berth.ErrorCode(err) != berth.ECodeConflict {
		t.Fatalf("AddBackend of a stored name: got %v, want conflict", err)
	}
	if err := s.AddBackend(ctx, &berth.BackendSpec{Kind: berth.BackendKindKubernetes}); berth.ErrorCode(err) != berth.ECodeInvalid {
		t.Fatalf("AddBackend without a name: got %v, want invalid", err)
	}
	got, _ = s.Backends(ctx)
	checkEqual(t, "Backends after a refused add", got, []*berth.BackendSpec{b, a})

	if err := s.RemoveBackend(ctx, "nope"); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("RemoveBackend of an unknown name: got %v, want not found", err)
	}
	if err := s.RemoveBackend(ctx, "k8s-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveBackend(ctx, "k8s-a"); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("RemoveBackend twice: got %v, want not found", err)
	}
	got, _ = s.Backends(ctx)
	checkEqual(t, "Backends after a remove", got, []*berth.BackendSpec{b})
	// A removed name may be added again.
	if err := s.AddBackend(ctx, a); err != nil {
		t.Fatalf("AddBackend after its remove: %v", err)
	}
	got, _ = s.Backends(ctx)
	checkEqual(t, "Backends after a re-add", got, []*berth.BackendSpec{b, a})
}
