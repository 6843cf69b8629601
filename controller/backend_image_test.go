package controller

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
)

// idleBackend is an added backend that runs nothing.
type idleBackend struct{ name string }

func (idleBackend) Launch(*berth.Job, *berth.Attempt, map[string]string) {}
func (idleBackend) Stop(*berth.Attempt, string, string)                  {}
func (idleBackend) Close()                                               {}
func (b idleBackend) Status() berth.BackendStatus {
	return berth.BackendStatus{Name: b.name, Kind: berth.BackendKindKubernetes, State: berth.BackendReady}
}

// A job naming a Kubernetes backend without an image is refused on image,
// storing nothing, unless the backend has a default image.
func TestBackendImageRequired(t *testing.T) {
	c, _ := startOnWith(t, filepath.Join(t.TempDir(), "b.db"), time.Now(), func(cfg *Config, _ *sqlite.Store) {
		cfg.BackendKinds = map[string]BackendFactory{berth.BackendKindKubernetes: func(spec berth.BackendSpec, _ BackendHost) (Backend, error) {
			return idleBackend{spec.Name}, nil
		}}
	})
	bare := kubeSpec("bare", "")
	bare.Kubernetes.ImageDefault = ""
	for _, spec := range []berth.BackendSpec{kubeSpec("k", ""), bare} {
		if err := c.AddBackend(t.Context(), spec); err != nil {
			t.Fatal(err)
		}
	}
	submit := func(backend, image string) error {
		spec := berth.DefaultJobSpec()
		spec.Command, spec.Backend, spec.Image = berth.Argv{"true"}, backend, image
		_, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec, HoldUntilFits: true})
		return err
	}
	var e *berth.Error
	if err := submit("bare", ""); !errors.As(err, &e) || e.Code != berth.ECodeInvalid || e.Field != "image" {
		t.Fatalf("an imageless job on a backend without a default: %v, want invalid on image", err)
	}
	if jobs, err := c.Jobs(t.Context(), store.JobFilter{}); err != nil || len(jobs) != 0 {
		t.Fatalf("a refused submit stored %d jobs (%v)", len(jobs), err)
	}
	for _, tc := range []struct{ backend, image string }{{"bare", "ubuntu:24.04"}, {"k", ""}, {"", ""}, {berth.BackendAgents, ""}} {
		if err := submit(tc.backend, tc.image); err != nil {
			t.Errorf("backend %q, image %q: %v", tc.backend, tc.image, err)
		}
	}
}
