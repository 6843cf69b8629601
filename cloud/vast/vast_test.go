package vast_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud"
	"github.com/berth-dev/berth/cloud/vast"
	"github.com/berth-dev/berth/cloud/vast/vasttest"
	"github.com/berth-dev/berth/internal/fakeclock"
)

// start serves a fake with opts and returns it and a client of it.
func start(t *testing.T, opts vasttest.Options) (*vasttest.Server, *vast.Client) {
	t.Helper()
	srv := vasttest.New(opts)
	return srv, client(t, srv, vasttest.DefaultAPIKey)
}

// client serves h and returns a client of it with key.
func client(t *testing.T, h http.Handler, key string) *vast.Client {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	c, err := vast.New(vast.Config{URL: ts.URL + vasttest.BasePath, APIKey: key, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func machines(offers []cloud.Offer) []int64 {
	var out []int64
	for _, o := range offers {
		out = append(out, o.MachineID)
	}
	return out
}

func TestSearchFiltersAndOrders(t *testing.T) {
	t.Parallel()
	srv, c := start(t, vasttest.Options{Machines: 5})
	ctx := context.Background()
	all, err := c.SearchOffers(ctx, cloud.OfferQuery{GPUName: "RTX 4090", GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := machines(all); !slices.Equal(got, []int64{1001, 1002, 1003, 1004, 1005}) {
		t.Fatalf("by score: machines %v", got)
	}
	o := all[1]
	if o.ID != vasttest.OfferBase+1002 || o.PricePerHour != 0.35 || !o.Verified || o.GPURAMMB != 24564 || o.CUDAMaxGood != 12.8 || o.PublicIP != "127.0.0.1" {
		t.Errorf("offer of 1002 = %+v", o)
	}
	got, err := c.SearchOffers(ctx, cloud.OfferQuery{GPUName: "RTX 4090", GPUs: 1, MaxPricePerHour: 0.41, MinReliability: 0.9,
		Verified: true, MinDirectPorts: 1, MinInetDownMbps: 100, MinCUDA: 12.4, ExcludeMachines: []int64{1001},
		OrderBy: "dph_total desc", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if m := machines(got); !slices.Equal(m, []int64{1003, 1002}) {
		t.Errorf("price ≤ 0.41, not 1001, dearest first: machines %v", m)
	}
	var body map[string]any
	if err := json.Unmarshal(srv.Searches()[1], &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"gpu_name": map[string]any{"eq": "RTX 4090"}, "num_gpus": map[string]any{"eq": 1.0},
		"dph_total": map[string]any{"lte": 0.41}, "reliability2": map[string]any{"gte": 0.9},
		"verified": map[string]any{"eq": true}, "direct_port_count": map[string]any{"gte": 1.0},
		"inet_down": map[string]any{"gte": 100.0}, "cuda_max_good": map[string]any{"gte": 12.4},
		"machine_id": map[string]any{"notin": []any{1001.0}}, "rentable": map[string]any{"eq": true},
		"rented": map[string]any{"eq": false}, "type": "ondemand", "limit": 10.0,
		"order": []any{[]any{"dph_total", "desc"}},
	}
	if !reflect.DeepEqual(body, want) {
		t.Errorf("search body\n got %v\nwant %v", body, want)
	}
	if _, err := c.SearchOffers(ctx, cloud.OfferQuery{OrderBy: "price sideways"}); err == nil {
		t.Error("OrderBy \"price sideways\" was accepted")
	}
}

// TestSearchExcludesOnTheClientToo serves a search that ignores
// machine_id's notin, as Vast may: the client still drops the machines.
func TestSearchExcludesOnTheClientToo(t *testing.T) {
	t.Parallel()
	srv := vasttest.New(vasttest.Options{Machines: 3})
	lax := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var q map[string]any
		json.NewDecoder(r.Body).Decode(&q)
		delete(q, "machine_id")
		b, _ := json.Marshal(q)
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		srv.ServeHTTP(w, r)
	})
	c := client(t, lax, vasttest.DefaultAPIKey)
	got, err := c.SearchOffers(context.Background(), cloud.OfferQuery{ExcludeMachines: []int64{1002}})
	if err != nil {
		t.Fatal(err)
	}
	if m := machines(got); !slices.Equal(m, []int64{1001, 1003}) {
		t.Errorf("machines %v, want 1002 dropped", m)
	}
}

func TestCreateSendsTheExplicitPayload(t *testing.T) {
	t.Parallel()
	srv, c := start(t, vasttest.Options{})
	req := cloud.CreateRequest{Image: "vllm/vllm-openai:latest", Label: "berth-42", DiskGB: 60,
		Env: map[string]string{"HF_TOKEN": "hf_x", "-p 8000:8000": "1"}, Onstart: "berth agent --server http://127.0.0.1:1 &"}
	id, err := c.Create(context.Background(), vasttest.OfferBase+1001, req)
	if err != nil {
		t.Fatal(err)
	}
	calls := srv.Calls()
	if len(calls) != 1 || calls[0].Contract != id || calls[0].Status != http.StatusOK || calls[0].Offer != vasttest.OfferBase+1001 {
		t.Fatalf("calls %+v, want one create of contract %d", calls, id)
	}
	var sent map[string]any
	if err := json.Unmarshal(calls[0].Body, &sent); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"client_id": "me", "image": "vllm/vllm-openai:latest", "label": "berth-42", "disk": 60.0,
		"runtype": "ssh_direct", "env": map[string]any{"HF_TOKEN": "hf_x", "-p 8000:8000": "1"},
		"onstart": "berth agent --server http://127.0.0.1:1 &", "cancel_unavail": true}
	if !reflect.DeepEqual(sent, want) {
		t.Errorf("create body\n got %v\nwant %v", sent, want)
	}
	live := srv.Live()
	if len(live) != 1 || live[0].ID != id || live[0].Machine != 1001 {
		t.Errorf("live instances %+v, want %d on 1001", live, id)
	}
}

func TestCreateRefusedWithAContract(t *testing.T) {
	t.Parallel()
	srv, c := start(t, vasttest.Options{Faults: map[int64]vasttest.Fault{1001: vasttest.FaultRefused}})
	ctx := context.Background()
	_, err := c.Create(ctx, vasttest.OfferBase+1001, cloud.CreateRequest{Image: "img", Label: "berth-1", DiskGB: 10})
	var ce *cloud.CreateError
	if !errors.As(err, &ce) || ce.Contract == 0 || ce.Unavailable || ce.Retryable || ce.Status != http.StatusBadRequest {
		t.Fatalf("err = %#v, want a 400 CreateError with a contract", err)
	}
	if live := srv.Live(); len(live) != 1 || live[0].ID != ce.Contract {
		t.Fatalf("live %+v, want the refused contract %d billed", live, ce.Contract)
	}
	if err := c.Destroy(ctx, ce.Contract); err != nil {
		t.Fatal(err)
	}
	if live := srv.Live(); len(live) != 0 {
		t.Errorf("live after destroying the contract: %+v", live)
	}
}

func TestCreateUnavailableOffers(t *testing.T) {
	t.Parallel()
	srv, c := start(t, vasttest.Options{})
	ctx := context.Background()
	req := cloud.CreateRequest{Image: "img", Label: "berth-1", DiskGB: 10}
	if _, err := c.Create(ctx, vasttest.OfferBase+1002, req); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		offer  int64
		status int
	}{{vasttest.OfferBase + 1002, http.StatusGone}, {999, http.StatusNotFound}} {
		_, err := c.Create(ctx, tc.offer, req)
		var ce *cloud.CreateError
		if !errors.As(err, &ce) || !ce.Unavailable || ce.Status != tc.status || ce.Code != "no_such_ask" || ce.Contract != 0 {
			t.Errorf("offer %d: err = %#v, want %d no_such_ask, unavailable", tc.offer, err, tc.status)
		}
	}
	if n := len(srv.Live()); n != 1 {
		t.Errorf("%d live instances, want 1", n)
	}
}

func TestCreateRefusesBadPayloads(t *testing.T) {
	t.Parallel()
	srv, c := start(t, vasttest.Options{})
	long := string(bytes.Repeat([]byte("x"), 4097))
	for _, req := range []cloud.CreateRequest{
		{Image: "img", Label: "berth-1", DiskGB: 7},
		{Image: "img", Label: long[:257], DiskGB: 10},
		{Image: "img", Label: "berth-1", DiskGB: 10, Onstart: long},
	} {
		_, err := c.Create(context.Background(), vasttest.OfferBase+1001, req)
		var ce *cloud.CreateError
		if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || ce.Code != "invalid_args" || ce.Unavailable || ce.Contract != 0 {
			t.Errorf("disk %d, label %d chars, onstart %d chars: err = %#v, want 400 invalid_args", req.DiskGB, len(req.Label), len(req.Onstart), err)
		}
	}
	if n := len(srv.Instances()); n != 0 {
		t.Errorf("%d instances made", n)
	}
}

func TestRateLimitRetriedOnIdempotentCallsOnly(t *testing.T) {
	t.Parallel()
	srv, c := start(t, vasttest.Options{})
	ctx := context.Background()
	req := cloud.CreateRequest{Image: "img", Label: "berth-1", DiskGB: 10}

	srv.Throttle(vasttest.EndpointCreate, 1)
	_, err := c.Create(ctx, vasttest.OfferBase+1001, req)
	var ce *cloud.CreateError
	if !errors.As(err, &ce) || !ce.Retryable || ce.Contract != 0 || ce.Status != http.StatusTooManyRequests || ce.Unavailable {
		t.Fatalf("throttled create: err = %#v, want a retryable 429 CreateError", err)
	}
	if calls := srv.Calls(); len(calls) != 1 || calls[0].Status != http.StatusTooManyRequests {
		t.Fatalf("creates sent %+v, want one (not retried)", calls)
	}
	id, err := c.Create(ctx, vasttest.OfferBase+1001, req)
	if err != nil {
		t.Fatal(err)
	}

	// Three 429s, one of each body (plain text, {"detail"}, Vast's JSON):
	// two are retried, the third is the last try.
	srv.Throttle(vasttest.EndpointShow, 2)
	if _, err := c.Show(ctx, id); err != nil {
		t.Fatalf("show after two 429s: %v", err)
	}
	srv.Throttle(vasttest.EndpointShow, 3)
	if _, err := c.Show(ctx, id); !errors.Is(err, vast.ErrRateLimited) {
		t.Errorf("show after three 429s: err = %v, want ErrRateLimited", err)
	}
	srv.Throttle(vasttest.EndpointSearch, 2)
	srv.Throttle(vasttest.EndpointList, 2)
	srv.Throttle(vasttest.EndpointDestroy, 2)
	srv.Throttle(vasttest.EndpointKeys, 2)
	if _, err := c.SearchOffers(ctx, cloud.OfferQuery{}); err != nil {
		t.Errorf("search: %v", err)
	}
	if _, err := c.List(ctx, "berth-"); err != nil {
		t.Errorf("list: %v", err)
	}
	if err := c.EnsureSSHKey(ctx, "ssh-ed25519 AAAAC3Nza berth"); err != nil {
		t.Errorf("keys: %v", err)
	}
	if err := c.Destroy(ctx, id); err != nil {
		t.Errorf("destroy: %v", err)
	}
	if live := srv.Live(); len(live) != 0 {
		t.Errorf("live %+v", live)
	}
}

func TestShowFollowsTheLifecycle(t *testing.T) {
	t.Parallel()
	clock := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	host := &portHost{port: 40022}
	srv, c := start(t, vasttest.Options{Clock: clock.Now, Stage: 10 * time.Second, Host: host})
	ctx := context.Background()
	id, err := c.Create(ctx, vasttest.OfferBase+1003, cloud.CreateRequest{Image: "img", Label: "berth-7", DiskGB: 10,
		Env: map[string]string{"-p 8000:8000": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"", "created", "loading", "running"} {
		pi, err := c.Show(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if pi.ActualStatus != want {
			t.Fatalf("actual_status %q, want %q", pi.ActualStatus, want)
		}
		clock.Advance(10 * time.Second)
	}
	pi, err := c.Show(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	want := cloud.ProviderInstance{ID: id, MachineID: 1003, Label: "berth-7", ActualStatus: "running", IntendedStatus: "running",
		CurState: "running", NextState: "running", StatusMsg: "success, running img/ssh", PublicIP: "127.0.0.1",
		SSHHost: "127.0.0.1", SSHPort: 40022, DirectSSHPort: 40022, Ports: map[int]int{22: 40022, 8000: 8000},
		GPUName: "RTX 4090", NumGPUs: 1, PricePerHour: 0.4}
	if !reflect.DeepEqual(*pi, want) {
		t.Errorf("show\n got %+v\nwant %+v", *pi, want)
	}
	srv.Close()
	if host.stopped != 1 {
		t.Errorf("Close stopped %d machines, want 1", host.stopped)
	}
}

// portHost starts every machine on port.
type portHost struct {
	port    int
	stopped int
}

func (h *portHost) Start(int64, int64, vasttest.Fault, []string, map[string]string, string) (int, error) {
	return h.port, nil
}

func (h *portHost) Stop(int64) error {
	h.stopped++
	return nil
}

func TestGoneInstances(t *testing.T) {
	t.Parallel()
	srv, c := start(t, vasttest.Options{})
	ctx := context.Background()
	id, err := c.Create(ctx, vasttest.OfferBase+1001, cloud.CreateRequest{Image: "img", Label: "berth-1", DiskGB: 10})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.Destroy(ctx, id); err != nil {
			t.Fatalf("destroy: %v", err)
		}
	}
	if err := c.Destroy(ctx, 12345); err != nil {
		t.Errorf("destroy of an unknown instance: %v", err)
	}
	var statuses []int
	for _, call := range srv.Calls() {
		if call.Endpoint == vasttest.EndpointDestroy {
			statuses = append(statuses, call.Status)
		}
	}
	if !slices.Equal(statuses, []int{200, 404, 404}) {
		t.Errorf("destroys answered %v, want 200 404 404", statuses)
	}
	for _, gone := range []int64{id, 12345} {
		if _, err := c.Show(ctx, gone); !errors.Is(err, cloud.ErrGone) {
			t.Errorf("show %d: err = %v, want ErrGone", gone, err)
		}
	}
}

func TestListByLabelPrefix(t *testing.T) {
	t.Parallel()
	_, c := start(t, vasttest.Options{})
	ctx := context.Background()
	var ids []int64
	for i, label := range []string{"berth-a", "other-b", "berth-c"} {
		id, err := c.Create(ctx, vasttest.OfferBase+1001+int64(i), cloud.CreateRequest{Image: "img", Label: label, DiskGB: 10})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	got, err := c.List(ctx, "berth-")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != ids[0] || got[0].Label != "berth-a" || got[1].ID != ids[2] || got[1].MachineID != 1003 {
		t.Errorf("list berth-: %+v", got)
	}
}

func TestEnsureSSHKeyRegistersOnce(t *testing.T) {
	t.Parallel()
	srv, c := start(t, vasttest.Options{})
	ctx := context.Background()
	for _, k := range []string{"ssh-ed25519 AAAAC3NzaKEY berth@host", "ssh-ed25519 AAAAC3NzaKEY another-comment", "ssh-ed25519 AAAAC3NzaKEY"} {
		if err := c.EnsureSSHKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if keys := srv.Keys(); !slices.Equal(keys, []string{"ssh-ed25519 AAAAC3NzaKEY berth@host"}) {
		t.Errorf("account keys %q, want the key once", keys)
	}
	if err := c.EnsureSSHKey(ctx, "not-a-key"); err == nil {
		t.Error("a malformed key was accepted")
	}
}

func TestBadKeyIsAnAuthError(t *testing.T) {
	t.Parallel()
	srv := vasttest.New(vasttest.Options{})
	c := client(t, srv, "wrong")
	ctx := context.Background()
	_, errSearch := c.SearchOffers(ctx, cloud.OfferQuery{})
	_, errCreate := c.Create(ctx, vasttest.OfferBase+1001, cloud.CreateRequest{Image: "img", Label: "berth-1", DiskGB: 10})
	_, errShow := c.Show(ctx, 1)
	for _, err := range []error{errSearch, errCreate, errShow, c.Destroy(ctx, 1), c.EnsureSSHKey(ctx, "ssh-ed25519 AAAA")} {
		var be *berth.Error
		if !errors.Is(err, vast.ErrAuth) || !errors.As(err, &be) || be.Code != berth.ECodeInvalid || be.Field != "api_key" {
			t.Errorf("err = %v, want a berth.Error naming api_key, wrapping ErrAuth", err)
		}
	}
	if n := len(srv.Instances()); n != 0 {
		t.Errorf("%d instances made with a bad key", n)
	}
	if _, err := vast.New(vast.Config{}); err == nil {
		t.Error("a client without a key was made")
	}
}

// TestCreateIsNeverRetried answers a create 502 (a gateway that may have
// passed it on): one request, and an error that is no CreateError, since
// whether an instance was made is unknown. A show is retried past 502s.
func TestCreateIsNeverRetried(t *testing.T) {
	t.Parallel()
	srv := vasttest.New(vasttest.Options{})
	var puts, gets int
	gateway := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut:
			puts++
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		case http.MethodGet:
			if gets++; gets <= 2 {
				http.Error(w, "service unavailable", http.StatusServiceUnavailable)
				return
			}
		}
		srv.ServeHTTP(w, r)
	})
	c := client(t, gateway, vasttest.DefaultAPIKey)
	_, err := c.Create(context.Background(), vasttest.OfferBase+1001, cloud.CreateRequest{Image: "img", Label: "berth-1", DiskGB: 10})
	var ce *cloud.CreateError
	if err == nil || errors.As(err, &ce) || puts != 1 {
		t.Errorf("create through a 502: err = %v after %d requests, want one request and an error of unknown outcome", err, puts)
	}
	if _, err := c.Show(context.Background(), 1); !errors.Is(err, cloud.ErrGone) || gets != 3 {
		t.Errorf("show through two 503s: err = %v after %d requests, want ErrGone after 3", err, gets)
	}
}
