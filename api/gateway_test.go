package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/gateway"
)

// TestGatewayCaller mounts the inference gateway on a server that trusts
// no one without a token: tokens made through the API carry their model
// allow-list and rate limit (checked, and listed), and the gateway's
// refusals are OpenAI-style — no key or a revoked one 401, a viewer 403,
// past the token's rpm 429.
func TestGatewayCaller(t *testing.T) {
	t.Parallel()
	s := startSecured(t, "")
	h := s.h.(*api.Server)
	h.Gateway = gateway.New(gateway.Config{Cluster: s.ctl, Authenticate: h.GatewayCaller})

	for _, bad := range []struct{ body, field string }{
		{`{"name":"app","role":"user","rpm":-1}`, "rpm"},
		{`{"name":"app","role":"user","rpm":1000001}`, "rpm"},
		{`{"name":"app","role":"user","models":["a","a"]}`, "models"},
		{`{"name":"app","role":"user","models":["a b"]}`, "models"},
		{`{"name":"app","role":"user","models":[""]}`, "models"},
	} {
		status, _, data := s.doAuth("POST", "/api/v1/tokens", bad.body, s.token)
		var e struct{ Error berth.Error }
		_ = json.Unmarshal(data, &e)
		if status != http.StatusBadRequest || e.Error.Field != bad.field {
			t.Errorf("POST /api/v1/tokens %s: %d %s, want 400 naming %s", bad.body, status, data, bad.field)
		}
	}
	status, _, data := s.doAuth("POST", "/api/v1/tokens", `{"name":"app","role":"user","models":["org/a","org/b"],"rpm":2}`, s.token)
	var app berth.IssuedToken
	if err := json.Unmarshal(data, &app); status != http.StatusCreated || err != nil || app.RPM != 2 || len(app.Models) != 2 {
		t.Fatalf("POST /api/v1/tokens with limits: %d %s", status, data)
	}
	if _, _, data := s.doAuth("GET", "/api/v1/tokens", "", s.token); !strings.Contains(string(data), `"models":["org/a","org/b"],"rpm":2`) {
		t.Fatalf("GET /api/v1/tokens does not show app's limits: %s", data)
	}

	viewer := issue(t, s.sec, auth.Grant{Name: "watcher", Role: auth.RoleViewer})
	gone := issue(t, s.sec, auth.Grant{Name: "gone", Role: auth.RoleUser})
	if _, err := s.sec.Tokens.Revoke(t.Context(), gone.ID, func(*berth.Token) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token string
		status      int
		typ, code   string
	}{
		{"no key", "", http.StatusUnauthorized, "authentication_error", "invalid_api_key"},
		{"not a token", "sk-not-berth", http.StatusUnauthorized, "authentication_error", "invalid_api_key"},
		{"revoked", gone.Secret, http.StatusUnauthorized, "authentication_error", "invalid_api_key"},
		{"viewer", viewer.Secret, http.StatusForbidden, "permission_error", "forbidden"},
		{"app", app.Secret, http.StatusOK, "", ""},
		{"app again", app.Secret, http.StatusOK, "", ""},
		{"app past its rpm", app.Secret, http.StatusTooManyRequests, "requests", "rate_limit_exceeded"},
		{"admin, no limit", s.token, http.StatusOK, "", ""},
	} {
		status, _, data := s.doAuth("GET", "/v1/models", "", tc.token)
		var e struct{ Error struct{ Type, Code string } }
		_ = json.Unmarshal(data, &e)
		if status != tc.status || e.Error.Type != tc.typ || e.Error.Code != tc.code {
			t.Errorf("%s: GET /v1/models: %d %s, want %d %s/%s", tc.name, status, data, tc.status, tc.typ, tc.code)
		}
	}
	if _, _, data := s.doAuth("GET", "/metrics", "", s.token); !strings.Contains(string(data), `berth_gateway_requests_total{route="/v1/models",model="",code="429"} 1`) {
		t.Errorf("metrics lack the gateway's 429:\n%s", data)
	}
}
