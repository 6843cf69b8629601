package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/gateway"
)

// gatewayTemplate writes the fake model server's template with vLLM's
// full list of startup markers, so that the gateway names the warming
// phases.
func gatewayTemplate(t *testing.T) string {
	t.Helper()
	return writeFakeLLMTemplate(t, `warmup: 30s
  stall: 10s
  markers: ["vLLM API server version", "Resolved architecture", "Loading safetensors checkpoint shards", "Loading weights took",
    "Model loading took", "Available KV cache memory", "GPU KV cache size", "Capturing CUDA graph", "Graph capturing finished",
    "init engine", "Starting vLLM API server", "Application startup complete"]`)
}

// gwCall is one request to the gateway of cl and its answer.
type gwCall struct {
	status  int
	header  http.Header
	body    string
	errCode string // an OpenAI-style error's code
	phase   string // its phase
	message string
}

// gw sends body to route (GET when body is "") on cl's gateway with key
// ("" sends no Authorization header).
func (cl *cluster) gw(key, route, body string) gwCall {
	cl.t.Helper()
	method, rd := http.MethodGet, io.Reader(nil)
	if body != "" {
		method, rd = http.MethodPost, strings.NewReader(body)
	}
	req, err := http.NewRequest(method, cl.url+route, rd)
	if err != nil {
		cl.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cl.t.Fatalf("%s %s: %v", method, route, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		cl.t.Fatalf("%s %s: reading the answer: %v", method, route, err)
	}
	c := gwCall{status: resp.StatusCode, header: resp.Header, body: string(b)}
	if resp.StatusCode >= 400 {
		var e struct {
			Error struct{ Code, Phase, Message string }
		}
		if err := json.Unmarshal(b, &e); err == nil {
			c.errCode, c.phase, c.message = e.Error.Code, e.Error.Phase, e.Error.Message
		}
	}
	return c
}

// models returns the gateway's /v1/models by id.
func (cl *cluster) models(key string) map[string]gateway.Model {
	cl.t.Helper()
	c := cl.gw(key, "/v1/models", "")
	var list gateway.ModelList
	if err := json.Unmarshal([]byte(c.body), &list); err != nil || c.status != http.StatusOK {
		cl.t.Fatalf("GET /v1/models: %d %s", c.status, c.body)
	}
	out := map[string]gateway.Model{}
	for _, m := range list.Data {
		out[m.ID] = m
	}
	return out
}

// token makes a token with berth token create and extra flags.
func (cl *cluster) token(extra ...string) string {
	cl.t.Helper()
	tok := strings.TrimSpace(cl.cli(append([]string{"token", "create"}, extra...)...))
	if tok == "" || strings.ContainsAny(tok, " \n") {
		cl.t.Fatalf("berth token create %v printed %q, want one token", extra, tok)
	}
	return tok
}

func chatBody(model string, stream bool) string {
	s := ""
	if stream {
		s = `,"stream":true,"stream_options":{"include_usage":true}`
	}
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"say hello to the test"}],"response_format":{"type":"text"}%s}`, model, s)
}

// TestGatewayRoutesStreamsAndFailsOver runs a model as a service with two
// replicas on two real agents and calls it through the server's gateway
// with Berth tokens: requests spread over both replicas, a stream arrives
// byte for byte as the replica sends it, usage reaches the metrics, a
// bad key, a model outside a token's allow-list and a token past its
// rate limit are refused OpenAI-style, and when one replica dies every
// request still succeeds on the other.
func TestGatewayRoutesStreamsAndFailsOver(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--templates", gatewayTemplate(t))
	cl.addAgent("gpu1", "--ports", "18600-18649")
	cl.addAgent("gpu2", "--ports", "18650-18699")
	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec(), Array: 2}
	req.Kind, req.Name, req.Template = berth.KindService, "chat", "fakellm"
	req.Vars = map[string]string{"MODEL_NAME": "org/chat"}
	cl.submit(req)

	// org/flaky: two replicas, one answering every request with a 500.
	serveFake(cl, "flaky-ok", "org/flaky", "")
	serveFake(cl, "flaky-500", "org/flaky", "--warmup 300ms --status 500")
	// org/slow streams an event every 400 ms.
	serveFake(cl, "slow", "org/slow", "--warmup 300ms --stream-delay 400ms")

	app := cl.token("--role", "user", "--name", "app")
	cl.eventually(60*time.Second, "org/chat and org/flaky ready on two replicas each", func() bool {
		ms := cl.models(app)
		return ms["org/chat"].Phase == gateway.PhaseReady && ms["org/chat"].Replicas == 2 &&
			ms["org/flaky"].Phase == gateway.PhaseReady && ms["org/flaky"].Replicas == 2 &&
			ms["org/slow"].Phase == gateway.PhaseReady
	})

	// Requests spread over both replicas, each answer the replica's own.
	replicas := map[string]int{}
	for range 10 {
		c := cl.gw(app, "/v1/chat/completions", chatBody("org/chat", false))
		var ans struct {
			SystemFingerprint string `json:"system_fingerprint"`
			Choices           []struct{ Message struct{ Content string } }
		}
		if err := json.Unmarshal([]byte(c.body), &ans); c.status != http.StatusOK || err != nil || len(ans.Choices) != 1 ||
			ans.Choices[0].Message.Content != "Hello from the fake model server." {
			t.Fatalf("chat: %d %s", c.status, c.body)
		}
		replicas[ans.SystemFingerprint]++
	}
	if len(replicas) != 2 {
		t.Fatalf("answers by replica %v, want both replicas", replicas)
	}
	if c := cl.gw(app, "/v1/embeddings", `{"model":"org/chat","input":["a b","c"]}`); c.status != http.StatusOK || !strings.Contains(c.body, `"embedding"`) {
		t.Fatalf("embeddings: %d %s", c.status, c.body)
	}
	if c := cl.gw(app, "/v1/completions", `{"model":"org/chat","prompt":"once upon"}`); c.status != http.StatusOK || !strings.Contains(c.body, `"text_completion"`) {
		t.Fatalf("completions: %d %s", c.status, c.body)
	}

	// The replica answering 500 is retried on the other and cooled down.
	for n := range 6 {
		if c := cl.gw(app, "/v1/chat/completions", chatBody("org/flaky", n%2 == 1)); c.status != http.StatusOK {
			t.Fatalf("org/flaky request %d: %d %s, want the healthy replica's answer", n, c.status, c.body)
		}
	}
	if _, m := cl.scrape(); m[`berth_gateway_retries_total{model="org/flaky"}`] < 1 {
		t.Fatalf("no retry counted for org/flaky")
	}

	// A stream arrives byte for byte as the replica sends it.
	through := cl.gw(app, "/v1/chat/completions", chatBody("org/chat", true))
	eps, err := cl.c.Endpoints(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(eps, func(e *berth.Endpoint) bool { return e.AttemptID == through.header.Get(gateway.ReplicaHeader) })
	if through.status != http.StatusOK || i < 0 {
		t.Fatalf("stream through the gateway: %d from replica %q (endpoints %+v)", through.status, through.header.Get(gateway.ReplicaHeader), eps)
	}
	resp, err := http.Post(eps[i].URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("org/chat", true)))
	if err != nil {
		t.Fatal(err)
	}
	direct, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if through.body != string(direct) || !strings.HasSuffix(through.body, "data: [DONE]\n\n") || !strings.Contains(through.body, `"usage"`) {
		t.Fatalf("the stream through the gateway:\n%s\ndiffers from the replica's own:\n%s", through.body, direct)
	}

	// A slow stream reaches the client event by event: when its first
	// event arrives, the rest has not been written by the replica yet.
	sreq, _ := http.NewRequest(http.MethodPost, cl.url+"/v1/chat/completions", strings.NewReader(chatBody("org/slow", true)))
	sreq.Header.Set("Authorization", "Bearer "+app)
	sresp, err := http.DefaultClient.Do(sreq)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(sresp.Body)
	first, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "data: ") {
		t.Fatalf("the slow stream's first line: %q, %v", first, err)
	}
	if ahead, _ := br.Peek(br.Buffered()); bytes.Contains(ahead, []byte("[DONE]")) {
		t.Fatalf("the slow stream arrived whole, not event by event: %q then %q", first, ahead)
	}
	rest, err := io.ReadAll(br)
	sresp.Body.Close()
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the slow stream's end: %q, %v", rest, err)
	}

	// A bad key is refused; a viewer may not call models.
	if c := cl.gw("not-a-token", "/v1/models", ""); c.status != http.StatusUnauthorized || c.errCode != "invalid_api_key" {
		t.Fatalf("a bad key: %d %s, want 401 invalid_api_key", c.status, c.body)
	}
	viewer := cl.token("--role", "viewer", "--name", "watcher")
	if c := cl.gw(viewer, "/v1/chat/completions", chatBody("org/chat", false)); c.status != http.StatusForbidden {
		t.Fatalf("a viewer's key: %d %s, want 403", c.status, c.body)
	}
	// A token limited to another model and to 2 requests a minute.
	limited := cl.token("--role", "user", "--name", "intern", "--models", "org/other", "--rpm", "2")
	if c := cl.gw(limited, "/v1/chat/completions", chatBody("org/chat", false)); c.status != http.StatusForbidden || c.errCode != "model_not_allowed" {
		t.Fatalf("a model outside the token's allow-list: %d %s, want 403 model_not_allowed", c.status, c.body)
	}
	if ms := cl.models(limited); len(ms) != 0 {
		t.Fatalf("the limited token's /v1/models: %v, want none (org/other is not served)", ms)
	}
	if c := cl.gw(limited, "/v1/models", ""); c.status != http.StatusTooManyRequests || c.errCode != "rate_limit_exceeded" || c.header.Get("Retry-After") == "" {
		t.Fatalf("the limited token's third request in a minute: %d %s (Retry-After %q), want 429", c.status, c.body, c.header.Get("Retry-After"))
	}
	if out, err := cliErr(cl, "token", "create", "--role", "user", "--name", "x", "--rpm", "-1"); err == nil || !strings.Contains(out, "--rpm") {
		t.Fatalf("berth token create --rpm -1: %v, %s; want an error naming --rpm", err, out)
	}

	// Usage reaches the metrics, per user; the exposition is Prometheus'.
	text, m := cl.scrape()
	if m[`berth_gateway_tokens_total{model="org/chat",user="app",kind="completion"}`] < 6*11 ||
		m[`berth_gateway_requests_total{route="/v1/chat/completions",model="org/chat",code="200"}`] < 11 ||
		m[`berth_gateway_request_duration_seconds_count{route="/v1/chat/completions"}`] < 11 {
		t.Fatalf("gateway metrics:\n%s", text)
	}
	checkExposition(t, text)

	// One replica dies: every request still succeeds, on the other.
	dead := eps[i]
	if resp, err := http.Post(dead.URL+"/fake/exit", "", nil); err == nil {
		resp.Body.Close()
		t.Fatalf("the replica answered POST /fake/exit: %s, want it gone", resp.Status)
	}
	for n := range 10 {
		c := cl.gw(app, "/v1/chat/completions", chatBody("org/chat", n%2 == 0))
		if c.status != http.StatusOK || c.header.Get(gateway.ReplicaHeader) == dead.AttemptID {
			t.Fatalf("request %d after a replica died: %d from %q: %s", n, c.status, c.header.Get(gateway.ReplicaHeader), c.body)
		}
	}
}

// cliErr runs berth with args against cl's server and returns its output
// and error.
func cliErr(cl *cluster, args ...string) (string, error) {
	cmd := exec.Command(berthBin, append([]string{"--server", cl.url}, args...)...)
	cmd.Dir = cl.t.TempDir()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestGatewayWarmingAndSwap swaps a pool between two models while a client
// keeps calling them through the gateway: a model warming up answers 503
// naming its phase from vLLM's markers (loading weights, KV cache, CUDA
// graph capture) with a Retry-After, /v1/models shows that phase, and
// every answer during the swap is the model's or such an error — never
// a hang, a bare 502 or another model's answer.
func TestGatewayWarmingAndSwap(t *testing.T) {
	t.Parallel()
	catalog := filepath.Join(t.TempDir(), "catalog.yaml")
	if err := os.WriteFile(catalog, []byte(`pools:
  spark: {labels: {pool: spark}}
models:
  small: {pool: spark, template: fakellm, vars: {MODEL_NAME: org/small, FLAGS: "--warmup 10s"}}
  big: {pool: spark, template: fakellm, vars: {MODEL_NAME: org/big, FLAGS: "--warmup 4s"}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := newCluster(t, "--templates", gatewayTemplate(t), "--catalog", catalog)
	cl.addAgent("spark1", "--labels", "pool=spark", "--ports", "18700-18749")
	ctx := context.Background()
	swap := func(key string) *berth.Swap {
		sw, err := cl.c.Swap(ctx, berth.SwapRequest{ModelKey: key}, "")
		if err != nil {
			t.Fatalf("swap to %s: %v", key, err)
		}
		return sw
	}
	awaitSwap := func(sw *berth.Swap) {
		cl.eventually(60*time.Second, "swap to "+sw.ModelKey, func() bool {
			s, err := cl.c.GetSwap(ctx, sw.ID)
			if err != nil || s.State == berth.SwapStateFailed {
				t.Fatalf("swap %s: %+v, %v", sw.ModelKey, s, err)
			}
			return s.State == berth.SwapStateReady
		})
	}

	// While small warms: 503 with its phase, and the phases of vLLM's markers.
	// Its warmup of 10 s keeps each of its ten early markers for 1 s: the
	// CUDA graph phase lasts one marker, and with 0.4 s (a 4 s warmup) a
	// loaded machine could pass it between two of the agent's log reads
	// and this loop's requests.
	sw := swap("small")
	phases := map[string]bool{}
	listed := map[string]bool{}
	cl.eventually(60*time.Second, "org/small serving", func() bool {
		c := cl.gw("", "/v1/chat/completions", chatBody("org/small", false))
		switch {
		case c.status == http.StatusOK:
			return true
		case c.status == http.StatusNotFound && c.errCode == "model_not_found": // the swap has not submitted its service yet
		case c.status == http.StatusServiceUnavailable && c.errCode == "model_not_ready" && c.header.Get("Retry-After") != "":
			phases[c.phase] = true
			if !strings.Contains(c.message, "being swapped in") {
				t.Errorf("a 503 while swapping in: %s, want it to say so", c.body)
			}
		default:
			t.Fatalf("while org/small warms: %d %s", c.status, c.body)
		}
		if m, ok := cl.models("")["org/small"]; ok {
			listed[m.Phase] = true
		}
		return false
	})
	awaitSwap(sw)
	for _, want := range []string{gateway.PhaseLoadingWeights, gateway.PhaseKVCache, gateway.PhaseCUDAGraphs} {
		if !phases[want] || !listed[want] {
			t.Errorf("phase %s not seen while warming: 503s named %v, /v1/models %v", want, phases, listed)
		}
	}

	// Traffic to both models through a swap from small to big.
	var mu sync.Mutex
	seen := map[string]map[int]int{"org/small": {}, "org/big": {}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, model := range []string{"org/small", "org/big"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := cl.gw("", "/v1/chat/completions", chatBody(model, false))
				ok := c.status == http.StatusOK && strings.Contains(c.body, `"model":"`+model+`"`) ||
					c.status == http.StatusServiceUnavailable && c.errCode == "model_not_ready" ||
					c.status == http.StatusNotFound && c.errCode == "model_not_found"
				if !ok {
					t.Errorf("%s during the swap: %d %s", model, c.status, c.body)
				}
				mu.Lock()
				seen[model][c.status]++
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	// The swap stops small at once, so it starts only once the traffic
	// has been served by small: started before, it could stop small before
	// the first request.
	cl.eventually(30*time.Second, "org/small answering the traffic before the swap", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["org/small"][http.StatusOK] > 0
	})
	awaitSwap(swap("big"))
	cl.eventually(30*time.Second, "org/big answering through the gateway", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["org/big"][http.StatusOK] > 0
	})
	close(stop)
	wg.Wait()
	if seen["org/small"][http.StatusOK] == 0 || seen["org/big"][http.StatusServiceUnavailable] == 0 {
		t.Fatalf("answers by model and status during the swap: %v; want small served, then big warming, then big served", seen)
	}
	if c := cl.gw("", "/v1/chat/completions", chatBody("org/small", false)); c.status == http.StatusOK {
		t.Fatalf("org/small after the swap away: %d %s, want it gone", c.status, c.body)
	}
}

// TestGatewayOpenAISDK drives the gateway with OpenAI's official Node SDK
// (the openai npm package, which this project does not own) under
// Debian's node: models, a chat completion, a stream, embeddings, and the
// SDK's own error for a bad key. CI installs the package (.ci/run) into
// ~/.cache/berth-npm; without it the test fails under CI and is skipped
// elsewhere.
func TestGatewayOpenAISDK(t *testing.T) {
	t.Parallel()
	node, sdk := openAISDK(t)
	cl := newCluster(t, "--templates", gatewayTemplate(t))
	cl.addAgent("gpu1", "--ports", "18750-18799")
	serveFake(cl, "chat", "org/chat", "")
	key := cl.token("--role", "user", "--name", "sdk")
	cl.eventually(60*time.Second, "org/chat ready", func() bool { return cl.models(key)["org/chat"].Phase == gateway.PhaseReady })
	cmd := exec.Command(node, "testdata/openai-sdk.cjs")
	cmd.Env = append(os.Environ(), "OPENAI_SDK="+sdk, "BASE_URL="+cl.url+"/v1", "API_KEY="+key, "MODEL=org/chat")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the OpenAI SDK against the gateway: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "all checks passed") {
		t.Fatalf("the SDK script said:\n%s", out.String())
	}
	t.Logf("%s", out.String())
}

// openAISDK returns node and the openai package's directory: from
// $BERTH_NPM_DIR (default ~/.cache/berth-npm, where .ci/run installs it).
func openAISDK(t *testing.T) (node, sdk string) {
	t.Helper()
	missing := func(what string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: .ci/run installs it (npm install --prefix ~/.cache/berth-npm openai)", what)
		}
		t.Skipf("%s: the OpenAI SDK test needs node and the openai npm package (.ci/run installs them)", what)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("no node on PATH")
	}
	dir := os.Getenv("BERTH_NPM_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "berth-npm")
	}
	sdk = filepath.Join(dir, "node_modules", "openai")
	if _, err := os.Stat(filepath.Join(sdk, "package.json")); err != nil {
		missing("no openai npm package in " + dir)
	}
	return node, sdk
}
