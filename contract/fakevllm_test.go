package contract_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/contract"
	"github.com/berth-dev/berth/gateway"
	"github.com/berth-dev/berth/internal/freeport"
)

var (
	fakeOnce sync.Once
	binDir   string // the test binary's own, removed when it ends
	fakeBin  string
	fakeErr  error
)

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "contract-test-"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// fakeVLLM builds the fake OpenAI-compatible server (agent/testdata/fakevllm)
// once per test binary.
func fakeVLLM(t testing.TB) string {
	t.Helper()
	fakeOnce.Do(func() {
		fakeBin = filepath.Join(binDir, "fakevllm")
		if out, err := exec.Command("go", "build", "-o", fakeBin, "../agent/testdata/fakevllm").CombinedOutput(); err != nil {
			fakeErr = &berth.Error{Code: berth.ECodeInternal, Message: "build fakevllm: " + string(out), Err: err}
		}
	})
	if fakeErr != nil {
		t.Fatal(fakeErr)
	}
	return fakeBin
}

// startFake starts the fake model server serving model with the
// scripted chat completion answers steps and returns its URL once it
// answers /health.
func startFake(t testing.TB, model string, steps []map[string]any) string {
	t.Helper()
	bin := fakeVLLM(t)
	script := filepath.Join(t.TempDir(), "script.json")
	data, err := json.Marshal(steps)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, data, 0o644); err != nil {
		t.Fatal(err)
	}
	port := freeport.ForTest(t)
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--model", model, "--script", script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		select {
		case <-done:
			t.Fatalf("fakevllm exited:\n%s", out.String())
		case <-time.After(20 * time.Millisecond): // polling the fake's readiness, not standing in for it
		}
		if time.Now().After(deadline) {
			t.Fatalf("fakevllm not ready after 20s:\n%s", out.String())
		}
	}
}

// oneReplica is a cluster with one ready replica of one model.
type oneReplica struct{ model, url string }

func (c oneReplica) Endpoints(context.Context) ([]*berth.Endpoint, error) {
	return []*berth.Endpoint{{JobID: "j1", Name: "fake", AttemptID: "a1", Host: "h1", URL: c.url, Model: c.model,
		ReadySince: time.Now()}}, nil
}

func (oneReplica) Services(context.Context) ([]*berth.Service, error) { return nil, nil }

// scripted is testContract's shape, for model m, with timeout 1s.
const scripted = `
name: t
model: m
prompt: "Title of {{.Inputs.hint}} as JSON: {{.Schema}}"
inputs: [{name: hint, required: true}]
output:
  type: object
  required: [title]
  additionalProperties: false
  properties: {title: {type: string, minLength: 1}}
timeout: 1s
`

// TestThroughGatewayScripted calls a contract through the gateway's router
// on the fake model server as a real process, each case with its own
// scripted replies.
func TestThroughGatewayScripted(t *testing.T) {
	good := `{"title":"Dune"}`
	cases := []struct {
		name     string
		steps    []map[string]any
		status   int
		failure  string
		attempts int
		raw      string
	}{
		{"fenced JSON", []map[string]any{{"content": "```json\n" + good + "\n```"}}, 200, "", 1, "```json\n" + good + "\n```"},
		{"prose around JSON", []map[string]any{{"content": "The book is:\n" + good + "\nAnything else?"}}, 200, "", 1, ""},
		{"invalid JSON", []map[string]any{{"content": `{"title": Dune}`}}, 502, berth.ContractParseFailed, 1, `{"title": Dune}`},
		{"wrong schema, then right", []map[string]any{{"content": `{"name":"Dune"}`}, {"content": good}}, 200, "", 2, good},
		{"wrong schema twice", []map[string]any{{"content": `{"title":""}`}}, 502, berth.ContractSchemaMismatch, 2, `{"title":""}`},
		{"truncated by length, then whole", []map[string]any{{"content": `{"title": "Du`, "finish_reason": "length"}, {"content": good}}, 200, "", 2, good},
		{"HTTP 500", []map[string]any{{"status": 500}}, 502, berth.ContractUpstreamHTTPError, 1, "the fake model server was scripted to fail"},
		{"not a completion", []map[string]any{{"body": "<html>bad gateway</html>"}}, 502, berth.ContractInvalidUpstreamJSON, 1, "<html>bad gateway</html>"},
		{"timeout", []map[string]any{{"content": good, "delay": "10s"}}, 504, berth.ContractUpstreamTimeout, 1, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := startFake(t, "m", tc.steps)
			c, err := contract.Parse("t.yaml", []byte(scripted))
			if err != nil {
				t.Fatal(err)
			}
			reg, err := contract.NewRegistry(context.Background(), map[string]*contract.Contract{"t": c}, nil)
			if err != nil {
				t.Fatal(err)
			}
			g := gateway.New(gateway.Config{Cluster: oneReplica{"m", url},
				Authenticate: func(*http.Request) (*gateway.Caller, error) { return &gateway.Caller{Name: "alice"}, nil }})
			contract.Mount(g, reg)
			hs := httptest.NewServer(g)
			defer hs.Close()

			resp, err := http.Post(hs.URL+"/v1/contracts/t", "application/json", strings.NewReader(`{"inputs":{"hint":"a novel"}}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var res berth.ContractResult
			if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
				t.Fatal(err)
			}
			got := ""
			if res.Error != nil {
				got = res.Error.Type
			}
			if resp.StatusCode != tc.status || got != tc.failure || res.Attempts != tc.attempts {
				t.Fatalf("status %d, error %+v, attempts %d; want %d, %q, %d", resp.StatusCode, res.Error, res.Attempts, tc.status, tc.failure, tc.attempts)
			}
			if tc.failure == "" && string(res.Output) != good {
				t.Errorf("output %s, want %s", res.Output, good)
			}
			if !strings.Contains(res.Raw, tc.raw) {
				t.Errorf("raw %q, want it to hold %q", res.Raw, tc.raw)
			}
			result := tc.failure
			if result == "" {
				result = "ok"
			}
			var m strings.Builder
			reg.WriteMetrics(&m)
			for _, line := range []string{
				`berth_contract_calls_total{contract="t",result="` + result + `"} 1`,
				`berth_contract_model_requests_total{contract="t"} ` + strconv.Itoa(tc.attempts),
			} {
				if !strings.Contains(m.String(), line+"\n") {
					t.Errorf("metrics lack %s:\n%s", line, m.String())
				}
			}
		})
	}
}

func TestListAndRefusals(t *testing.T) {
	files, err := contract.LoadDir("../examples/contracts")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := contract.NewRegistry(context.Background(), files, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(gateway.Config{Cluster: oneReplica{"other", "http://127.0.0.1:1"},
		Authenticate: func(r *http.Request) (*gateway.Caller, error) {
			return &gateway.Caller{Name: "bob", Models: []string{r.Header.Get("X-Allow")}}, nil
		}})
	contract.Mount(g, reg)
	hs := httptest.NewServer(g)
	defer hs.Close()

	resp, err := http.Get(hs.URL + "/v1/contracts")
	if err != nil {
		t.Fatal(err)
	}
	var l berth.ContractList
	err = json.NewDecoder(resp.Body).Decode(&l)
	resp.Body.Close()
	if err != nil || l.Object != "list" || len(l.Data) != 2 || l.Data[0].Name != "book-condition" || l.Data[1].Name != "book-extract" {
		t.Fatalf("GET /v1/contracts = %+v, %v", l, err)
	}

	post := func(name, allow, body string) (int, *berth.ContractFailure) {
		t.Helper()
		req, _ := http.NewRequest("POST", hs.URL+"/v1/contracts/"+name, strings.NewReader(body))
		req.Header.Set("X-Allow", allow)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Error *berth.ContractFailure `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, out.Error
	}
	model := files["book-extract"].Model
	if st, f := post("nope", model, `{}`); st != 404 || f == nil || f.Type != berth.ECodeNotFound {
		t.Errorf("unknown contract: %d %+v", st, f)
	}
	if st, f := post("book-extract", "another-model", `{}`); st != 403 || f == nil {
		t.Errorf("a model the key may not use: %d %+v", st, f)
	}
	if st, f := post("book-extract", model, `{"inputs":{},"colour":1}`); st != 400 || f == nil || f.Type != berth.ContractInputRejected || f.Param != "colour" {
		t.Errorf("an unknown field: %d %+v", st, f)
	}
	if st, f := post("book-extract", model, `{}`); st != 400 || f == nil || f.Type != berth.ContractInputRejected || f.Param != "images" {
		t.Errorf("no image where one is required: %d %+v", st, f)
	}
	// The model has no replica: the router's refusal is upstream_http_error.
	img := "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	if st, f := post("book-extract", model, `{"images":["`+img+`"]}`); st != 502 || f == nil || f.Type != berth.ContractUpstreamHTTPError || f.UpstreamStatus != 404 {
		t.Errorf("a model with no replica: %d %+v", st, f)
	}
}
