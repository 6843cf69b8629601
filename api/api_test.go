package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/wire"
)

// testTimeout bounds every blocking wait in these tests so a missing event
// fails the test instead of hanging it.
const testTimeout = 20 * time.Second

// server is a real controller on a real SQLite store behind the API.
type server struct {
	t     *testing.T
	url   string
	token string
	ctl   *controller.Controller
	st    store.Store // ctl's
	sec   *api.Security
}

// newServer starts a server that trusts loopback clients as admins.
func newServer(t *testing.T) *server { return startServer(t, auth.RoleAdmin) }

// newSecuredServer starts a server that trusts no one without a token; the
// server's token is an admin's.
func newSecuredServer(t *testing.T) *server { return startServer(t, "") }

func startServer(t *testing.T, trustLoopback auth.Role) *server {
	t.Helper()
	st, ctl, sec := startController(t, t.TempDir(), func(st store.Store) *api.Security {
		return apitest.Security(t, st, trustLoopback)
	})
	hs := httptest.NewServer(api.New(ctl, st, sec, nil))
	t.Cleanup(hs.Close)
	s := &server{t: t, url: hs.URL, ctl: ctl, st: st, sec: sec}
	if trustLoopback == "" {
		s.token = apitest.Token(t, sec, "root", auth.RoleAdmin, "")
	}
	return s
}

// startController starts a controller on a real SQLite store in dir, with
// the security security makes for that store (its secrets resolved at
// dispatch) and its config as edits change it; both are stopped when t
// ends.
func startController(t *testing.T, dir string, security func(store.Store) *api.Security, edits ...func(*controller.Config)) (*sqlite.Store, *controller.Controller, *api.Security) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "berth.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	ctl, sec := startControllerOn(t, st, security, edits...)
	return st, ctl, sec
}

// startControllerOn is startController on the store st, which the caller
// closes after t (cleanups run last first: after the controller stops).
func startControllerOn(t *testing.T, st store.Store, security func(store.Store) *api.Security, edits ...func(*controller.Config)) (*controller.Controller, *api.Security) {
	t.Helper()
	ctx := context.Background()
	sec := security(st)
	cfg := controller.Config{Store: st, Secrets: sec.Secrets, PeerTokens: sec.Secrets}
	for _, edit := range edits {
		edit(&cfg)
	}
	ctl := controller.New(cfg)
	if err := ctl.Start(ctx); err != nil {
		t.Fatalf("start controller: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := ctl.Stop(ctx); err != nil {
			t.Errorf("stop controller: %v", err)
		}
	})
	return ctl, sec
}

// do sends a request with the server's token (if any) and returns the
// status, the Content-Type and the body.
func (s *server) do(method, path, body string) (int, string, []byte) {
	s.t.Helper()
	return s.doAuth(method, path, body, s.token)
}

func (s *server) doAuth(method, path, body, token string) (int, string, []byte) {
	s.t.Helper()
	hdr := http.Header{}
	if token != "" {
		hdr.Set("Authorization", "Bearer "+token)
	}
	resp, data := s.send(method, path, body, hdr)
	return resp.StatusCode, resp.Header.Get("Content-Type"), data
}

// send sends a request with the headers hdr only (a JSON Content-Type
// when there is a body) and returns the response, its body read.
func (s *server) send(method, path, body string, hdr http.Header) (*http.Response, []byte) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		s.t.Fatalf("new request: %v", err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, data
}

// submit posts body and requires status want, returning the jobs.
func (s *server) submit(body string, want int) []*berth.Job {
	s.t.Helper()
	status, ctype, data := s.do("POST", "/api/v1/jobs", body)
	if status != want {
		s.t.Fatalf("POST /api/v1/jobs %s: status %d, want %d: %s", body, status, want, data)
	}
	if !strings.HasPrefix(ctype, "application/json") {
		s.t.Errorf("Content-Type = %q, want application/json", ctype)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		s.t.Fatalf("submit response is not a JSON object: %v: %s", err, data)
	}
	if _, ok := raw["jobs"]; !ok || !onlyKeys(raw, "jobs", "warnings") {
		s.t.Fatalf(`submit response = %s, want {"jobs":[...]} (and warnings)`, data)
	}
	var resp berth.SubmitResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		s.t.Fatalf("decode submit response: %v: %s", err, data)
	}
	return resp.Jobs
}

// onlyKeys reports whether every key of obj is one of keys.
func onlyKeys(obj map[string]json.RawMessage, keys ...string) bool {
	for k := range obj {
		if !slices.Contains(keys, k) {
			return false
		}
	}
	return true
}

// list GETs /api/v1/jobs with query and requires 200.
func (s *server) list(query string) berth.JobList {
	s.t.Helper()
	status, _, data := s.do("GET", "/api/v1/jobs"+query, "")
	if status != http.StatusOK {
		s.t.Fatalf("GET /api/v1/jobs%s: status %d: %s", query, status, data)
	}
	var l berth.JobList
	if err := json.Unmarshal(data, &l); err != nil {
		s.t.Fatalf("decode job list: %v: %s", err, data)
	}
	if l.Jobs == nil {
		s.t.Fatalf("GET /api/v1/jobs%s: jobs is null, want an array: %s", query, data)
	}
	return l
}

// count returns how many jobs the store holds.
func (s *server) count() int {
	s.t.Helper()
	return len(s.list("?limit=0").Jobs)
}

// ids returns the ids of jobs.
func ids(jobs []*berth.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// errorBody is exactly the error shape: unknown keys fail the decode.
type errorBody struct {
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
}

// checkError requires an error response with the given status, code and
// field ("" for none).
func checkError(t *testing.T, status int, ctype string, data []byte, wantStatus int, wantCode, wantField string) {
	t.Helper()
	if status != wantStatus {
		t.Errorf("status = %d, want %d: %s", status, wantStatus, data)
	}
	if !strings.HasPrefix(ctype, "application/json") {
		t.Errorf("Content-Type = %q, want application/json", ctype)
	}
	var e errorBody
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error == nil {
		t.Fatalf(`body %s is not {"error":{"code","message","field"}}: %v`, data, err)
	}
	if e.Error.Code != wantCode {
		t.Errorf("code = %q, want %q: %s", e.Error.Code, wantCode, data)
	}
	if e.Error.Message == "" {
		t.Errorf("message is empty: %s", data)
	}
	if e.Error.Field != wantField {
		t.Errorf("field = %q, want %q: %s", e.Error.Field, wantField, data)
	}
}

func TestSubmitCreatesJob(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	jobs := s.submit(`{"name":"train","queue":"gpu","priority":500,"command":["python","train.py"],"resources":{"gpus":2,"gpu_memory":"40GiB"},"env":{"LR":"0.1"}}`, http.StatusCreated)
	if len(jobs) != 1 {
		t.Fatalf("got %d jobs, want 1", len(jobs))
	}
	j := jobs[0]
	if j.ID == "" || j.State != berth.JobPending || j.Queue != "gpu" || j.Priority != 500 ||
		j.Resources.GPUs != 2 || j.Resources.GPUMemory != 40<<30 || j.ArrayIndex != nil || j.CreatedAt.IsZero() {
		t.Errorf("job = %+v", j)
	}

	status, _, data := s.do("GET", "/api/v1/jobs/"+j.ID, "")
	if status != http.StatusOK {
		t.Fatalf("GET job: status %d: %s", status, data)
	}
	var got berth.JobDetail
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("decode job: %v: %s", err, data)
	}
	if got.Job == nil || got.ID != j.ID || got.Name != "train" || got.State != berth.JobPending ||
		!slices.Equal(got.Command, berth.Argv{"python", "train.py"}) || got.Env["LR"] != "0.1" {
		t.Errorf("GET job = %s", data)
	}
	if l := s.list(""); len(l.Jobs) != 1 || l.Jobs[0].ID != j.ID {
		t.Errorf("listing = %v, want [%s]", ids(l.Jobs), j.ID)
	}
}

// TestSubmitFraction: "gpus": 0.5 is stored and returned as gpu_milli 500.
func TestSubmitFraction(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	j := s.submit(`{"command":["true"],"resources":{"gpus":0.5,"gpu_memory":"20GiB"}}`, http.StatusCreated)[0]
	if j.Resources.GPUs != 0 || j.Resources.GPUMilli != 500 || j.Resources.GPUMemory != 20<<30 {
		t.Errorf("resources = %+v, want gpu_milli 500", j.Resources)
	}
	status, _, data := s.do("GET", "/api/v1/jobs/"+j.ID, "")
	if status != http.StatusOK || !strings.Contains(string(data), `"resources":{"gpu_milli":500,"gpu_memory":21474836480}`) {
		t.Errorf("GET job: %d %s", status, data)
	}
}

func TestSubmitDefaults(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	j := s.submit(`{"command":"echo hi"}`, http.StatusCreated)[0]
	if j.Queue != berth.DefaultQueue || j.Priority != berth.DefaultPriority || j.Nodes != 1 || j.Kind != berth.KindBatch {
		t.Errorf("defaults not applied: %+v", j.JobSpec)
	}
	if !slices.Equal(j.Command, berth.Argv{"sh", "-c", "echo hi"}) {
		t.Errorf("command = %q, want sh -c", j.Command)
	}
}

func TestSubmitArray(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	const n = 7
	jobs := s.submit(fmt.Sprintf(`{"command":["true"],"array":%d}`, n), http.StatusCreated)
	if len(jobs) != n {
		t.Fatalf("got %d jobs, want %d", len(jobs), n)
	}
	seen := map[string]bool{}
	for i, j := range jobs {
		if j.ArrayIndex == nil || *j.ArrayIndex != i {
			t.Errorf("job %d: array_index = %v, want %d", i, j.ArrayIndex, i)
		}
		if seen[j.ID] {
			t.Errorf("job id %s repeated", j.ID)
		}
		seen[j.ID] = true
	}
	stored := s.list("?limit=0").Jobs
	if len(stored) != n {
		t.Fatalf("stored %d jobs, want %d", len(stored), n)
	}
	indexes := map[int]bool{}
	for _, j := range stored {
		if !seen[j.ID] || j.ArrayIndex == nil {
			t.Errorf("stored job %s (array_index %v) is not one of those returned", j.ID, j.ArrayIndex)
			continue
		}
		indexes[*j.ArrayIndex] = true
	}
	if len(indexes) != n {
		t.Errorf("stored array indexes %v, want 0..%d", indexes, n-1)
	}
}

func TestSubmitIDsOnly(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	body := `{"command":["true"],"array":5,"idempotency_key":"ids-1"}`
	status, ctype, data := s.do("POST", "/api/v1/jobs?ids_only=maybe", body)
	checkError(t, status, ctype, data, http.StatusBadRequest, berth.ECodeInvalid, "ids_only")
	if n := s.count(); n != 0 {
		t.Fatalf("store holds %d jobs after a bad ids_only, want 0", n)
	}
	status, _, data = s.do("POST", "/api/v1/jobs?ids_only=true", body)
	if status != http.StatusCreated {
		t.Fatalf("status %d, want 201: %s", status, data)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw["ids"] == nil || !onlyKeys(raw, "ids", "warnings") {
		t.Fatalf("answer %s, want only ids (and warnings)", data)
	}
	var got berth.SubmitIDsResponse
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.IDs) != 5 {
		t.Fatalf("%d ids, want 5: %s", len(got.IDs), data)
	}
	for i, id := range got.IDs {
		status, _, data := s.do("GET", "/api/v1/jobs/"+id, "")
		var j berth.JobDetail
		if status != http.StatusOK || json.Unmarshal(data, &j) != nil || j.Job == nil {
			t.Fatalf("job %s: status %d: %s", id, status, data)
		}
		if j.ArrayIndex == nil || *j.ArrayIndex != i {
			t.Errorf("ids[%d] is job %s with array_index %v, want %d", i, id, j.ArrayIndex, i)
		}
	}
	// A repeat answers the first submission's ids, in full or as ids.
	status, _, data = s.do("POST", "/api/v1/jobs?ids_only=true", body)
	var again berth.SubmitIDsResponse
	if status != http.StatusOK || json.Unmarshal(data, &again) != nil || !slices.Equal(again.IDs, got.IDs) {
		t.Errorf("repeat: status %d, %s; want 200 with %v", status, data, got.IDs)
	}
	if full := s.submit(body, http.StatusOK); !slices.Equal(ids(full), got.IDs) {
		t.Errorf("repeat in full returned %v, want %v", ids(full), got.IDs)
	}
	if n := s.count(); n != 5 {
		t.Errorf("store holds %d jobs, want 5", n)
	}
}

// TestSubmitWarnsOfAnUnservedQueue: a submission to a queue no worker
// serves succeeds with a warning naming the queue, in full and ids-only
// answers; a served queue, or a replay, has none.
func TestSubmitWarnsOfAnUnservedQueue(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	s.registerAgent(ctx, &wire.Register{Version: wire.Version, WorkerID: "w1", Host: "h1", Queues: []string{"gpu"}, Slots: 1})
	for _, tc := range []struct {
		path, body string
		status     int
		warned     bool
	}{
		{"/api/v1/jobs", `{"command":["true"],"queue":"gpu"}`, http.StatusCreated, false},
		{"/api/v1/jobs", `{"command":["true"],"queue":"gpux","idempotency_key":"k"}`, http.StatusCreated, true},
		{"/api/v1/jobs", `{"command":["true"],"queue":"gpux","idempotency_key":"k"}`, http.StatusOK, false},
		{"/api/v1/jobs?ids_only=true", `{"command":["true"],"queue":"gpux","array":2}`, http.StatusCreated, true},
	} {
		status, _, data := s.do("POST", tc.path, tc.body)
		var answer struct{ Warnings []string }
		if status != tc.status || json.Unmarshal(data, &answer) != nil {
			t.Fatalf("POST %s %s: %d %s; want %d", tc.path, tc.body, status, data, tc.status)
		}
		warned := len(answer.Warnings) == 1 && strings.Contains(answer.Warnings[0], `no worker serves queue "gpux"`)
		if warned != tc.warned || (!tc.warned && len(answer.Warnings) > 0) {
			t.Errorf("POST %s %s: warnings %q; want a warning naming gpux: %v", tc.path, tc.body, answer.Warnings, tc.warned)
		}
	}
}

func TestSubmitIdempotencyKey(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	body := `{"command":["true"],"array":3,"idempotency_key":"run-42"}`
	first := s.submit(body, http.StatusCreated)
	if len(first) != 3 {
		t.Fatalf("got %d jobs, want 3", len(first))
	}
	// Repeats, at once: the same jobs, 200, nothing new stored.
	for range 2 {
		again := s.submit(body, http.StatusOK)
		if !slices.Equal(ids(again), ids(first)) {
			t.Errorf("repeat returned %v, want %v", ids(again), ids(first))
		}
	}
	if n := s.count(); n != 3 {
		t.Errorf("store holds %d jobs after repeats, want 3", n)
	}
	// Another key is another submission.
	other := s.submit(`{"command":["true"],"idempotency_key":"run-43"}`, http.StatusCreated)
	if len(other) != 1 || slices.Contains(ids(first), other[0].ID) {
		t.Errorf("new key returned %v", ids(other))
	}
	if n := s.count(); n != 4 {
		t.Errorf("store holds %d jobs, want 4", n)
	}
}

func TestSubmitRejectsBadInputAndStoresNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	tests := []struct {
		name   string
		body   string
		status int
		field  string
	}{
		{"unknown top-level field", `{"command":["true"],"colour":"red"}`, 400, "colour"},
		{"unknown nested field", `{"command":["true"],"resources":{"gpu_typ":"H100"}}`, 400, "resources.gpu_typ"},
		{"unknown constraints field", `{"command":["true"],"constraints":{"labels":{"xyz":"a"},"xyz":"b"}}`, 400, "constraints.xyz"},
		{"priority as string", `{"command":["true"],"priority":"high"}`, 400, "priority"},
		{"gpus as string", `{"command":["true"],"resources":{"gpus":"2"}}`, 400, "resources.gpus"},
		{"negative gpus", `{"command":["true"],"resources":{"gpus":-1}}`, 400, "resources.gpus"},
		{"10000 gpus", `{"command":["true"],"resources":{"gpus":10000}}`, 400, "resources.gpus"},
		{"a fraction over 1", `{"command":["true"],"resources":{"gpus":1.5}}`, 400, "resources.gpus"},
		{"a fraction in gpus and gpu_milli", `{"command":["true"],"resources":{"gpus":0.5,"gpu_milli":500}}`, 400, "resources.gpus"},
		{"gpu_milli of a whole GPU", `{"command":["true"],"resources":{"gpu_milli":1000}}`, 400, "resources.gpu_milli"},
		{"gpu_milli beside gpus", `{"command":["true"],"resources":{"gpus":1,"gpu_milli":500}}`, 400, "resources.gpu_milli"},
		{"empty command list", `{"command":[]}`, 400, "command"},
		{"empty program", `{"command":[""]}`, 400, "command"},
		{"blank program", `{"command":["   ", "x"]}`, 400, "command"},
		{"empty shell string", `{"command":""}`, 400, "command"},
		{"blank shell string", `{"command":"  "}`, 400, "command"},
		{"null command", `{"command":null}`, 400, "command"},
		{"missing command", `{"queue":"gpu"}`, 400, "command"},
		{"empty object", `{}`, 400, "command"},
		{"priority 5000", `{"command":["true"],"priority":5000}`, 400, "priority"},
		{"negative priority", `{"command":["true"],"priority":-1}`, 400, "priority"},
		{"queue with upper case", `{"command":["true"],"queue":"GPU"}`, 400, "queue"},
		{"empty queue", `{"command":["true"],"queue":""}`, 400, "queue"},
		{"array -1", `{"command":["true"],"array":-1}`, 400, "array"},
		{"array above max", fmt.Sprintf(`{"command":["true"],"array":%d}`, berth.MaxArray+1), 400, "array"},
		// What encoding/json would change silently: not UTF-8 (to
		// U+FFFD), a repeated key (the last kept).
		{"nested string not UTF-8", "{\"command\":[\"true\"],\"resources\":{\"gpu_type\":\"H\xff\"}}", 400, "resources.gpu_type"},
		{"env value not UTF-8", "{\"command\":[\"true\"],\"env\":{\"A\":\"\xc3\x28\"}}", 400, "env.A"},
		{"env key not UTF-8", "{\"command\":[\"true\"],\"env\":{\"A\xfe\":\"1\"}}", 400, "env.A\uFFFD"},
		{"command not UTF-8", "{\"command\":[\"echo\",\"\xe2\x82\"]}", 400, "command"},
		{"lone surrogate", `{"command":["true"],"name":"\ud800"}`, 400, "name"},
		{"repeated top-level key", `{"command":["true"],"name":"a","name":"b"}`, 400, "name"},
		{"repeated nested key", `{"command":["true"],"resources":{"gpus":1,"gpus":2}}`, 400, "resources.gpus"},
		{"repeated env key", `{"command":["true"],"env":{"A":"1","A":"2"}}`, 400, "env.A"},
		{"invalid JSON", `{"command":["true"`, 400, "body"},
		{"not JSON", `command=true`, 400, "body"},
		{"empty body", ``, 400, "body"},
		{"trailing data", `{"command":["true"]} {"command":["true"]}`, 400, "body"},
		{"JSON array body", `[{"command":["true"]}]`, 400, "body"},
		{"JSON number body", `42`, 400, "body"},
		{"env value as number", `{"command":["true"],"env":{"A":1}}`, 400, "env.A"},
		{"env BERTH_X", `{"command":["true"],"env":{"BERTH_X":"1"}}`, 400, "env"},
		{"env CUDA_VISIBLE_DEVICES", `{"command":["true"],"env":{"CUDA_VISIBLE_DEVICES":"0"}}`, 400, "env"},
		{"env bad name", `{"command":["true"],"env":{"1X":"1"}}`, 400, "env"},
		{"bad kind", `{"command":["true"],"kind":"cron"}`, 400, "kind"},
		{"too many nodes", `{"command":["true"],"nodes":257}`, 400, "nodes"},
		{"relative workdir", `{"command":["true"],"workdir":"tmp"}`, 400, "workdir"},
		{"negative retries", `{"command":["true"],"retries":-1}`, 400, "retries"},
		{"bad name", `{"command":["true"],"name":"-x"}`, 400, "name"},
		{"negative memory", `{"command":["true"],"resources":{"memory":"-5GiB"}}`, 400, "resources.memory"},
		{"memory as list", `{"command":["true"],"resources":{"memory":[1]}}`, 400, "resources.memory"},
		{"max_runtime not a duration", `{"command":["true"],"max_runtime":"soon"}`, 400, "max_runtime"},
		{"command as object", `{"command":{"run":"x"}}`, 400, "command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			status, ctype, data := s.do("POST", "/api/v1/jobs", tt.body)
			if status < 400 || status >= 500 {
				t.Fatalf("status %d, want 4xx: %.300s", status, data)
			}
			checkError(t, status, ctype, data, tt.status, berth.ECodeInvalid, tt.field)
		})
	}
	t.Cleanup(func() {
		// After every subtest: nothing stored, nothing announced.
		if n := s.count(); n != 0 {
			t.Errorf("store holds %d jobs after rejected submissions, want 0", n)
		}
		if last := s.ctl.Bus().Last(); last != 0 {
			t.Errorf("%d events published after rejected submissions, want 0", last)
		}
	})
}

func TestGetAndCancel(t *testing.T) {
	t.Parallel()
	s := newServer(t)

	status, ctype, data := s.do("GET", "/api/v1/jobs/01NOSUCHJOB0000000000000000", "")
	checkError(t, status, ctype, data, http.StatusNotFound, berth.ECodeNotFound, "id")
	status, ctype, data = s.do("POST", "/api/v1/jobs/01NOSUCHJOB0000000000000000/cancel", "")
	checkError(t, status, ctype, data, http.StatusNotFound, berth.ECodeNotFound, "id")

	j := s.submit(`{"command":["sleep","100"]}`, http.StatusCreated)[0]
	status, _, data = s.do("POST", "/api/v1/jobs/"+j.ID+"/cancel", "")
	if status != http.StatusOK {
		t.Fatalf("cancel: status %d: %s", status, data)
	}
	var cancelled berth.Job
	if err := json.Unmarshal(data, &cancelled); err != nil {
		t.Fatalf("decode cancel response: %v: %s", err, data)
	}
	if cancelled.ID != j.ID || cancelled.State != berth.JobCancelled {
		t.Errorf("cancel returned %s", data)
	}
	status, _, data = s.do("GET", "/api/v1/jobs/"+j.ID, "")
	var got berth.JobDetail
	if status != http.StatusOK || json.Unmarshal(data, &got) != nil || got.Job == nil ||
		got.State != berth.JobCancelled || got.FinishedAt.IsZero() {
		t.Errorf("GET after cancel: %d %s", status, data)
	}

	status, ctype, data = s.do("POST", "/api/v1/jobs/"+j.ID+"/cancel", "")
	checkError(t, status, ctype, data, http.StatusConflict, berth.ECodeConflict, "id")
	if n := s.count(); n != 1 {
		t.Errorf("store holds %d jobs, want 1", n)
	}
}

// TestCancelMatching: POST /jobs/cancel cancels every active job matching
// all the filters, oldest first, and refuses a request without a filter,
// with a state that cannot be cancelled or with an unknown field,
// cancelling nothing.
func TestCancelMatching(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	sweep := s.submit(`{"name":"sweep","command":["sleep","100"],"array":3}`, http.StatusCreated)
	other := s.submit(`{"name":"sweep","queue":"cpu","command":["sleep","100"]}`, http.StatusCreated)[0]

	for _, tc := range []struct{ body, field string }{
		{`{}`, "name"},
		{`{"state":"pending"}`, "name"},
		{`{"name":"sweep","state":"succeeded"}`, "state"},
		{`{"name":"sweep","nme":"x"}`, "nme"},
	} {
		status, ctype, data := s.do("POST", "/api/v1/jobs/cancel", tc.body)
		checkError(t, status, ctype, data, http.StatusBadRequest, berth.ECodeInvalid, tc.field)
	}
	if n := len(s.list("?state=pending&limit=0").Jobs); n != 4 {
		t.Fatalf("%d jobs pending after refused cancels, want 4", n)
	}

	status, _, data := s.do("POST", "/api/v1/jobs/cancel", `{"name":"sweep","queue":"default","state":"pending"}`)
	var got berth.JobList
	if status != http.StatusOK || json.Unmarshal(data, &got) != nil {
		t.Fatalf("cancel by filter: %d %s", status, data)
	}
	if !slices.Equal(ids(got.Jobs), ids(sweep)) {
		t.Errorf("cancelled %v, want the array %v, oldest first", ids(got.Jobs), ids(sweep))
	}
	for _, j := range got.Jobs {
		if j.State != berth.JobCancelled {
			t.Errorf("job %s answered %s, want cancelled", j.ID, j.State)
		}
	}
	if st := s.jobState(other.ID); st != berth.JobPending {
		t.Errorf("the job in another queue is %s, want pending", st)
	}
	status, _, data = s.do("POST", "/api/v1/jobs/cancel", `{"name":"sweep","queue":"default"}`)
	if status != http.StatusOK || string(data) != `{"jobs":[]}`+"\n" {
		t.Errorf("cancel matching nothing: %d %s, want 200 and no jobs", status, data)
	}
}

func TestListJobs(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	gpu := s.submit(`{"command":["true"],"queue":"gpu","array":3}`, http.StatusCreated)
	cpu := s.submit(`{"command":["true"],"queue":"cpu","array":2}`, http.StatusCreated)
	if status, _, data := s.do("POST", "/api/v1/jobs/"+cpu[0].ID+"/cancel", ""); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, data)
	}
	all := append(append([]*berth.Job{}, gpu...), cpu...)

	sorted := func(jobs []*berth.Job) []string {
		out := ids(jobs)
		slices.Sort(out)
		return out
	}
	filters := []struct {
		query string
		want  []*berth.Job
	}{
		{"", all},
		{"?cursor=", all}, // an empty cursor is the first page
		{"?limit=0", all},
		{"?queue=gpu", gpu},
		{"?queue=cpu", cpu},
		{"?queue=none", nil},
		{"?state=pending", append(append([]*berth.Job{}, gpu...), cpu[1])},
		{"?state=cancelled", cpu[:1]},
		{"?state=pending,cancelled", all},
		{"?state=running", nil},
		{"?queue=cpu&state=pending", cpu[1:]},
	}
	for _, f := range filters {
		l := s.list(f.query)
		if got, want := sorted(l.Jobs), sorted(f.want); !slices.Equal(got, want) {
			t.Errorf("GET /api/v1/jobs%s = %v, want %v", f.query, got, want)
		}
		if l.NextCursor != "" {
			t.Errorf("GET /api/v1/jobs%s: next_cursor %q on the only page", f.query, l.NextCursor)
		}
		// Newest first.
		if !slices.IsSortedFunc(l.Jobs, func(a, b *berth.Job) int { return strings.Compare(b.ID, a.ID) }) {
			t.Errorf("GET /api/v1/jobs%s not newest first: %v", f.query, ids(l.Jobs))
		}
	}

	if l := s.list("?limit=5"); len(l.Jobs) != 5 || l.NextCursor != "" {
		t.Errorf("limit=5 of 5: %d jobs, next_cursor %q; want 5 and none", len(l.Jobs), l.NextCursor)
	}
	for _, limit := range []int{1, 2, 4} {
		seen := map[string]int{}
		query := fmt.Sprintf("?limit=%d", limit)
		pages := 0
		for {
			l := s.list(query)
			pages++
			if len(l.Jobs) > limit || len(l.Jobs) == 0 {
				t.Fatalf("limit %d page %d has %d jobs", limit, pages, len(l.Jobs))
			}
			for _, j := range l.Jobs {
				seen[j.ID]++
			}
			if l.NextCursor == "" {
				break
			}
			if pages > len(all) {
				t.Fatalf("limit %d: more than %d pages", limit, len(all))
			}
			query = fmt.Sprintf("?limit=%d&cursor=%s", limit, l.NextCursor)
		}
		if want := (len(all) + limit - 1) / limit; pages != want {
			t.Errorf("limit %d: %d pages, want %d", limit, pages, want)
		}
		for _, j := range all {
			if seen[j.ID] != 1 {
				t.Errorf("limit %d: job %s seen %d times, want once", limit, j.ID, seen[j.ID])
			}
		}
		if len(seen) != len(all) {
			t.Errorf("limit %d: saw %d distinct jobs, want %d", limit, len(seen), len(all))
		}
	}
	// Pagination composes with filters.
	l := s.list("?queue=gpu&limit=2")
	if len(l.Jobs) != 2 || l.NextCursor == "" {
		t.Fatalf("queue=gpu&limit=2: %d jobs, cursor %q", len(l.Jobs), l.NextCursor)
	}
	rest := s.list("?queue=gpu&limit=2&cursor=" + l.NextCursor)
	if got := sorted(append(l.Jobs, rest.Jobs...)); !slices.Equal(got, sorted(gpu)) || rest.NextCursor != "" {
		t.Errorf("gpu pages = %v (cursor %q), want %v", got, rest.NextCursor, sorted(gpu))
	}

	bad := []struct{ query, field string }{
		{"?state=bogus", "state"},
		{"?state=pending,bogus", "state"},
		{"?state=PENDING", "state"},
		{"?limit=-1", "limit"},
		{"?limit=abc", "limit"},
		{"?limit=1.5", "limit"},
		{"?cursor=garbage", "cursor"},
		{"?cursor=" + strings.ToLower(all[0].ID), "cursor"}, // sorts after every id: would be the first page
		{"?cursor=" + all[0].ID + "0", "cursor"},
		{"?queue=gpu&limit=2&cursor=" + l.NextCursor[:25], "cursor"},
	}
	for _, b := range bad {
		status, ctype, data := s.do("GET", "/api/v1/jobs"+b.query, "")
		checkError(t, status, ctype, data, http.StatusBadRequest, berth.ECodeInvalid, b.field)
		if b.field == "cursor" && !strings.Contains(string(data), "not a cursor this server issued") {
			t.Errorf("GET /api/v1/jobs%s: %s; want it to say the cursor is not one the server issued", b.query, data)
		}
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	s := newSecuredServer(t)

	for _, tt := range []struct{ method, path, body string }{
		{"GET", "/api/v1/jobs", ""},
		{"POST", "/api/v1/jobs", `{"command":["true"]}`},
		{"GET", "/api/v1/workers", ""},
		{"GET", "/api/v1/events", ""},
		{"GET", "/metrics", ""},
		{"GET", "/api/v1/nope", ""},
	} {
		status, ctype, data := s.doAuth(tt.method, tt.path, tt.body, "")
		checkError(t, status, ctype, data, http.StatusUnauthorized, berth.ECodeUnauthorized, "")
		status, ctype, data = s.doAuth(tt.method, tt.path, tt.body, "wrong")
		checkError(t, status, ctype, data, http.StatusUnauthorized, berth.ECodeUnauthorized, "")
	}
	if n := s.count(); n != 0 {
		t.Errorf("unauthenticated submit stored %d jobs", n)
	}
	s.submit(`{"command":["true"]}`, http.StatusCreated)
	if n := s.count(); n != 1 {
		t.Errorf("store holds %d jobs, want 1", n)
	}
	if status, _, data := s.doAuth("GET", "/healthz", "", ""); status != http.StatusOK {
		t.Errorf("/healthz without token: %d %s", status, data)
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	status, ctype, data := s.do("GET", "/healthz", "")
	var body map[string]string
	if status != http.StatusOK || !strings.HasPrefix(ctype, "application/json") ||
		json.Unmarshal(data, &body) != nil || body["status"] != "ok" {
		t.Errorf("/healthz = %d %q %s", status, ctype, data)
	}
}

// metricsValues parses Prometheus text into series → value, failing on a
// line that is neither a comment nor "series value".
func metricsValues(t *testing.T, text string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("metrics line %q has no value", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: value: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	scrape := func() (string, map[string]float64) {
		t.Helper()
		status, ctype, data := s.do("GET", "/metrics", "")
		if status != http.StatusOK || !strings.HasPrefix(ctype, "text/plain") {
			t.Fatalf("/metrics = %d %q: %s", status, ctype, data)
		}
		return string(data), metricsValues(t, string(data))
	}
	text, _ := scrape()
	for _, want := range []string{
		"# TYPE berth_queue_depth gauge",
		"berth_queue_depth{queue=\"default\"} 0", // 0, not missing, while nothing waits
		"# TYPE berth_jobs gauge",
		"# TYPE berth_workers gauge",
		"# TYPE berth_scheduling_latency_seconds histogram",
		"berth_scheduling_latency_seconds_bucket{le=\"+Inf\"} 0",
		"berth_scheduling_latency_seconds_count 0",
		"berth_jobs{state=\"pending\"} 0",
		"berth_workers{state=\"ready\"} 0",
		"# TYPE berth_jobs_submitted_total counter\nberth_jobs_submitted_total 0\n",
		"# TYPE berth_jobs_finished_total counter\nberth_jobs_finished_total{state=\"succeeded\"} 0\n" +
			"berth_jobs_finished_total{state=\"failed\"} 0\nberth_jobs_finished_total{state=\"cancelled\"} 0\n",
		"# TYPE berth_attempts_ended_total counter\nberth_attempts_ended_total{state=\"succeeded\"} 0\n",
		"berth_attempts_ended_total{state=\"preempted\"} 0\n",
		"# TYPE berth_attempts_started_total counter\n",
		"# TYPE berth_jobs_requeued_total counter\n",
		"# TYPE berth_job_retries_total counter\n",
		"# TYPE berth_service_restarts_total counter\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, text)
		}
	}

	s.submit(`{"command":["true"],"queue":"gpu","array":3}`, http.StatusCreated)
	cpu := s.submit(`{"command":["true"],"queue":"cpu"}`, http.StatusCreated)
	if status, _, data := s.do("POST", "/api/v1/jobs/"+cpu[0].ID+"/cancel", ""); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, data)
	}
	_, m := scrape()
	for series, want := range map[string]float64{
		`berth_queue_depth{queue="gpu"}`: 3,
		`berth_jobs{state="pending"}`:    3,
		`berth_jobs{state="running"}`:    0,
		`berth_workers{state="ready"}`:   0,
		// Counters: the cancelled job stays counted as submitted.
		`berth_jobs_submitted_total`:                   4,
		`berth_jobs_finished_total{state="cancelled"}`: 1,
		`berth_jobs_finished_total{state="succeeded"}`: 0,
		`berth_attempts_started_total`:                 0,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	// The process's own series, as Prometheus client libraries name them.
	now := float64(time.Now().Unix())
	for series, ok := range map[string]func(float64) bool{
		"process_cpu_seconds_total":     func(v float64) bool { return v > 0 },
		"process_resident_memory_bytes": func(v float64) bool { return v > 1<<20 },
		"process_open_fds":              func(v float64) bool { return v >= 3 },
		"process_start_time_seconds":    func(v float64) bool { return v > now-3600 && v <= now+1 },
		"go_goroutines":                 func(v float64) bool { return v >= 1 },
		"go_memstats_heap_alloc_bytes":  func(v float64) bool { return v > 0 },
		"go_gc_cycles_total":            func(v float64) bool { return v >= 0 },
		"berth_capacity_gpus":           func(v float64) bool { return v == 0 },
		"berth_gpus_in_use":             func(v float64) bool { return v == 0 },
	} {
		if v, present := m[series]; !present || !ok(v) {
			t.Errorf("%s = %v (present %v): implausible", series, v, present)
		}
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id, typ, data string
}

// readEvent reads the next event (lines up to a blank line) from r.
func readEvent(r *bufio.Reader) (sseEvent, error) {
	var e sseEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return e, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if e.typ != "" || e.data != "" {
				return e, nil
			}
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimPrefix(v, " ")
		switch k {
		case "id":
			e.id = v
		case "event":
			e.typ = v
		case "data":
			e.data += v
		}
	}
}

func TestEventsStream(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.url+"/api/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /api/v1/events: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/events: status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type = %q, want text/event-stream", ct)
	}

	// The headers arrived, so the stream is subscribed: submit now.
	j := s.submit(`{"command":["true"]}`, http.StatusCreated)[0]
	r := bufio.NewReader(resp.Body)
	for {
		e, err := readEvent(r)
		if err != nil {
			t.Fatalf("no job.submitted event for %s: %v", j.ID, err)
		}
		if e.typ != berth.EventJobSubmitted {
			continue
		}
		var ev berth.Event
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			t.Fatalf("event data %q: %v", e.data, err)
		}
		if ev.JobID != j.ID {
			continue
		}
		if ev.Type != berth.EventJobSubmitted || ev.State != berth.JobPending || e.id != strconv.FormatUint(ev.Seq, 10) {
			t.Errorf("event = id %q %+v", e.id, ev)
		}
		break
	}

	status, ctype, data := s.do("GET", "/api/v1/events?after=x", "")
	checkError(t, status, ctype, data, http.StatusBadRequest, berth.ECodeInvalid, "after")
}

// dialAgent opens an agent WebSocket session.
func (s *server) dialAgent(ctx context.Context) *websocket.Conn {
	s.t.Helper()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.url, "http")+"/api/v1/agent", nil)
	if err != nil {
		s.t.Fatalf("dial agent: %v", err)
	}
	s.t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

// registerAgent dials the agent WebSocket and registers reg on it,
// requiring an ack; the session stays open until the test ends.
func (s *server) registerAgent(ctx context.Context, reg *wire.Register) *websocket.Conn {
	s.t.Helper()
	msg, err := wire.Encode(wire.TypeRegister, reg)
	if err != nil {
		s.t.Fatal(err)
	}
	c := s.dialAgent(ctx)
	if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
		s.t.Fatal(err)
	}
	if _, data, err := c.Read(ctx); err != nil || !strings.Contains(string(data), wire.TypeAck) {
		s.t.Fatalf("register: %s, %v; want an ack", data, err)
	}
	return c
}

// wantClosed requires the server to close c with a policy violation.
func wantClosed(t *testing.T, ctx context.Context, c *websocket.Conn) {
	t.Helper()
	typ, data, err := c.Read(ctx)
	if err == nil {
		t.Fatalf("session still open: got %v %s", typ, data)
	}
	if got := websocket.CloseStatus(err); got != websocket.StatusPolicyViolation {
		t.Fatalf("session ended with %v (status %d), want a policy-violation close", err, got)
	}
}

func TestAgentBadSessionsCloseOnlyThemselves(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	heartbeat, err := wire.Encode(wire.TypeHeartbeat, &wire.Heartbeat{})
	if err != nil {
		t.Fatal(err)
	}
	badVersion, err := wire.Encode(wire.TypeRegister, &wire.Register{Version: wire.Version + 1, WorkerID: "w0", Host: "h0", Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		frame []byte
	}{
		{"malformed frame", []byte("this is not json")},
		{"unknown type", []byte(`{"type":"format_disk"}`)},
		{"first message not register", heartbeat},
		{"server-only message", []byte(`{"type":"job_assign","payload":{}}`)},
		{"wrong protocol version", badVersion},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := s.dialAgent(ctx)
			if err := c.Write(ctx, websocket.MessageText, tt.frame); err != nil {
				t.Fatalf("write: %v", err)
			}
			if tt.name == "wrong protocol version" {
				// Told why before the close.
				_, data, err := c.Read(ctx)
				if err != nil {
					t.Fatalf("read ack: %v", err)
				}
				typ, msg, err := wire.Decode(data)
				ack, ok := msg.(*wire.Ack)
				if err != nil || typ != wire.TypeAck || !ok || ack.Of != wire.AckRegister || ack.Error == "" {
					t.Fatalf("answer to a wrong version = %s, want a register ack with an error", data)
				}
			}
			wantClosed(t, ctx, c)

			if status, _, data := s.do("GET", "/healthz", ""); status != http.StatusOK {
				t.Fatalf("/healthz after a bad session: %d %s", status, data)
			}
		})
	}

	// A well-formed session still registers.
	c := s.dialAgent(ctx)
	reg, err := wire.Encode(wire.TypeRegister, &wire.Register{
		Version: wire.Version, WorkerID: "w1", Host: "host-1", Queues: []string{"gpu"},
		GPUs: []berth.GPU{{Index: 0, Model: "H100", Memory: 80 << 30}}, CPUs: 8, Memory: 64 << 30, Slots: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageText, reg); err != nil {
		t.Fatalf("write register: %v", err)
	}
	_, data, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read register ack: %v", err)
	}
	msgs, err := wire.DecodeFrame(data)
	if err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	ack, ok := msgs[0].Body.(*wire.Ack)
	if msgs[0].Type != wire.TypeAck || !ok || ack.Of != wire.AckRegister || ack.Error != "" || ack.Lease <= 0 || ack.Heartbeat <= 0 {
		t.Fatalf("register answered with %s", data)
	}
	if len(msgs) > 1 {
		if ctl, ok := msgs[1].Body.(*wire.Control); !ok || ctl.Parked || len(ctl.Off) != 0 {
			t.Fatalf("register followed by %s, want the control of a host that is on", data)
		}
	}

	status, _, data := s.do("GET", "/api/v1/workers", "")
	var wl berth.WorkerList
	if status != http.StatusOK || json.Unmarshal(data, &wl) != nil {
		t.Fatalf("GET /api/v1/workers: %d %s", status, data)
	}
	if len(wl.Workers) != 1 || wl.Workers[0].ID != "w1" || wl.Workers[0].Host != "host-1" || wl.Workers[0].State != berth.WorkerReady {
		t.Errorf("workers = %s, want only w1 on host-1, ready", data)
	}
	if err := c.Close(websocket.StatusNormalClosure, "done"); err != nil {
		t.Logf("close: %v", err)
	}
}

func TestUnknownEndpoint(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	for _, tt := range []struct{ method, path string }{
		{"GET", "/api/v1/nope"},
		{"GET", "/nope"},
		{"POST", "/api/v2/jobs"},
		{"GET", "/api/v1/jobs/x/y/z"},
	} {
		status, ctype, data := s.do(tt.method, tt.path, "")
		checkError(t, status, ctype, data, http.StatusNotFound, berth.ECodeNotFound, "")
	}
}

// TestBodyTooLarge: a body over MaxBody, sent by a real net/http client,
// is answered 413 too_large naming the limit, and stores nothing. The
// server reads and throws away the rest (up to MaxDiscard) rather than
// closing the connection mid-send, which a client still sending sees as a
// reset: the client sends the whole body without error and the connection
// stays open (no Connection: close).
func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	for _, times := range []int{2, 20} {
		t.Run(fmt.Sprintf("%dx", times), func(t *testing.T) {
			body := `{"command":["echo","` + strings.Repeat("x", times*api.MaxBody) + `"]}`
			for _, path := range []string{"/api/v1/jobs", "/api/schedule"} {
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				defer cancel()
				sent := &countingReader{r: strings.NewReader(body)}
				req, err := http.NewRequestWithContext(ctx, "POST", s.url+path, sent)
				if err != nil {
					t.Fatal(err)
				}
				req.ContentLength = int64(len(body))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("POST %s, %d bytes: %v", path, len(body), err)
				}
				data, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatalf("POST %s: read answer: %v", path, err)
				}
				checkError(t, resp.StatusCode, resp.Header.Get("Content-Type"), data, http.StatusRequestEntityTooLarge, berth.ECodeTooLarge, "body")
				if want := strconv.Itoa(api.MaxBody); !strings.Contains(string(data), want) {
					t.Errorf("POST %s: answer %s does not name the limit %s", path, data, want)
				}
				if resp.Close {
					t.Errorf("POST %s: the server closes the connection", path)
				}
				if sent.n != len(body) {
					t.Errorf("POST %s: the client sent %d of %d bytes", path, sent.n, len(body))
				}
			}
		})
	}
	if n := s.count(); n != 0 {
		t.Errorf("store holds %d jobs after bodies too large, want 0", n)
	}
}

// countingReader counts the bytes read from r.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
