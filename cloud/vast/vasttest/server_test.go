package vasttest_test

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/cloud/vast/vasttest"
	"github.com/berth-dev/berth/internal/fakeclock"
)

// recHost records what the server asks of it.
type recHost struct {
	mu     sync.Mutex
	starts []start
	stops  []int64
}

type start struct {
	id, machine int64
	fault       vasttest.Fault
	keys        []string
	env         map[string]string
	onstart     string
}

func (h *recHost) Start(id, machine int64, fault vasttest.Fault, keys []string, env map[string]string, onstart string) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.starts = append(h.starts, start{id, machine, fault, keys, env, onstart})
	return 30000 + int(machine), nil
}

func (h *recHost) Stop(id int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stops = append(h.stops, id)
	return nil
}

// api is a test's fake server and raw access to it.
type api struct {
	t   *testing.T
	srv *vasttest.Server
	url string
}

func serve(t *testing.T, opts vasttest.Options) *api {
	t.Helper()
	srv := vasttest.New(opts)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close)
	return &api{t: t, srv: srv, url: ts.URL + vasttest.BasePath}
}

// call sends method path body with key and returns the status and body.
func (a *api) call(key, method, path, body string) (int, string) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func (a *api) do(method, path, body string) (int, string) {
	a.t.Helper()
	return a.call(vasttest.DefaultAPIKey, method, path, body)
}

// create rents machine's offer and returns the contract.
func (a *api) create(machine int64, body string) int64 {
	a.t.Helper()
	status, resp := a.do("PUT", "/asks/"+itoa(vasttest.OfferBase+machine)+"/", body)
	var r struct {
		NewContract int64 `json:"new_contract"`
	}
	if status != 200 || json.Unmarshal([]byte(resp), &r) != nil || r.NewContract == 0 {
		a.t.Fatalf("create on %d: %d %s", machine, status, resp)
	}
	return r.NewContract
}

// show returns instance id's JSON, nil when {"instances":null}.
func (a *api) show(id int64) map[string]any {
	a.t.Helper()
	status, resp := a.do("GET", "/instances/"+itoa(id)+"/", "")
	var r struct{ Instances map[string]any }
	if status != 200 || json.Unmarshal([]byte(resp), &r) != nil {
		a.t.Fatalf("show %d: %d %s", id, status, resp)
	}
	return r.Instances
}

func (a *api) listed() []float64 {
	a.t.Helper()
	_, resp := a.do("GET", "/instances/", "")
	var r struct{ Instances []map[string]any }
	json.Unmarshal([]byte(resp), &r)
	var ids []float64
	for _, in := range r.Instances {
		ids = append(ids, in["id"].(float64))
	}
	return ids
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

const body = `{"client_id":"me","image":"img","label":"berth-1","disk":10,"runtype":"ssh_direct","env":{"A":"1","-p 8000:8000":"1"},"onstart":"berth agent","cancel_unavail":true}`

func TestAuthAndRateLimitBodies(t *testing.T) {
	t.Parallel()
	a := serve(t, vasttest.Options{RateLimit: map[vasttest.Endpoint]int{vasttest.EndpointList: 3}})
	if status, resp := a.call("wrong", "GET", "/instances/", ""); status != 401 || resp != `{"error":"auth_error","msg":"Invalid user key","success":false}` {
		t.Errorf("bad key: %d %s", status, resp)
	}
	var bodies []string
	for range 3 {
		status, resp := a.do("GET", "/instances/", "")
		if status != 429 {
			t.Fatalf("throttled list: %d %s", status, resp)
		}
		bodies = append(bodies, resp)
	}
	want := []string{"API requests too frequent endpoint threshold=4.5", `{"detail":"API requests too frequent"}`,
		`{"error":"rate_limit_exceeded","msg":"API requests too frequent","success":false}`}
	if !slices.Equal(bodies, want) {
		t.Errorf("429 bodies %q, want %q", bodies, want)
	}
	if status, resp := a.do("GET", "/instances/", ""); status != 200 || resp != `{"instances":[]}` {
		t.Errorf("list after the limit: %d %s", status, resp)
	}
}

func TestLifecycleOnTheClockAndTheHost(t *testing.T) {
	t.Parallel()
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	host := &recHost{}
	a := serve(t, vasttest.Options{Clock: clock.Now, Stage: time.Minute, Host: host,
		Faults: map[int64]vasttest.Fault{1002: vasttest.FaultStall}})
	if status, _ := a.do("POST", "/ssh/", `{"ssh_key":"ssh-ed25519 AAAA berth"}`); status != 200 {
		t.Fatalf("add key: %d", status)
	}
	id := a.create(1002, strings.Replace(body, `"env":{"A":"1","-p 8000:8000":"1"}`, `"env":"-e A=1 -p 8000:8000 -e B=x=y"`, 1))
	var seen []any
	for range 4 {
		in := a.show(id)
		seen = append(seen, in["actual_status"])
		if _, ok := in["ports"]; ok != (in["actual_status"] == "running") {
			t.Errorf("ports shown while %v: %v", in["actual_status"], in["ports"])
		}
		clock.Advance(time.Minute)
	}
	if !slices.Equal(seen, []any{nil, "created", "loading", "running"}) {
		t.Errorf("actual_status went %v", seen)
	}
	in := a.show(id)
	ports, _ := json.Marshal(in["ports"])
	if string(ports) != `{"22/tcp":[{"HostIp":"0.0.0.0","HostPort":"31002"}],"8000/tcp":[{"HostIp":"0.0.0.0","HostPort":"8000"}]}` {
		t.Errorf("ports %s", ports)
	}
	want := start{id: id, machine: 1002, fault: vasttest.FaultStall, keys: []string{"ssh-ed25519 AAAA berth"},
		env: map[string]string{"A": "1", "B": "x=y"}, onstart: "berth agent"}
	if len(host.starts) != 1 || !equalStart(host.starts[0], want) {
		t.Errorf("host starts %+v, want %+v", host.starts, want)
	}
	if env := a.srv.Instances()[0].Payload.Env; env["-p 8000:8000"] != "1" || env["A"] != "1" {
		t.Errorf("env from the flag string: %v", env)
	}
	if status, _ := a.do("DELETE", "/instances/"+itoa(id)+"/", ""); status != 200 {
		t.Errorf("destroy: %d", status)
	}
	if !slices.Equal(host.stops, []int64{id}) {
		t.Errorf("host stops %v", host.stops)
	}
	// Its offer is rentable again.
	a.create(1002, body)
}

func equalStart(a, b start) bool {
	return a.id == b.id && a.machine == b.machine && a.fault == b.fault && slices.Equal(a.keys, b.keys) &&
		maps.Equal(a.env, b.env) && a.onstart == b.onstart
}

func TestCDIStaysCreated(t *testing.T) {
	t.Parallel()
	host := &recHost{}
	a := serve(t, vasttest.Options{Host: host, Faults: map[int64]vasttest.Fault{1001: vasttest.FaultCDI}})
	id := a.create(1001, body)
	in := a.show(id)
	if in["actual_status"] != "created" || !strings.Contains(in["status_msg"].(string), "unresolvable CDI device") {
		t.Errorf("cdi machine: %v %q", in["actual_status"], in["status_msg"])
	}
	if len(host.starts) != 0 {
		t.Errorf("the host started %+v", host.starts)
	}
}

func TestVanish(t *testing.T) {
	t.Parallel()
	host := &recHost{}
	a := serve(t, vasttest.Options{Host: host, Faults: map[int64]vasttest.Fault{1001: vasttest.FaultVanish}})
	gone := a.create(1001, body)
	stays := a.create(1002, body)
	if in := a.show(gone); in["actual_status"] != "running" {
		t.Fatalf("vanish machine first shows %v", in["actual_status"])
	}
	if in := a.show(gone); in != nil {
		t.Errorf("vanished instance still shown: %v", in)
	}
	if ids := a.listed(); !slices.Equal(ids, []float64{float64(stays)}) {
		t.Errorf("listed %v, want only %d", ids, stays)
	}
	a.srv.Vanish(stays)
	if ids := a.listed(); len(ids) != 0 {
		t.Errorf("listed %v after Vanish", ids)
	}
	if !slices.Equal(host.stops, []int64{gone, stays}) {
		t.Errorf("host stops %v", host.stops)
	}
	if live := a.srv.Live(); len(live) != 0 {
		t.Errorf("vanished instances still billed: %+v", live)
	}
	if status, resp := a.do("DELETE", "/instances/"+itoa(gone)+"/", ""); status != 404 || !strings.Contains(resp, `"not_found"`) {
		t.Errorf("destroy of a vanished instance: %d %s", status, resp)
	}
}

// TestOutage: while the API is out every call, of any endpoint, is
// answered with the outage's status (or its connection dropped) and
// changes nothing; once it ends the instances are as they were.
func TestOutage(t *testing.T) {
	t.Parallel()
	a := serve(t, vasttest.Options{})
	id := a.create(1001, body)
	a.srv.Outage(http.StatusServiceUnavailable)
	for _, c := range []struct{ method, path string }{{"GET", "/instances/"}, {"GET", "/instances/" + itoa(id) + "/"},
		{"DELETE", "/instances/" + itoa(id) + "/"}, {"PUT", "/asks/" + itoa(vasttest.OfferBase+1002) + "/"}, {"POST", "/bundles/"}} {
		if status, resp := a.do(c.method, c.path, body); status != http.StatusServiceUnavailable || !strings.Contains(resp, "503") {
			t.Errorf("%s %s during the outage: %d %s, want 503", c.method, c.path, status, resp)
		}
	}
	a.srv.Outage(vasttest.OutageDrop)
	req, _ := http.NewRequest("POST", a.url+"/bundles/", nil) // not retried by the client, as a GET would be
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("a dropped call was answered %d, want its connection closed", resp.StatusCode)
	}
	a.srv.Outage(0)
	if n := a.srv.OutageCalls(); n != 6 {
		t.Errorf("OutageCalls = %d, want the 6 calls made during the outages", n)
	}
	if live := a.srv.Live(); len(live) != 1 || live[0].ID != id || len(a.srv.Calls()) != 1 {
		t.Errorf("after the outage: live %+v, calls %+v; want the one instance, only its create recorded", live, a.srv.Calls())
	}
	if ids := a.listed(); !slices.Equal(ids, []float64{float64(id)}) {
		t.Errorf("listed %v after the outage, want %d", ids, id)
	}
}

func TestRefusedCreatesAreRecorded(t *testing.T) {
	t.Parallel()
	a := serve(t, vasttest.Options{})
	for _, tc := range []struct{ body, code string }{
		{strings.Replace(body, `"disk":10`, `"disk":7.5`, 1), "invalid_args"},
		{strings.Replace(body, `"runtype":"ssh_direct"`, `"runtype":"vm"`, 1), "invalid_args"},
		{strings.Replace(body, `"cancel_unavail":true`, `"cancel_unavail":true,"price":200`, 1), "invalid_price"},
		{`{"image":`, "invalid_args"},
	} {
		if status, resp := a.do("PUT", "/asks/"+itoa(vasttest.OfferBase+1001)+"/", tc.body); status != 400 || !strings.Contains(resp, `"error":"`+tc.code+`"`) {
			t.Errorf("%s: %d %s, want 400 %s", tc.body, status, resp, tc.code)
		}
	}
	calls := a.srv.Calls()
	if len(calls) != 4 || slices.ContainsFunc(calls, func(c vasttest.Call) bool { return c.Contract != 0 || c.Status != 400 }) {
		t.Errorf("calls %+v", calls)
	}
	if n := len(a.srv.Instances()); n != 0 {
		t.Errorf("%d instances made", n)
	}
	if status, resp := a.do("POST", "/bundles/", `{"type":"spot"}`); status != 400 {
		t.Errorf("search of an unknown type: %d %s", status, resp)
	}
	if status, resp := a.do("POST", "/bundles/", `{"gpu_ram":{"about":1}}`); status != 400 {
		t.Errorf("search with an unknown operator: %d %s", status, resp)
	}
}

func TestParseFault(t *testing.T) {
	t.Parallel()
	for _, f := range vasttest.Faults {
		if got, err := vasttest.ParseFault(string(f)); err != nil || got != f {
			t.Errorf("ParseFault(%q) = %q, %v", f, got, err)
		}
	}
	if _, err := vasttest.ParseFault("zap"); err == nil || !strings.Contains(err.Error(), "ssh-key") {
		t.Errorf("ParseFault(zap): %v", err)
	}
}
