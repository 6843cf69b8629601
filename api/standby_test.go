package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/sqlite"
)

// leaderRequestID is the request id the leader of TestStandbyReadsAndForwards
// answers with.
const leaderRequestID = "01LEADER000000000000000000"

// TestStandbyReadsAndForwards checks what a standby answers itself (reads,
// from the store), forwards to the leader, and refuses with 503; each
// answer has one request id, a forwarded one the leader's.
func TestStandbyReadsAndForwards(t *testing.T) {
	t.Parallel()
	var got []string
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI()+" by "+r.Header.Get("Berth-Forwarded-By"))
		body, _ := io.ReadAll(r.Body)
		w.Header().Set(berth.RequestIDHeader, leaderRequestID)
		w.Write(body)
	}))
	defer leader.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sec := apitest.Security(t, st, "")
	token := apitest.Token(t, sec, "root", auth.RoleAdmin, "")
	for _, c := range []struct {
		name, lead, method, path string
		header                   string
		want                     int
	}{
		{"forwarded", leader.URL, "PUT", "/api/v1/quotas/user:a?x=1", "", http.StatusOK},
		{"jobs read from the store", "", "GET", "/api/v1/jobs?limit=5", "", http.StatusOK},
		{"quotas read from the store", dead.URL, "GET", "/api/v1/quotas", "", http.StatusOK},
		{"an unknown job, from the store", "", "GET", "/api/v1/jobs/01NOPE", "", http.StatusNotFound},
		{"healthz answered", leader.URL, "GET", "/healthz", "", http.StatusOK},
		{"agents go to the leader", leader.URL, "GET", "/api/v1/agent", "", http.StatusServiceUnavailable},
		{"forwarded once only", leader.URL, "GET", "/api/v1/workers", "http://elsewhere", http.StatusServiceUnavailable},
		{"no leader", "", "POST", "/api/v1/jobs", "", http.StatusServiceUnavailable},
		{"leader unreachable", dead.URL, "GET", "/api/v1/workers", "", http.StatusServiceUnavailable},
		{"leading, loading the store", "http://standby", "POST", "/api/v1/jobs", "", http.StatusServiceUnavailable},
		{"healthz while loading", "http://standby", "GET", "/healthz", "", http.StatusOK},
	} {
		h := api.Standby(st, func(context.Context) (string, error) { return c.lead, nil }, "http://standby", sec, nil)
		req := httptest.NewRequest(c.method, c.path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if c.header != "" {
			req.Header.Set("Berth-Forwarded-By", c.header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s: status %d, want %d: %s", c.name, rec.Code, c.want, rec.Body)
			continue
		}
		ids := rec.Header().Values(berth.RequestIDHeader)
		if len(ids) != 1 || len(ids[0]) != 26 || (c.name == "forwarded") != (ids[0] == leaderRequestID) {
			t.Errorf("%s: request ids %q, want one, the leader's (%s) if forwarded", c.name, ids, leaderRequestID)
		}
		if c.path == "/healthz" {
			want := map[bool]string{true: `"status":"starting"`, false: `"status":"standby"`}[c.lead == "http://standby"]
			if !strings.Contains(rec.Body.String(), want) {
				t.Errorf("%s: %s, want %s", c.name, rec.Body, want)
			}
		}
		if c.want == http.StatusServiceUnavailable {
			if want := map[bool]string{true: "leads and is starting", false: "is a standby"}[c.lead == "http://standby"]; !strings.Contains(rec.Body.String(), want) {
				t.Errorf("%s: %s, want it to say it %s", c.name, rec.Body, want)
			}
			var body berth.ErrorBody
			if json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error.Code != berth.ECodeUnavailable ||
				rec.Header().Values(berth.LeaderHeader) == nil || rec.Header().Get(berth.LeaderHeader) != c.lead {
				t.Errorf("%s: %s with leader header %q", c.name, rec.Body, rec.Header().Get(berth.LeaderHeader))
			}
		}
	}
	if len(got) != 1 || got[0] != "PUT /api/v1/quotas/user:a?x=1 by http://standby" {
		t.Fatalf("leader got %q, want only the one forwarded request", got)
	}
}
