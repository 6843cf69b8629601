package controller

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// keyed returns a request of user with idempotency key and command.
func keyed(user, key string, command ...string) *berth.SubmitRequest {
	spec := berth.DefaultJobSpec()
	spec.User, spec.IdempotencyKey, spec.Command = user, key, command
	return &berth.SubmitRequest{JobSpec: spec}
}

// submitKeyed submits a copy of req and requires it to succeed with
// replayed as wanted, returning the jobs' ids.
func submitKeyed(t *testing.T, c *Controller, req *berth.SubmitRequest, wantReplayed bool) []string {
	t.Helper()
	r := *req
	sub, err := c.SubmitFull(t.Context(), &r)
	if err != nil {
		t.Fatalf("submit %s as %q: %v", req.Command, req.User, err)
	}
	if sub.Replayed != wantReplayed {
		t.Fatalf("submit %s as %q: replayed %v, want %v", req.Command, req.User, sub.Replayed, wantReplayed)
	}
	ids := make([]string, len(sub.Jobs))
	for i, j := range sub.Jobs {
		ids[i] = j.ID
	}
	return ids
}

// checkConflict requires err to be the conflict of a reused idempotency
// key, naming the first submission's job firstID.
func checkConflict(t *testing.T, err error, firstID string) {
	t.Helper()
	e, ok := err.(*berth.Error)
	if !ok || e.Code != berth.ECodeConflict || e.Field != "idempotency_key" {
		t.Fatalf("err = %#v, want a conflict on idempotency_key", err)
	}
	if !strings.Contains(e.Message, firstID) || !strings.Contains(e.Message, "different request") || !strings.Contains(e.Message, "new key") {
		t.Errorf("message %q should name job %s, a different request and a new key", e.Message, firstID)
	}
}

// TestIdempotencyKeysArePerUser: a key another user submitted with is no
// replay (the request gets its own jobs, never the other user's); a
// repeat of the same request by the same user is, also after a restart
// (through the store); a different request under a used key is refused
// and stores nothing.
func TestIdempotencyKeysArePerUser(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "berth.db")
	c, stop := startOn(t, path, now)

	admin := keyed("admin", "nightly-eval", "echo", "hi")
	admin.Env = map[string]string{"WANDB_API_KEY": "sk-admin-secret"}
	alice := keyed("alice", "nightly-eval", "echo", "alice")
	first := submitKeyed(t, c, admin, false)
	mine := submitKeyed(t, c, alice, false)
	if len(mine) != 1 || mine[0] == first[0] {
		t.Fatalf("alice's submission under admin's key returned %v (admin's: %v), want a job of her own", mine, first)
	}
	j, err := c.store.Job(t.Context(), mine[0])
	if err != nil || j.User != "alice" || j.Env != nil || !slices.Equal(j.Command, alice.Command) {
		t.Fatalf("alice's job = %+v, %v; want hers, without admin's env", j, err)
	}
	if n := storedJobs(t, c); n != 2 {
		t.Fatalf("store holds %d jobs, want 2", n)
	}

	// Each user's repeat is a replay of their own first submission.
	if ids := submitKeyed(t, c, admin, true); !slices.Equal(ids, first) {
		t.Errorf("admin's repeat returned %v, want %v", ids, first)
	}
	if ids := submitKeyed(t, c, alice, true); !slices.Equal(ids, mine) {
		t.Errorf("alice's repeat returned %v, want %v", ids, mine)
	}

	// A different request under a used key: refused, nothing stored.
	other := keyed("alice", "nightly-eval", "echo", "bye")
	_, err = c.SubmitFull(t.Context(), other)
	checkConflict(t, err, mine[0])
	array := keyed("alice", "nightly-eval", "echo", "alice")
	array.Array = 1 // one job too, but an array's
	_, err = c.SubmitFull(t.Context(), array)
	checkConflict(t, err, mine[0])
	if n := storedJobs(t, c); n != 2 {
		t.Fatalf("store holds %d jobs after refused requests, want 2", n)
	}
	stop()

	// After a restart the stored specs still match their requests, and
	// the rebuilt map is keyed per user.
	c, _ = startOn(t, path, now.Add(time.Hour))
	if ids := submitKeyed(t, c, admin, true); !slices.Equal(ids, first) {
		t.Errorf("admin's repeat after restart returned %v, want %v", ids, first)
	}
	if ids := submitKeyed(t, c, alice, true); !slices.Equal(ids, mine) {
		t.Errorf("alice's repeat after restart returned %v, want %v", ids, mine)
	}
	_, err = c.SubmitFull(t.Context(), other)
	checkConflict(t, err, mine[0])
	var rebuilt []string
	if err := c.do(t.Context(), func() { rebuilt = c.idem[idemKey{user: "alice", key: "nightly-eval"}] }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rebuilt, mine) {
		t.Errorf("rebuilt idempotency map holds %v for alice, want %v", rebuilt, mine)
	}
	if n := storedJobs(t, c); n != 2 {
		t.Fatalf("store holds %d jobs after restart, want 2", n)
	}
}

// TestIdempotencyReplayComparesWithDefaults: a request that leaves fields
// to createJobs's defaults (name, a service's retries) and uses every
// field that goes through the store's encoding is the same request when
// repeated, as an array too; changing any one field is another request.
func TestIdempotencyReplayComparesWithDefaults(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC))
	full := keyed("bob", "svc-1", "/opt/bin/serve", "--port", "8000")
	full.Kind = berth.KindService
	full.Array = 3
	full.Resources = berth.Resources{GPUs: 2, GPUMemory: 40 << 30, GPUType: "H100", CPUs: 1.5, Memory: 16 << 30}
	full.Constraints = berth.Constraints{Host: "gpu-1", Labels: map[string]string{"zone": "a", "rack": "7"}}
	full.Env = map[string]string{"B": "2", "A": "1"}
	full.Workdir = "/work"
	full.MaxRuntime = berth.Duration(90 * time.Minute)
	full.StallTimeout = berth.Duration(1500 * time.Millisecond)
	full.Preemptible = true
	full.Model = "llama-70b"
	first := submitKeyed(t, c, full, false)
	if len(first) != 3 {
		t.Fatalf("%d jobs, want 3", len(first))
	}
	j, err := c.store.Job(t.Context(), first[0])
	if err != nil || j.Name != "serve" || j.Retries != berth.DefaultServiceRestarts {
		t.Fatalf("stored job %+v, %v; want the default name and retries", j, err)
	}
	if ids := submitKeyed(t, c, full, true); !slices.Equal(ids, first) {
		t.Errorf("repeat returned %v, want %v", ids, first)
	}
	// Naming the defaults is the same request.
	named := *full
	named.Name, named.Retries = "serve", berth.DefaultServiceRestarts
	if ids := submitKeyed(t, c, &named, true); !slices.Equal(ids, first) {
		t.Errorf("repeat naming the defaults returned %v, want %v", ids, first)
	}
	for name, change := range map[string]func(r *berth.SubmitRequest){
		"array size": func(r *berth.SubmitRequest) { r.Array = 2 },
		"priority":   func(r *berth.SubmitRequest) { r.Priority++ },
		"env":        func(r *berth.SubmitRequest) { r.Env = map[string]string{"A": "1"} },
		"retries":    func(r *berth.SubmitRequest) { r.Retries = 3 },
		"runtime":    func(r *berth.SubmitRequest) { r.MaxRuntime = berth.Duration(time.Hour) },
		"cpus":       func(r *berth.SubmitRequest) { r.Resources.CPUs = 2 },
		"name":       func(r *berth.SubmitRequest) { r.Name = "other" },
	} {
		r := *full
		change(&r)
		_, err := c.SubmitFull(t.Context(), &r)
		if e, ok := err.(*berth.Error); !ok || e.Code != berth.ECodeConflict {
			t.Errorf("changed %s: err %v, want a conflict", name, err)
		}
	}
	if n := storedJobs(t, c); n != 3 {
		t.Fatalf("store holds %d jobs, want 3", n)
	}
}

// TestIdempotencyBeforeTheFirstSubmissionIsDurable checks the loop's own
// map, which answers repeats that arrive before the first submission is
// in the store: the loop is held while the requests queue, so that all
// pass the store lookup before any is stored.
func TestIdempotencyBeforeTheFirstSubmissionIsDurable(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC))
	type answer struct {
		req      *berth.SubmitRequest
		ids      []string
		replayed bool
		err      error
	}
	reqs := []*berth.SubmitRequest{
		keyed("carol", "k", "true"), keyed("carol", "k", "true"),
		keyed("dave", "k", "false"), keyed("dave", "k", "false"),
	}
	release := make(chan struct{})
	if err := c.post(t.Context(), func() { <-release }); err != nil {
		t.Fatal(err)
	}
	answers := make(chan answer, len(reqs))
	for _, req := range reqs {
		go func() {
			r := *req
			sub, err := c.SubmitFull(t.Context(), &r)
			a := answer{req: req, err: err}
			if err == nil {
				a.replayed = sub.Replayed
				for _, j := range sub.Jobs {
					a.ids = append(a.ids, j.ID)
				}
			}
			answers <- a
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(c.inbox) < len(reqs) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	got := map[string][]string{} // user → ids
	replays := map[string]int{}
	for range reqs {
		a := <-answers
		if a.err != nil {
			t.Fatalf("submit as %s: %v", a.req.User, a.err)
		}
		if prev, ok := got[a.req.User]; ok && !slices.Equal(prev, a.ids) {
			t.Errorf("%s got %v and %v, want the same job twice", a.req.User, prev, a.ids)
		}
		got[a.req.User] = a.ids
		if a.replayed {
			replays[a.req.User]++
		}
	}
	if len(got["carol"]) != 1 || len(got["dave"]) != 1 || got["carol"][0] == got["dave"][0] {
		t.Errorf("carol got %v and dave %v, want a job each", got["carol"], got["dave"])
	}
	if replays["carol"] != 1 || replays["dave"] != 1 {
		t.Errorf("replays %v, want one per user", replays)
	}
	if n := storedJobs(t, c); n != 2 {
		t.Errorf("store holds %d jobs, want 2", n)
	}

	// A different request queued behind the first is refused.
	release = make(chan struct{})
	if err := c.post(t.Context(), func() { <-release }); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, cmd := range []string{"sleep", "date"} {
		go func() {
			_, err := c.SubmitFull(t.Context(), keyed("erin", "k2", cmd))
			errs <- err
		}()
	}
	for len(c.inbox) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	var conflicts int
	for range 2 {
		if err := <-errs; err != nil {
			if e, ok := err.(*berth.Error); !ok || e.Code != berth.ECodeConflict || e.Field != "idempotency_key" {
				t.Errorf("err %v, want a conflict on idempotency_key", err)
			}
			conflicts++
		}
	}
	if conflicts != 1 {
		t.Errorf("%d of 2 different requests under one key refused, want 1", conflicts)
	}
	if n := storedJobs(t, c); n != 3 {
		t.Errorf("store holds %d jobs, want 3", n)
	}
}

// TestABackingOffJobSaysWhy: a job waiting out its retry's backoff is not
// queued, so its reason is the backoff alone, not a wait for resources.
func TestABackingOffJobSaysWhy(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Now())
	agent := registerAgent(t, c, workerReg())
	id := submitSleep(t, c, func(spec *berth.JobSpec) { spec.Retries = 1 })
	agent.exit(agent.acceptNext(), 1)
	agent.await(wire.TypeAck) // the result is handled
	d, err := c.Job(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != berth.JobPending || !strings.HasPrefix(d.Reason, "retrying in 1s after attempt 1 failed") {
		t.Errorf("job in its backoff: %s, %q; want pending, retrying in 1s", d.State, d.Reason)
	}
}

// TestJobsNameTheirBackend: a job runs on the agent pool, named or by
// default; a backend this server does not have is refused on backend and
// nothing is stored.
func TestJobsNameTheirBackend(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Now())
	for _, backend := range []string{"", AgentPoolBackend} {
		spec := berth.DefaultJobSpec()
		spec.Command, spec.Backend = berth.Argv{"true"}, backend
		if _, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec}); err != nil {
			t.Errorf("backend %q: %v", backend, err)
		}
	}
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Backend = berth.Argv{"true"}, "k8s"
	_, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec})
	var e *berth.Error
	if !errors.As(err, &e) || e.Code != berth.ECodeInvalid || e.Field != "backend" {
		t.Errorf("backend k8s: %v, want invalid on backend", err)
	}
	if n := storedJobs(t, c); n != 2 {
		t.Errorf("store holds %d jobs, want 2", n)
	}
}

// TestDefaultNames: a job without a name is named after the model its
// template serves, else its template, else its program; a name given
// wins.
func TestDefaultNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, template, model, modelVar string
		command                         berth.Argv
		want                            string
	}{
		{command: berth.Argv{"/usr/bin/python3", "-m", "http.server"}, want: "python3"},
		{template: "vllm", modelVar: "Qwen/Qwen2-7B-Instruct", command: berth.Argv{"vllm", "serve"}, want: "Qwen2-7B-Instruct"},
		{template: "vllm", model: "org/chat", modelVar: "/models/x", command: berth.Argv{"vllm"}, want: "chat"},
		{template: "tgi", modelVar: "bad name!", command: berth.Argv{"python3", "serve.py"}, want: "tgi"},
		{template: "jupyterlab", command: berth.Argv{"python3", "-m", "jupyterlab"}, want: "jupyterlab"},
		{name: "web", template: "vllm", modelVar: "org/m", command: berth.Argv{"vllm"}, want: "web"},
		{command: berth.Argv{"./no good name"}, want: "job"},
	} {
		spec := berth.DefaultJobSpec()
		spec.Name, spec.Template, spec.Model, spec.Command = tc.name, tc.template, tc.model, tc.command
		if tc.modelVar != "" {
			spec.Vars = map[string]string{"MODEL_NAME": tc.modelVar}
		}
		if got := withDefaults(spec).Name; got != tc.want {
			t.Errorf("%+v: named %q, want %q", tc, got, tc.want)
		}
	}
}
