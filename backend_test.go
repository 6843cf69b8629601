package berth

import (
	"errors"
	"strings"
	"testing"
)

func validKubeBackend() *BackendSpec {
	return &BackendSpec{Name: "k8s-cw", Kind: BackendKindKubernetes, Queues: []string{"gpu"},
		Kubernetes: &KubernetesBackend{Kubeconfig: "apiVersion: v1\nkind: Config\n", NodeSelector: map[string]string{"berth.dev/pool": "a100"}}}
}

func TestBackendSpecValidate(t *testing.T) {
	t.Parallel()
	s := validKubeBackend()
	if err := s.Validate(); err != nil {
		t.Fatalf("a valid backend: %v", err)
	}
	s.SetDefaults()
	if k := s.Kubernetes; k.Namespace != DefaultKubeNamespace || k.Placement != PlacementBerth {
		t.Errorf("defaults: namespace %q, placement %q; want %q, %q", k.Namespace, k.Placement, DefaultKubeNamespace, PlacementBerth)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("a valid backend with its defaults: %v", err)
	}
	for _, c := range []struct {
		name  string
		edit  func(*BackendSpec)
		field string
	}{
		{"no name", func(s *BackendSpec) { s.Name = "" }, "name"},
		{"the agent pool's name", func(s *BackendSpec) { s.Name = BackendAgents }, "name"},
		{"upper case", func(s *BackendSpec) { s.Name = "K8s" }, "name"},
		{"ends in -", func(s *BackendSpec) { s.Name = "k8s-" }, "name"},
		{"64 characters", func(s *BackendSpec) { s.Name = strings.Repeat("a", 64) }, "name"},
		{"no kind", func(s *BackendSpec) { s.Kind = "" }, "kind"},
		{"unknown kind", func(s *BackendSpec) { s.Kind = "slurm" }, "kind"},
		{"no kubernetes", func(s *BackendSpec) { s.Kubernetes = nil }, "kubernetes"},
		{"no kubeconfig", func(s *BackendSpec) { s.Kubernetes.Kubeconfig = " \n" }, "kubernetes.kubeconfig"},
		{"huge kubeconfig", func(s *BackendSpec) { s.Kubernetes.Kubeconfig = strings.Repeat("x", MaxKubeconfig+1) }, "kubernetes.kubeconfig"},
		{"context with a newline", func(s *BackendSpec) { s.Kubernetes.Context = "a\nb" }, "kubernetes.context"},
		{"bad namespace", func(s *BackendSpec) { s.Kubernetes.Namespace = "Berth_Jobs" }, "kubernetes.namespace"},
		{"bad placement", func(s *BackendSpec) { s.Kubernetes.Placement = "random" }, "kubernetes.placement"},
		{"bad image default", func(s *BackendSpec) { s.Kubernetes.ImageDefault = "pytorch latest" }, "kubernetes.image_default"},
		{"bad selector key", func(s *BackendSpec) { s.Kubernetes.NodeSelector = map[string]string{"-gpu": "a"} }, "kubernetes.node_selector"},
		{"bad selector prefix", func(s *BackendSpec) { s.Kubernetes.NodeSelector = map[string]string{"Nvidia.COM/gpu": "a"} }, "kubernetes.node_selector"},
		{"bad selector value", func(s *BackendSpec) { s.Kubernetes.NodeSelector = map[string]string{"gpu": "a b"} }, "kubernetes.node_selector"},
		{"bad queue", func(s *BackendSpec) { s.Queues = []string{"GPU"} }, "queues"},
		{"queue twice", func(s *BackendSpec) { s.Queues = []string{"gpu", "gpu"} }, "queues"},
	} {
		s := validKubeBackend()
		c.edit(s)
		var e *Error
		if err := s.Validate(); !errors.As(err, &e) || e.Code != ECodeInvalid || e.Field != c.field {
			t.Errorf("%s: Validate() = %v, want an invalid error on %s", c.name, err, c.field)
		}
	}
	ok := validKubeBackend()
	ok.Kubernetes.NodeSelector = map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "empty": ""}
	ok.Kubernetes.ImageDefault = "nvcr.io/nvidia/pytorch:25.01-py3"
	ok.Kubernetes.Placement = PlacementKube
	if err := ok.Validate(); err != nil {
		t.Errorf("prefixed selector, empty value, an image default, kube placement: %v", err)
	}
}

func TestJobSpecImage(t *testing.T) {
	t.Parallel()
	for _, ref := range []string{"", "ubuntu", "nvcr.io/nvidia/pytorch:25.01-py3", "localhost:5000/team/train:v1",
		"repo/img@sha256:" + strings.Repeat("ab", 32)} {
		s := DefaultJobSpec()
		s.Command, s.Image = Argv{"true"}, ref
		if err := s.Validate(); err != nil {
			t.Errorf("image %q: %v", ref, err)
		}
	}
	for _, ref := range []string{"pytorch latest", "-rm", "img:", "img/", "a//b", "$(id)", strings.Repeat("a", MaxImageLen+1)} {
		s := DefaultJobSpec()
		s.Command, s.Image = Argv{"true"}, ref
		var e *Error
		if err := s.Validate(); !errors.As(err, &e) || e.Field != "image" {
			t.Errorf("image %q: Validate() = %v, want an error on image", ref, err)
		}
	}
}
