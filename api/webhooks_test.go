package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/webhook"
)

// hookServer is a server with webhooks enabled and an audit log.
type hookServer struct {
	*server
	auditPath string
}

func startHookServer(t *testing.T) *hookServer {
	t.Helper()
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	st, ctl, sec := startController(t, t.TempDir(), func(st store.Store) *api.Security {
		return apitest.SecurityWithAudit(t, st, "", auditPath)
	})
	h := api.New(ctl, st, sec, nil)
	h.Webhooks = webhook.NewDispatcher(webhook.DispatcherConfig{Store: st, Events: ctl.Bus(), Poll: 10 * time.Millisecond})
	if err := h.Webhooks.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Webhooks.Stop(context.Background()); err != nil {
			t.Errorf("stop dispatcher: %v", err)
		}
	})
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	s := &server{t: t, url: hs.URL, ctl: ctl, st: st, sec: sec}
	s.token = apitest.Token(t, sec, "root", auth.RoleAdmin, "")
	return &hookServer{server: s, auditPath: auditPath}
}

// hookSink records the bodies and headers POSTed to it.
type hookSink struct {
	url  string
	mu   sync.Mutex
	got  []*http.Request
	body [][]byte
}

func newHookSink(t *testing.T) *hookSink {
	k := &hookSink{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		k.mu.Lock()
		k.got, k.body = append(k.got, r), append(k.body, b)
		k.mu.Unlock()
	}))
	t.Cleanup(hs.Close)
	k.url = hs.URL
	return k
}

func (k *hookSink) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.got)
}

// await polls cond for up to testTimeout.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// deliveries GETs the log of webhook id and requires 200.
func (s *hookServer) deliveries(id, query string) []*berth.Delivery {
	s.t.Helper()
	status, _, data := s.do("GET", "/api/v1/webhooks/"+id+"/deliveries"+query, "")
	var l berth.DeliveryList
	if status != http.StatusOK || json.Unmarshal(data, &l) != nil || l.Deliveries == nil {
		s.t.Fatalf("GET deliveries of %s: %d %s", id, status, data)
	}
	return l.Deliveries
}

func TestWebhookEndpoints(t *testing.T) {
	t.Parallel()
	s := startHookServer(t)
	sink := newHookSink(t)

	status, ctype, data := s.do("POST", "/api/v1/webhooks",
		`{"url":"`+sink.url+`/hook","secret":"top-secret-value","events":["job.submitted","service."]}`)
	if status != http.StatusCreated || ctype != "application/json" {
		t.Fatalf("POST /api/v1/webhooks: %d %s: %s", status, ctype, data)
	}
	if bytes.Contains(data, []byte("top-secret-value")) || !bytes.Contains(data, []byte(`"secret_set":true`)) {
		t.Errorf("created webhook answer %s: must say secret_set and never show the secret", data)
	}
	var hook berth.Webhook
	if err := json.Unmarshal(data, &hook); err != nil || hook.ID == "" || hook.URL != sink.url+"/hook" ||
		strings.Join(hook.Events, ",") != "job.submitted,service." || hook.CreatedBy != "root" || hook.CreatedAt.IsZero() {
		t.Fatalf("created webhook %s: %+v, %v", data, hook, err)
	}

	// Bad input: 400 naming the field, nothing created.
	for _, tc := range []struct{ body, field string }{
		{`{"url":"ftp://example.com/"}`, "url"},
		{`{"url":""}`, "url"},
		{`{"url":"http://example.com/","events":["JOB."]}`, "events"},
		{`{"url":"http://example.com/","secrets":"x"}`, "secrets"},
		{`{"url":7}`, "url"},
	} {
		status, _, data := s.do("POST", "/api/v1/webhooks", tc.body)
		var eb berth.ErrorBody
		if status != http.StatusBadRequest || json.Unmarshal(data, &eb) != nil || eb.Error.Field != tc.field {
			t.Errorf("POST %s: %d %s, want 400 naming %s", tc.body, status, data, tc.field)
		}
	}
	status, _, data = s.do("GET", "/api/v1/webhooks", "")
	var list berth.WebhookList
	if status != http.StatusOK || json.Unmarshal(data, &list) != nil || len(list.Webhooks) != 1 || list.Webhooks[0].ID != hook.ID ||
		!list.Webhooks[0].SecretSet || bytes.Contains(data, []byte("top-secret-value")) {
		t.Fatalf("GET /api/v1/webhooks: %d %s", status, data)
	}

	// Who may do what.
	operator := apitest.Token(t, s.sec, "olga", auth.RoleOperator, "")
	viewer := apitest.Token(t, s.sec, "vic", auth.RoleViewer, "")
	for _, tc := range []struct {
		method, path, body, token string
		want                      int
	}{
		{"GET", "/api/v1/webhooks", "", operator, http.StatusOK},
		{"GET", "/api/v1/webhooks/" + hook.ID + "/deliveries", "", operator, http.StatusOK},
		{"POST", "/api/v1/webhooks", `{"url":"http://example.com/"}`, operator, http.StatusForbidden},
		{"DELETE", "/api/v1/webhooks/" + hook.ID, "", operator, http.StatusForbidden},
		{"POST", "/api/v1/deliveries/x/redeliver", "", operator, http.StatusForbidden},
		{"GET", "/api/v1/webhooks", "", viewer, http.StatusForbidden},
		{"GET", "/api/v1/webhooks", "", "", http.StatusUnauthorized},
	} {
		if status, _, data := s.doAuth(tc.method, tc.path, tc.body, tc.token); status != tc.want {
			t.Errorf("%s %s as %q: %d %s, want %d", tc.method, tc.path, tc.token, status, data, tc.want)
		}
	}

	// A submission is delivered, signed.
	job := s.submit(`{"command":["true"]}`, http.StatusCreated)[0]
	await(t, "the job.submitted delivery", func() bool { return sink.count() >= 1 })
	sink.mu.Lock()
	req, body := sink.got[0], sink.body[0]
	sink.mu.Unlock()
	if req.URL.Path != "/hook" || req.Header.Get(webhook.BerthEventHeader) != "job.submitted" ||
		!webhook.Verify([]byte("top-secret-value"), body, req.Header.Get(webhook.BerthSignatureHeader)) {
		t.Errorf("delivery %s %v: %s", req.URL, req.Header, body)
	}
	var p webhook.Payload
	if err := json.Unmarshal(body, &p); err != nil || p.Data.JobID != job.ID || p.DeliveryID != req.Header.Get(webhook.BerthDeliveryHeader) {
		t.Errorf("payload %s", body)
	}
	var ds []*berth.Delivery
	await(t, "the delivery logged as delivered", func() bool {
		ds = s.deliveries(hook.ID, "")
		return len(ds) == 1 && ds[0].State == berth.DeliveryDelivered
	})
	if ds[0].ID != p.DeliveryID || ds[0].Attempts != 1 || ds[0].LastStatus != 200 || !bytes.Equal(ds[0].Body, body) {
		t.Errorf("logged delivery %+v", ds[0])
	}
	if status, _, data := s.do("GET", "/api/v1/webhooks/"+hook.ID+"/deliveries?limit=-1", ""); status != http.StatusBadRequest {
		t.Errorf("limit -1: %d %s", status, data)
	}

	// Redelivery.
	status, _, data = s.do("POST", "/api/v1/deliveries/"+ds[0].ID+"/redeliver", "")
	var queued berth.Delivery
	if status != http.StatusAccepted || json.Unmarshal(data, &queued) != nil || queued.ID != ds[0].ID || queued.State != berth.DeliveryPending {
		t.Fatalf("redeliver: %d %s", status, data)
	}
	await(t, "the redelivery", func() bool { return sink.count() >= 2 })
	if status, _, _ := s.do("POST", "/api/v1/deliveries/nope/redeliver", ""); status != http.StatusNotFound {
		t.Errorf("redeliver of an unknown delivery: %d", status)
	}

	// Delete.
	if status, _, data := s.do("DELETE", "/api/v1/webhooks/"+hook.ID, ""); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", status, data)
	}
	for _, path := range []string{"/api/v1/webhooks/" + hook.ID, "/api/v1/webhooks/" + hook.ID + "/deliveries"} {
		method := "DELETE"
		if strings.HasSuffix(path, "deliveries") {
			method = "GET"
		}
		if status, _, data := s.do(method, path, ""); status != http.StatusNotFound {
			t.Errorf("%s %s after delete: %d %s, want 404", method, path, status, data)
		}
	}

	// The audit log records each change, never the secret.
	log, err := os.ReadFile(s.auditPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"webhook.created", "webhook.redelivered", "webhook.deleted"} {
		if !bytes.Contains(log, []byte(action)) {
			t.Errorf("audit log lacks %s:\n%s", action, log)
		}
	}
	if bytes.Contains(log, []byte("top-secret-value")) {
		t.Errorf("audit log holds the secret:\n%s", log)
	}
}

func TestWebhookEndpointsDisabled(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/api/v1/webhooks", `{"url":"http://example.com/"}`},
		{"GET", "/api/v1/webhooks", ""},
		{"DELETE", "/api/v1/webhooks/x", ""},
		{"GET", "/api/v1/webhooks/x/deliveries", ""},
		{"POST", "/api/v1/deliveries/x/redeliver", ""},
	} {
		status, _, data := s.do(tc.method, tc.path, tc.body)
		if status != http.StatusNotFound || !strings.Contains(string(data), "webhooks are not enabled") {
			t.Errorf("%s %s without webhooks: %d %s", tc.method, tc.path, status, data)
		}
	}
}
