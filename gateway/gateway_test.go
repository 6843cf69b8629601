package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/gateway"
	"github.com/berth-dev/berth/internal/fakeclock"
)

// cluster is a fake gateway.Cluster: the endpoints and services a test
// sets.
type cluster struct {
	mu   sync.Mutex
	eps  []*berth.Endpoint
	svcs []*berth.Service
}

func (c *cluster) Endpoints(context.Context) ([]*berth.Endpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*berth.Endpoint(nil), c.eps...), nil
}

func (c *cluster) Services(context.Context) ([]*berth.Service, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*berth.Service(nil), c.svcs...), nil
}

func (c *cluster) set(eps []*berth.Endpoint, svcs ...*berth.Service) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eps, c.svcs = eps, svcs
}

// replica is an upstream on loopback answering with handler; its
// endpoint serves model.
func replica(t *testing.T, id, model string, handler http.HandlerFunc) *berth.Endpoint {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return &berth.Endpoint{JobID: "job-" + id, AttemptID: id, Host: "host-" + id, URL: srv.URL, Model: model, ReadySince: time.Unix(1000, 0)}
}

// answer is a replica handler that answers a chat completion naming
// itself, with usage.
func answer(id string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			http.Error(w, "the caller's credentials reached the replica", http.StatusTeapot)
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","replica":%q,"echo":%s,"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}`, id, body)
	}
}

// keys is the fake Authenticate: a key per caller.
func keys(callers map[string]*gateway.Caller) func(*http.Request) (*gateway.Caller, error) {
	return func(r *http.Request) (*gateway.Caller, error) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if c := callers[key]; ok && c != nil {
			return c, nil
		}
		return nil, berth.Errorf(berth.ECodeUnauthorized, "unknown token")
	}
}

// set makes the cluster eps and svcs, and moves the clock past the
// gateway's snapshot of it.
func (f *fixture) set(eps []*berth.Endpoint, svcs ...*berth.Service) {
	f.cl.set(eps, svcs...)
	f.clock.Advance(time.Millisecond)
}

type fixture struct {
	cl    *cluster
	gw    *gateway.Gateway
	srv   *httptest.Server
	clock *fakeclock.Clock
}

func newFixture(t *testing.T, callers map[string]*gateway.Caller) *fixture {
	t.Helper()
	if callers == nil {
		callers = map[string]*gateway.Caller{"k": {Name: "alice", TokenID: "t1"}}
	}
	f := &fixture{cl: &cluster{}, clock: fakeclock.New(time.Unix(5000, 0))}
	f.gw = gateway.New(gateway.Config{Cluster: f.cl, Authenticate: keys(callers), Refresh: time.Millisecond, Now: f.clock.Now})
	f.srv = httptest.NewServer(f.gw)
	t.Cleanup(f.srv.Close)
	return f
}

// post sends body to route with key and returns the response, its body
// read.
func (f *fixture) post(t *testing.T, key, route, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+route, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// openAIError decodes an OpenAI-style error body.
func openAIError(t *testing.T, body string) (code, typ, phase, msg string) {
	t.Helper()
	var e struct {
		Error struct{ Message, Type, Code, Phase string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an OpenAI-style error body: %s (%v)", body, err)
	}
	return e.Error.Code, e.Error.Type, e.Error.Phase, e.Error.Message
}

const chat = `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"},"vllm_extra":1}`

// TestRoutesToReadyReplicasUnchanged: requests reach both replicas of a
// model, with the body unchanged and the caller's credentials withheld,
// and the answer comes back as the replica gave it, naming the replica.
func TestRoutesToReadyReplicasUnchanged(t *testing.T) {
	f := newFixture(t, nil)
	f.set([]*berth.Endpoint{replica(t, "a", "m", answer("a")), replica(t, "b", "m", answer("b")),
		replica(t, "c", "other", answer("c"))})
	seen := map[string]int{}
	for range 6 {
		resp, body := f.post(t, "k", "/v1/chat/completions", chat)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		rep := resp.Header.Get(gateway.ReplicaHeader)
		want := fmt.Sprintf(`{"id":"x","replica":%q,"echo":%s,"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}`, rep, chat)
		if body != want {
			t.Fatalf("answer %s, want the replica's own %s", body, want)
		}
		seen[rep]++
	}
	if seen["a"] != 3 || seen["b"] != 3 {
		t.Fatalf("requests per replica %v, want 3 each on a and b (idle replicas taken in turn), none on c", seen)
	}
	var out strings.Builder
	f.gw.WriteMetrics(&out)
	for _, want := range []string{
		`berth_gateway_requests_total{route="/v1/chat/completions",model="m",code="200"} 6`,
		`berth_gateway_tokens_total{model="m",user="alice",kind="prompt"} 18`,
		`berth_gateway_tokens_total{model="m",user="alice",kind="completion"} 30`,
		`berth_gateway_request_duration_seconds_count{route="/v1/chat/completions"} 6`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, out.String())
		}
	}
}

// TestLeastOutstanding: while one replica holds a request, the next go to
// the other.
func TestLeastOutstanding(t *testing.T) {
	f := newFixture(t, nil)
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	slow := func(w http.ResponseWriter, r *http.Request) {
		held <- struct{}{}
		<-hold
		answer("slow")(w, r)
	}
	f.set([]*berth.Endpoint{replica(t, "slow", "m", slow), replica(t, "fast", "m", answer("fast"))})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The first request goes to one of them; keep sending until the slow one holds one.
		for {
			resp, _ := f.post(t, "k", "/v1/chat/completions", chat)
			if resp.Header.Get(gateway.ReplicaHeader) == "slow" {
				return
			}
		}
	}()
	<-held
	for range 4 {
		resp, body := f.post(t, "k", "/v1/chat/completions", chat)
		if rep := resp.Header.Get(gateway.ReplicaHeader); rep != "fast" {
			t.Fatalf("with slow holding a request, a request went to %q (%s), want fast", rep, body)
		}
	}
	close(hold)
	wg.Wait()
}

// TestRetryOnAnotherReplicaAndCooldown: a replica that answers 500, or
// cannot be reached, is retried once on the other and cooled down; with
// no other replica the 500 is the answer, unchanged.
func TestRetryOnAnotherReplicaAndCooldown(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  func(t *testing.T) *berth.Endpoint
	}{
		{"500", func(t *testing.T) *berth.Endpoint {
			return replica(t, "bad", "m", func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, `{"object":"error","message":"EngineDeadError"}`, http.StatusInternalServerError)
			})
		}},
		{"unreachable", func(t *testing.T) *berth.Endpoint {
			ep := replica(t, "bad", "m", answer("bad"))
			srv := httptest.NewServer(http.NotFoundHandler())
			ep.URL = srv.URL
			srv.Close() // nothing listens there now
			return ep
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			bad, good := tc.bad(t), replica(t, "good", "m", answer("good"))
			f.set([]*berth.Endpoint{bad, good})
			for i := range 4 {
				resp, body := f.post(t, "k", "/v1/chat/completions", chat)
				if resp.StatusCode != http.StatusOK || resp.Header.Get(gateway.ReplicaHeader) != "good" {
					t.Fatalf("request %d: %d from %q: %s; want good's answer", i, resp.StatusCode, resp.Header.Get(gateway.ReplicaHeader), body)
				}
			}
			var out strings.Builder
			f.gw.WriteMetrics(&out)
			// The bad replica failed once and was cooled down: one retry, not one per request.
			if !strings.Contains(out.String(), `berth_gateway_retries_total{model="m"} 1`+"\n") {
				t.Errorf("retries: want 1 (bad cooled down after its failure):\n%s", out.String())
			}
			f.clock.Advance(gateway.DefaultCooldown)
			f.set([]*berth.Endpoint{bad})
			resp, body := f.post(t, "k", "/v1/chat/completions", chat)
			if tc.name == "500" {
				if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "EngineDeadError") {
					t.Fatalf("the only replica's 500: got %d %s, want it passed through", resp.StatusCode, body)
				}
				return
			}
			if code, _, _, msg := openAIError(t, body); resp.StatusCode != http.StatusBadGateway || code != "upstream_unreachable" {
				t.Fatalf("the only replica unreachable: %d %s %s, want 502 upstream_unreachable", resp.StatusCode, code, msg)
			}
			// The cluster withdraws it (its service is being stopped) after the
			// gateway's snapshot: the model's state is the answer.
			stopping := &berth.Service{Phase: berth.PhaseReady, Stopping: true}
			stopping.Model = "m"
			f.cl.set(nil, stopping)
			resp, body = f.post(t, "k", "/v1/chat/completions", chat)
			if code, _, phase, msg := openAIError(t, body); resp.StatusCode != http.StatusServiceUnavailable || phase != gateway.PhaseStopping {
				t.Fatalf("the only replica unreachable, and withdrawn: %d %s %s, want 503 in phase stopping", resp.StatusCode, code, msg)
			}
		})
	}
}

// TestStreamPassedThroughPerEvent: an SSE stream reaches the client byte
// for byte, each event as the replica flushes it (the client reads an
// event before the replica writes the next), and its usage chunk counts.
func TestStreamPassedThroughPerEvent(t *testing.T) {
	events := []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
		": a comment\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\r\n\r\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\n",
		"data: [DONE]\n\n",
	}
	next := make(chan struct{})
	f := newFixture(t, nil)
	f.set([]*berth.Endpoint{replica(t, "a", "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			<-next
			io.WriteString(w, e)
			w.(http.Flusher).Flush()
		}
	})})
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`))
	req.Header.Set("Authorization", "Bearer k")
	done := make(chan *http.Response)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	next <- struct{}{} // the gateway answers once the replica writes its first event
	resp := <-done
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var got strings.Builder
	for i, e := range events {
		if i > 0 {
			next <- struct{}{}
		}
		buf := make([]byte, len(e))
		if _, err := io.ReadFull(br, buf); err != nil {
			t.Fatalf("event %d: %v (the gateway did not flush it)", i, err)
		}
		got.Write(buf)
	}
	if rest, _ := io.ReadAll(br); len(rest) != 0 || got.String() != strings.Join(events, "") {
		t.Fatalf("stream %q + %q, want %q", got.String(), rest, strings.Join(events, ""))
	}
	var out strings.Builder
	f.gw.WriteMetrics(&out)
	if !strings.Contains(out.String(), `berth_gateway_tokens_total{model="m",user="alice",kind="completion"} 2`) ||
		!strings.Contains(out.String(), `berth_gateway_tokens_total{model="m",user="alice",kind="prompt"} 7`) {
		t.Errorf("the stream's usage chunk not counted:\n%s", out.String())
	}
}

// TestModelPhases: a model with no ready replica answers 503 naming its
// phase, from its service's last startup marker, with Retry-After; an
// unknown model 404; /v1/models lists both kinds, with phases.
func TestModelPhases(t *testing.T) {
	f := newFixture(t, nil)
	svc := func(model, user, phase, marker string) *berth.Service {
		s := &berth.Service{Phase: phase, Marker: marker}
		s.Model, s.User, s.Kind = model, user, berth.KindService
		return s
	}
	ready := replica(t, "a", "m", answer("a"))
	for _, tc := range []struct {
		svc                *berth.Service
		phase, wantMessage string
	}{
		{svc("w", "alice", "", ""), gateway.PhasePending, "has no ready replica"},
		{svc("w", "alice", berth.PhaseStarting, ""), gateway.PhaseStarting, "warming up (starting)"},
		{svc("w", "alice", berth.PhaseWarming, "Loading safetensors checkpoint shards"), gateway.PhaseLoadingWeights, "warming up (loading weights)"},
		{svc("w", "alice", berth.PhaseWarming, "Available KV cache memory"), gateway.PhaseKVCache, "warming up (kv cache)"},
		{svc("w", "alice", berth.PhaseWarming, "Capturing CUDA graph shapes"), gateway.PhaseCUDAGraphs, "warming up (cuda graph capture)"},
		{svc("w", "arbiter", berth.PhaseWarming, "Loading weights took"), gateway.PhaseKVCache, "being swapped in (kv cache)"},
		{svc("w", "alice", berth.PhaseUnready, ""), gateway.PhaseUnready, "fails its liveness check"},
	} {
		f.set([]*berth.Endpoint{ready}, tc.svc, svc("m", "alice", berth.PhaseReady, ""))
		resp, body := f.post(t, "k", "/v1/chat/completions", `{"model":"w"}`)
		code, typ, phase, msg := openAIError(t, body)
		if resp.StatusCode != http.StatusServiceUnavailable || code != "model_not_ready" || typ != "server_error" || phase != tc.phase ||
			!strings.Contains(msg, tc.wantMessage) || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%+v: %d %s (Retry-After %q), want 503 phase %s saying %q", tc.svc, resp.StatusCode, body,
				resp.Header.Get("Retry-After"), tc.phase, tc.wantMessage)
		}
		req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer k")
		mresp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var list gateway.ModelList
		err = json.NewDecoder(mresp.Body).Decode(&list)
		mresp.Body.Close()
		if err != nil || len(list.Data) != 2 || list.Data[0].ID != "m" || list.Data[0].Phase != gateway.PhaseReady || list.Data[0].Replicas != 1 ||
			list.Data[1].ID != "w" || list.Data[1].Phase != tc.phase || list.Object != "list" || list.Data[0].Object != "model" {
			t.Errorf("%+v: /v1/models = %+v, %v", tc.svc, list, err)
		}
	}
	resp, body := f.post(t, "k", "/v1/embeddings", `{"model":"nope","input":"x"}`)
	if code, _, _, _ := openAIError(t, body); resp.StatusCode != http.StatusNotFound || code != "model_not_found" {
		t.Fatalf("an unknown model: %d %s, want 404 model_not_found", resp.StatusCode, body)
	}
	for _, bad := range []string{`{"input":"x"}`, `not json`} {
		if resp, body := f.post(t, "k", "/v1/embeddings", bad); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("body %s: %d %s, want 400", bad, resp.StatusCode, body)
		}
	}
}

// TestAuthAllowListAndRateLimit: no key or a bad one is 401, a model
// outside the token's allow-list 403, and past its requests per minute
// 429 with Retry-After, until the bucket refills.
func TestAuthAllowListAndRateLimit(t *testing.T) {
	f := newFixture(t, map[string]*gateway.Caller{
		"open":    {Name: "alice", TokenID: "t1"},
		"limited": {Name: "bob", TokenID: "t2", Models: []string{"m"}, RPM: 2},
	})
	f.set([]*berth.Endpoint{replica(t, "a", "m", answer("a")), replica(t, "b", "other", answer("b"))})
	for _, key := range []string{"", "wrong"} {
		resp, body := f.post(t, key, "/v1/chat/completions", chat)
		if code, typ, _, _ := openAIError(t, body); resp.StatusCode != http.StatusUnauthorized || code != "invalid_api_key" || typ != "authentication_error" {
			t.Errorf("key %q: %d %s, want 401 invalid_api_key", key, resp.StatusCode, body)
		}
	}
	resp, body := f.post(t, "limited", "/v1/chat/completions", `{"model":"other"}`)
	if code, _, _, _ := openAIError(t, body); resp.StatusCode != http.StatusForbidden || code != "model_not_allowed" {
		t.Fatalf("a model outside the allow-list: %d %s, want 403 model_not_allowed", resp.StatusCode, body)
	}
	// The refusal above took one request from bob's bucket of 2.
	if resp, body := f.post(t, "limited", "/v1/chat/completions", chat); resp.StatusCode != http.StatusOK {
		t.Fatalf("bob's second request: %d %s", resp.StatusCode, body)
	}
	resp, body = f.post(t, "limited", "/v1/chat/completions", chat)
	if code, typ, _, _ := openAIError(t, body); resp.StatusCode != http.StatusTooManyRequests || code != "rate_limit_exceeded" ||
		typ != "requests" || resp.Header.Get("Retry-After") != "30" {
		t.Fatalf("bob's third request in a minute: %d %s (Retry-After %q), want 429 after 30 s", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	for range 5 { // alice has no limit
		if resp, body := f.post(t, "open", "/v1/chat/completions", chat); resp.StatusCode != http.StatusOK {
			t.Fatalf("alice: %d %s", resp.StatusCode, body)
		}
	}
	f.clock.Advance(30 * time.Second)
	if resp, body := f.post(t, "limited", "/v1/chat/completions", chat); resp.StatusCode != http.StatusOK {
		t.Fatalf("bob after 30 s: %d %s, want the bucket refilled by one", resp.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer limited")
	f.clock.Advance(time.Minute)
	mresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list gateway.ModelList
	_ = json.NewDecoder(mresp.Body).Decode(&list)
	mresp.Body.Close()
	if len(list.Data) != 1 || list.Data[0].ID != "m" {
		t.Fatalf("bob's /v1/models: %+v, want only m, his allow-list", list)
	}
}

// TestChatCompletion: the Completer a server-side caller uses gets the
// replica's answer whatever its status, and typed errors otherwise.
func TestChatCompletion(t *testing.T) {
	f := newFixture(t, nil)
	caller := &gateway.Caller{Name: "contracts"}
	f.set([]*berth.Endpoint{replica(t, "a", "m", answer("a"))},
		&berth.Service{Job: berth.Job{JobSpec: berth.JobSpec{Kind: berth.KindService, Model: "w"}}, Phase: berth.PhaseWarming, Marker: "Capturing CUDA graph"})
	rep, err := f.gw.ChatCompletion(context.Background(), caller, "m", []byte(chat))
	if err != nil || rep.Status != http.StatusOK || rep.Replica != "a" || !strings.Contains(string(rep.Body), `"replica":"a"`) {
		t.Fatalf("ChatCompletion: %+v, %v", rep, err)
	}
	var e *gateway.Error
	if _, err := f.gw.ChatCompletion(context.Background(), caller, "w", []byte(`{"model":"w"}`)); !errors.As(err, &e) ||
		e.Status != http.StatusServiceUnavailable || e.Phase != gateway.PhaseCUDAGraphs {
		t.Fatalf("a warming model: %v, want a 503 *Error in phase %s", err, gateway.PhaseCUDAGraphs)
	}
	hang := replica(t, "hang", "slow", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // then the server notices the client going
		<-r.Context().Done()
	})
	f.set([]*berth.Endpoint{hang})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := f.gw.ChatCompletion(ctx, caller, "slow", []byte(`{"model":"slow"}`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a replica past the deadline: %v, want context.DeadlineExceeded in the chain", err)
	}
}
