package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/arbiter"
	"github.com/berth-dev/berth/webhook"
)

var (
	fakeVLLMOnce sync.Once
	fakeVLLMBin  string
	fakeVLLMErr  error
)

// fakeVLLM builds, once, the fake OpenAI-compatible model server the
// agent's readiness tests use, and returns its path.
func fakeVLLM(t *testing.T) string {
	t.Helper()
	fakeVLLMOnce.Do(func() {
		fakeVLLMBin = filepath.Join(filepath.Dir(berthBin), "fakevllm")
		out, err := exec.Command("go", "build", "-o", fakeVLLMBin, "../agent/testdata/fakevllm").CombinedOutput()
		if err != nil {
			fakeVLLMErr = fmt.Errorf("build fakevllm: %v: %s", err, out)
		}
	})
	if fakeVLLMErr != nil {
		t.Fatal(fakeVLLMErr)
	}
	return fakeVLLMBin
}

// fakeLLMTemplate writes a service template that runs the fake model
// server like vLLM (same markers, /v1/models readiness, /health liveness),
// with extra flags from the job's FLAGS variable, and returns its
// directory.
func fakeLLMTemplate(t *testing.T) string {
	t.Helper()
	return writeFakeLLMTemplate(t, `warmup: 20s
  stall: 3s
  markers: ["vLLM API server version", "Loading weights took", "Application startup complete"]`)
}

// writeFakeLLMTemplate writes the fake model server's template, fakellm,
// with the readiness budgets and markers given (YAML lines under
// readiness), and returns its directory.
func writeFakeLLMTemplate(t *testing.T, budgets string) string {
	t.Helper()
	dir := t.TempDir()
	tpl := fmt.Sprintf(`name: fakellm
description: the fake vLLM of the tests
command: [%q, --port, "{{SERVICE_PORT}}", --model, "{{MODEL_NAME}}", --markers, "{{FLAGS}}"]
port: true
vars:
  - {name: MODEL_NAME, required: true}
  - {name: FLAGS, args: true, default: "--warmup 300ms"}
readiness:
  probe: {kind: http, path: /v1/models, model_in: "{{MODEL_NAME}}"}
  infra: 20s
  %s
  fatal: [{substring: "CUDA out of memory", class: workload_fatal}]
  liveness: {kind: http, path: /health}
  live_every: 200ms
  live_failures: 2
`, fakeVLLM(t), budgets)
	if err := os.WriteFile(filepath.Join(dir, "fakellm.yaml"), []byte(tpl), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// service returns the service job id's entry in the services listing, or
// nil.
func (cl *cluster) service(id string) *berth.Service {
	cl.t.Helper()
	list, err := cl.c.Services(context.Background())
	if err != nil {
		cl.t.Fatalf("services: %v", err)
	}
	for _, s := range list {
		if s.ID == id {
			return s
		}
	}
	return nil
}

func serveFake(cl *cluster, name, model string, flags string) string {
	cl.t.Helper()
	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Kind, req.Name, req.Template = berth.KindService, name, "fakellm"
	req.Vars = map[string]string{"MODEL_NAME": model}
	if flags != "" {
		req.Vars["FLAGS"] = flags
	}
	req.Retries = 2
	return cl.submit(req)[0].ID
}

// TestServiceBecomesReadyAndServes runs a templated service on a real
// agent: its port is allocated, the fake model server warms up printing
// vLLM's markers, readiness waits for /v1/models to list the model, and
// then its endpoint is listed and answers.
func TestServiceBecomesReadyAndServes(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--templates", fakeLLMTemplate(t))
	cl.addAgent("gpu1", "--ports", "18100-18199")

	// An unknown variable is refused at submit, not at run.
	bad := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	bad.Kind, bad.Template, bad.Vars = berth.KindService, "fakellm", map[string]string{"MODEL_NAME": "m", "NOPE": "1"}
	if _, err := cl.c.Submit(context.Background(), bad); berth.ErrorCode(err) != berth.ECodeInvalid || !strings.Contains(err.Error(), "NOPE") {
		t.Fatalf("a job with an unknown variable: %v, want an invalid error naming it", err)
	}

	id := serveFake(cl, "chat", "org/chat-7b", "")
	var svc *berth.Service
	cl.eventually(30*time.Second, "the service ready", func() bool {
		svc = cl.service(id)
		return svc != nil && svc.Phase == berth.PhaseReady
	})
	if svc.Port < 18100 || svc.Port > 18199 || svc.Host != "gpu1" {
		t.Fatalf("service ready at %s:%d, want gpu1 with a port in 18100-18199", svc.Host, svc.Port)
	}
	eps, err := cl.c.Endpoints(context.Background())
	if err != nil || len(eps) != 1 || eps[0].JobID != id || eps[0].Port != svc.Port || eps[0].Model != "org/chat-7b" {
		t.Fatalf("endpoints = %+v, %v; want the service's, model org/chat-7b", eps, err)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/models", svc.Port))
	if err != nil {
		t.Fatal(err)
	}
	var models struct{ Data []struct{ ID string } }
	err = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "org/chat-7b" {
		t.Fatalf("the endpoint's /v1/models: %+v, %v", models, err)
	}
	cl.awaitEvent(10*time.Second, "service.ready", func(e map[string]any) bool {
		return e["type"] == "service.ready" && e["job_id"] == id
	})
	// A service runs until stopped; cancelling it frees its endpoint.
	if _, err := cl.c.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	cl.awaitState(id, 30*time.Second, berth.JobCancelled)
	if eps, err := cl.c.Endpoints(context.Background()); err != nil || len(eps) != 0 {
		t.Fatalf("endpoints after cancelling: %+v, %v", eps, err)
	}
}

// TestServiceFailuresAreClassified checks the failure classes a service
// attempt carries, and that a failing service is restarted with backoff
// until its limit, then fails.
func TestServiceFailuresAreClassified(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--templates", fakeLLMTemplate(t))
	cl.addAgent("gpu1", "--ports", "18200-18299")
	for _, tc := range []struct {
		name, flags, class string
	}{
		{"stall", "--stall", berth.FailureStall},
		{"crash", "--warmup 5s --crash-after 500ms", berth.FailureWorkloadFatal},
	} {
		id := serveFake(cl, tc.name, "org/m", tc.flags)
		d := cl.awaitState(id, 90*time.Second, berth.JobFailed)
		if len(d.AttemptList) != 3 {
			t.Fatalf("%s: %d attempts, want 3 (the first and 2 restarts)", tc.name, len(d.AttemptList))
		}
		for _, a := range d.AttemptList {
			if a.FailureClass != tc.class || a.Phase != berth.PhaseFailed {
				t.Errorf("%s: attempt %s phase %q class %q, want failed %s (%s)", tc.name, a.ID, a.Phase, a.FailureClass, tc.class, a.Reason)
			}
		}
		if gap := d.AttemptList[2].CreatedAt.Sub(d.AttemptList[1].FinishedAt); gap < 1500*time.Millisecond {
			t.Errorf("%s: the second restart came %v after the attempt before it ended, want the 2 s backoff", tc.name, gap)
		}
		if !strings.Contains(d.Reason, "service ended 3 times in a row") {
			t.Errorf("%s: job reason %q", tc.name, d.Reason)
		}
	}
}

// TestSwapOnAPoolOfTwoAgents swaps what a pool of two real agents serves
// between two models of the catalog (the fake model server), gated by the
// swap lock, with the swap webhook received and its signature checked on
// loopback.
func TestSwapOnAPoolOfTwoAgents(t *testing.T) {
	t.Parallel()
	const secret = "webhook-secret"
	type delivery struct {
		event string
		body  berth.SwapEvent
		ok    bool
	}
	got := make(chan delivery, 8)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var ev berth.SwapEvent
		_ = json.Unmarshal(raw, &ev)
		got <- delivery{r.Header.Get("X-Spark-Event"), ev, webhook.Verify([]byte(secret), raw, r.Header.Get("X-Spark-Signature"))}
	}))
	defer hook.Close()
	catalog := filepath.Join(t.TempDir(), "catalog.yaml")
	if err := os.WriteFile(catalog, []byte(`pools:
  spark: {labels: {pool: spark}}
models:
  small: {pool: spark, template: fakellm, vars: {MODEL_NAME: org/small}}
  big: {pool: spark, template: fakellm, vars: {MODEL_NAME: org/big}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := newCluster(t, "--templates", fakeLLMTemplate(t), "--catalog", catalog,
		"--swap-webhook", hook.URL, "--swap-webhook-secret", secret)
	cl.addAgent("spark1", "--labels", "pool=spark", "--ports", "18300-18349")
	cl.addAgent("spark2", "--labels", "pool=spark", "--ports", "18350-18399")
	ctx := context.Background()

	if v, err := cl.c.ValidateSwap(ctx, "small"); err != nil || !v.OK || len(v.Workers) != 2 {
		t.Fatalf("validate: %+v, %v; want ok on both workers", v, err)
	}
	if _, err := cl.c.Swap(ctx, berth.SwapRequest{ModelKey: "nope"}, ""); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("swap to an unknown model: %v, want not found", err)
	}
	lock, err := cl.c.AcquireSwapLock(ctx, berth.SwapLockRequest{Holder: "nightly", Note: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.c.Swap(ctx, berth.SwapRequest{ModelKey: "small"}, ""); berth.ErrorCode(err) != berth.ECodeLocked {
		t.Fatalf("swap without the lock's token: %v, want 423 locked", err)
	}
	if dry, err := cl.c.Swap(ctx, berth.SwapRequest{ModelKey: "small", DryRun: true}, ""); err != nil || !dry.DryRun || dry.State != berth.SwapStateReady {
		t.Fatalf("a dry run under the lock: %+v, %v; want it answered, not blocked", dry, err)
	}

	swapTo := func(key, model string) *berth.Swap {
		sw, err := cl.c.Swap(ctx, berth.SwapRequest{ModelKey: key}, lock.Token)
		if err != nil {
			t.Fatalf("swap to %s: %v", key, err)
		}
		if _, err := cl.c.Swap(ctx, berth.SwapRequest{ModelKey: key}, lock.Token); berth.ErrorCode(err) != berth.ECodeConflict {
			t.Errorf("a second swap while one runs on the pool: %v, want conflict", err)
		}
		cl.eventually(60*time.Second, "swap to "+key+" ended", func() bool {
			sw, err = cl.c.GetSwap(ctx, sw.ID)
			return err == nil && (sw.State == berth.SwapStateReady || sw.State == berth.SwapStateFailed)
		})
		if sw.State != berth.SwapStateReady || sw.Returncode == nil || *sw.Returncode != 0 {
			t.Fatalf("swap to %s: %+v", key, sw)
		}
		eps, err := cl.c.Endpoints(ctx)
		if err != nil || len(eps) != 1 || eps[0].Model != model || eps[0].JobID != sw.Service {
			t.Fatalf("endpoints after the swap to %s: %+v, %v; want %s's only", key, eps, err, model)
		}
		select {
		case d := <-got:
			if d.event != berth.SwapComplete || !d.ok || d.body.JobID != sw.ID || d.body.ModelKey != key || d.body.State != "ready" || d.body.DryRun {
				t.Fatalf("webhook after the swap to %s: %+v", key, d)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no webhook after the swap to %s", key)
		}
		return sw
	}
	first := swapTo("small", "org/small")
	second := swapTo("big", "org/big")
	if len(second.Stopped) != 1 || second.Stopped[0] != first.Service {
		t.Fatalf("the swap to big stopped %v, want small's service %s", second.Stopped, first.Service)
	}
	cl.awaitState(first.Service, 30*time.Second, berth.JobCancelled)

	// The catalog changes through the API, written back to its file.
	if err := cl.c.PutCatalogModel(ctx, "tiny", berth.CatalogModel{Pool: "nowhere", Template: "fakellm"}); berth.ErrorCode(err) != berth.ECodeInvalid {
		t.Fatalf("a model on an unknown pool: %v, want invalid", err)
	}
	tiny := berth.CatalogModel{Pool: "spark", Template: "fakellm", Vars: map[string]string{"MODEL_NAME": "org/tiny"}}
	if err := cl.c.PutCatalogModel(ctx, "tiny", tiny); err != nil {
		t.Fatal(err)
	}
	if saved, err := arbiter.LoadCatalog(catalog); err != nil {
		t.Fatal(err)
	} else if m, _, err := saved.Model("tiny"); err != nil || m.Vars["MODEL_NAME"] != "org/tiny" {
		t.Fatalf("the catalog file after adding tiny: %+v, %v", m, err)
	}
	if err := cl.c.DeleteCatalogModel(ctx, "tiny"); err != nil {
		t.Fatal(err)
	}
	if raw, err := cl.c.Catalog(ctx); err != nil || strings.Contains(string(raw), "tiny") || !strings.Contains(string(raw), "org/big") {
		t.Fatalf("the catalog after deleting tiny: %s, %v", raw, err)
	}
	if _, err := cl.c.ReleaseSwapLock(ctx, lock.Token, false); err != nil {
		t.Fatal(err)
	}
	if _, m := cl.scrape(); m[`berth_swaps_total{outcome="ready"}`] != 2 || m[`berth_swaps_total{outcome="failed"}`] != 0 {
		t.Errorf("berth_swaps_total: ready %v, failed %v; want the 2 real swaps ready", m[`berth_swaps_total{outcome="ready"}`],
			m[`berth_swaps_total{outcome="failed"}`])
	}
	select {
	case d := <-got:
		t.Fatalf("an unexpected webhook: %+v (dry runs do not fire)", d)
	default:
	}
}

// TestServiceOutlivesItsAgent restarts the agent of a ready service, once
// killed (SIGKILL) and once stopped (SIGTERM): the service keeps running,
// and the new agent adopts it, with its port, within the lease; the job
// keeps its one attempt.
func TestServiceOutlivesItsAgent(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--templates", fakeLLMTemplate(t))
	agent := cl.addAgent("gpu1", "--ports", "18400-18499")
	id := serveFake(cl, "chat", "org/chat", "")
	var svc *berth.Service
	cl.eventually(30*time.Second, "the service ready", func() bool {
		svc = cl.service(id)
		return svc != nil && svc.Phase == berth.PhaseReady
	})
	serves := func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", svc.Port))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	for _, restart := range []struct {
		name string
		stop func(*proc)
	}{{"killed", (*proc).kill}, {"stopped", (*proc).stop}} {
		restart.stop(agent)
		if !serves() {
			t.Fatalf("agent %s: the service stopped serving with it", restart.name)
		}
		agent = cl.addAgent("gpu1", "--ports", "18400-18499")
		if _, ok := agent.out.await("adopted a service", 10*time.Second); !ok {
			t.Fatalf("agent %s: the new agent did not adopt the service:\n%s", restart.name, agent.out)
		}
		cl.eventually(30*time.Second, "the service ready again", func() bool {
			s := cl.service(id)
			return s != nil && s.Phase == berth.PhaseReady && s.AttemptID == svc.AttemptID && s.Port == svc.Port
		})
		if d := cl.job(id); d.State != berth.JobRunning || len(d.AttemptList) != 1 {
			t.Fatalf("agent %s: job %s with %d attempts, want still running its first", restart.name, d.State, len(d.AttemptList))
		}
		if !serves() {
			t.Fatalf("agent %s: the adopted service does not serve", restart.name)
		}
	}
	if _, err := cl.c.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	cl.awaitState(id, 30*time.Second, berth.JobCancelled)
	cl.eventually(10*time.Second, "the adopted service gone", func() bool { return !serves() })
}
