package controller

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/sqlite"
)

// hostedFake is a backend added through AddBackend that hands the test
// its host and what the controller asked of it.
type hostedFake struct {
	host     BackendHost
	launched chan *berth.Attempt
	stopped  chan string
	closed   chan struct{}
}

func (b *hostedFake) Launch(_ *berth.Job, a *berth.Attempt, _ map[string]string) { b.launched <- a }
func (b *hostedFake) Stop(a *berth.Attempt, _, _ string)                         { b.stopped <- a.ID }
func (b *hostedFake) Status() berth.BackendStatus {
	return berth.BackendStatus{Name: "k", Kind: berth.BackendKindKubernetes, State: berth.BackendReady, Nodes: 1}
}
func (b *hostedFake) Close() { close(b.closed) }

// startHosted starts a controller whose "kubernetes" kind is a
// hostedFake, returned once added as backend "k".
func startHosted(t *testing.T) (*Controller, *hostedFake) {
	t.Helper()
	fake := &hostedFake{launched: make(chan *berth.Attempt, 8), stopped: make(chan string, 8), closed: make(chan struct{})}
	c, _ := startOnWith(t, filepath.Join(t.TempDir(), "b.db"), time.Now(), func(cfg *Config, _ *sqlite.Store) {
		cfg.BackendKinds = map[string]BackendFactory{berth.BackendKindKubernetes: func(spec berth.BackendSpec, host BackendHost) (Backend, error) {
			if spec.Kubernetes.Namespace == "refused" {
				return nil, berth.Invalidf("kubernetes.namespace", "refused")
			}
			fake.host = host
			return fake, nil
		}}
	})
	if err := c.AddBackend(t.Context(), kubeSpec("k", "")); err != nil {
		t.Fatal(err)
	}
	return c, fake
}

func kubeSpec(name, ns string) berth.BackendSpec {
	return berth.BackendSpec{Name: name, Kind: berth.BackendKindKubernetes, Kubernetes: &berth.KubernetesBackend{Kubeconfig: "x", Namespace: ns, ImageDefault: "busybox:1.37"}}
}

// awaitJob polls job id until cond holds of it.
func awaitJob(t *testing.T, c *Controller, id string, cond func(*berth.JobDetail) bool) *berth.JobDetail {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := c.Job(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if cond(d) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: state %s, reason %q", id, d.State, d.Reason)
		}
		time.Sleep(5 * time.Millisecond) // polling the loop's answer, not waiting out a race
	}
}

// A job naming an added backend runs on its workers only, and what the
// backend reports moves it: pending with a reason, started, ended.
func TestHostedBackendRunsJob(t *testing.T) {
	c, fake := startHosted(t)
	fake.host.SetWorkers([]*berth.Worker{{ID: "k/n1", Host: "n1", GPUs: []berth.GPU{{Index: 0}, {Index: 1}}, CPUs: 8, Memory: 32 << 30, Slots: 110}})
	id := submitSleep(t, c, func(s *berth.JobSpec) { s.Backend, s.Resources.GPUs = "k", 2 })
	a := <-fake.launched
	if a.WorkerID != "k/n1" || len(a.GPUs) != 2 {
		t.Fatalf("launched %+v", a)
	}
	fake.host.Pending(a.ID, "pod pending: Unschedulable")
	awaitJob(t, c, id, func(d *berth.JobDetail) bool { return d.Reason == "pod pending: Unschedulable" })
	fake.host.Started(a.ID)
	awaitJob(t, c, id, func(d *berth.JobDetail) bool { return d.State == berth.JobRunning })
	fake.host.Log(a.ID, "", []byte("hello\n"))
	code := 0
	fake.host.Ended(a.ID, AttemptEnd{State: berth.AttemptSucceeded, ExitCode: &code})
	awaitJob(t, c, id, func(d *berth.JobDetail) bool { return d.State == berth.JobSucceeded })

	st := c.BackendStatuses()
	if len(st) != 2 || st[0].Name != AgentPoolBackend || st[1].Name != "k" {
		t.Fatalf("statuses %+v", st)
	}
}

// An OOM end carries its class; a node gone loses its attempt.
func TestHostedBackendEnds(t *testing.T) {
	c, fake := startHosted(t)
	w := &berth.Worker{ID: "k/n1", Host: "n1", GPUs: []berth.GPU{{Index: 0}}, CPUs: 8, Memory: 32 << 30, Slots: 110}
	fake.host.SetWorkers([]*berth.Worker{w})
	id := submitSleep(t, c, func(s *berth.JobSpec) { s.Backend, s.Resources.GPUs = "k", 1 })
	a := <-fake.launched
	code := 137
	fake.host.Ended(a.ID, AttemptEnd{State: berth.AttemptFailed, ExitCode: &code, Class: berth.FailureOOM, Reason: "OOMKilled"})
	d := awaitJob(t, c, id, func(d *berth.JobDetail) bool { return d.State == berth.JobFailed })
	if at := d.AttemptList[len(d.AttemptList)-1]; at.FailureClass != berth.FailureOOM || at.ExitCode == nil || *at.ExitCode != 137 {
		t.Fatalf("attempt %+v", at)
	}

	id = submitSleep(t, c, func(s *berth.JobSpec) { s.Backend, s.Resources.GPUs = "k", 1 })
	<-fake.launched
	fake.host.SetWorkers(nil)
	awaitJob(t, c, id, func(d *berth.JobDetail) bool {
		return len(d.AttemptList) > 0 && d.AttemptList[0].State == berth.AttemptLost && d.AttemptList[0].Reason == "worker n1 lost"
	})
}

// Reconcile starts what the backend runs, relaunches what never started
// and kills what the controller no longer holds.
func TestHostedBackendReconcile(t *testing.T) {
	c, fake := startHosted(t)
	fake.host.SetWorkers([]*berth.Worker{{ID: "k/n1", Host: "n1", GPUs: []berth.GPU{{Index: 0}, {Index: 1}}, CPUs: 8, Memory: 32 << 30, Slots: 110}})
	run := submitSleep(t, c, func(s *berth.JobSpec) { s.Backend, s.Resources.GPUs = "k", 1 })
	a1 := <-fake.launched
	submitSleep(t, c, func(s *berth.JobSpec) { s.Backend, s.Resources.GPUs = "k", 1 })
	a2 := <-fake.launched
	kill := make(chan []string, 1)
	fake.host.Reconcile([]string{a1.ID, "stranger"}, nil, func(k []string) { kill <- k })
	if k := <-kill; len(k) != 1 || k[0] != "stranger" {
		t.Fatalf("kill %v", k)
	}
	if again := <-fake.launched; again.ID != a2.ID {
		t.Fatalf("relaunched %s, want %s", again.ID, a2.ID)
	}
	awaitJob(t, c, run, func(d *berth.JobDetail) bool { return d.State == berth.JobRunning })
	cancelJob(t, c, run)
	if got := <-fake.stopped; got != a1.ID {
		t.Fatalf("stopped %s, want %s", got, a1.ID)
	}
}

// Adding refuses a used name, an unknown kind and what the factory
// refuses; removing closes the backend; a job naming a backend that is not
// there is refused on backend.
func TestAddRemoveBackend(t *testing.T) {
	c, fake := startHosted(t)
	var e *berth.Error
	if err := c.AddBackend(t.Context(), kubeSpec("k", "")); !errors.As(err, &e) || e.Code != berth.ECodeConflict {
		t.Fatalf("same name: %v", err)
	}
	if err := c.AddBackend(t.Context(), kubeSpec("r", "refused")); !errors.As(err, &e) || e.Code != berth.ECodeInvalid {
		t.Fatalf("refused: %v", err)
	}
	if err := c.AddBackend(t.Context(), berth.BackendSpec{Name: "x", Kind: "nomad"}); !errors.As(err, &e) || e.Field != "kind" {
		t.Fatalf("kind: %v", err)
	}
	if err := c.RemoveBackend(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	<-fake.closed
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Backend = berth.Argv{"true"}, "k"
	if _, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec}); !errors.As(err, &e) || e.Field != "backend" {
		t.Fatalf("submit to a removed backend: %v", err)
	}
	if err := c.RemoveBackend(t.Context(), "k"); !errors.As(err, &e) || e.Code != berth.ECodeNotFound {
		t.Fatalf("remove twice: %v", err)
	}
}

// A job naming the agent pool stays off an added backend's workers; one
// naming no backend goes wherever it fits.
func TestAgentsJobStaysOnAgents(t *testing.T) {
	c, fake := startHosted(t)
	fake.host.SetWorkers([]*berth.Worker{{ID: "k/n1", Host: "n1", GPUs: []berth.GPU{{Index: 0}}, CPUs: 8, Memory: 32 << 30, Slots: 110}})
	agents := submitSleep(t, c, func(s *berth.JobSpec) { s.Backend, s.Resources.GPUs = AgentPoolBackend, 1 })
	anywhere := submitSleep(t, c, func(s *berth.JobSpec) { s.Resources.GPUs = 1 })
	if a := <-fake.launched; a.JobID != anywhere {
		t.Fatalf("launched %s's attempt on the cluster, want %s's", a.JobID, anywhere)
	}
	if d := awaitJob(t, c, agents, func(*berth.JobDetail) bool { return true }); len(d.AttemptList) != 0 {
		t.Fatalf("job for the agents placed: %+v", d.AttemptList)
	}
}
