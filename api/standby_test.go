package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
)

func TestStandbyForwardsToTheLeader(t *testing.T) {
	t.Parallel()
	var got []string
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI()+" by "+r.Header.Get("Berth-Forwarded-By"))
		body, _ := io.ReadAll(r.Body)
		w.Write(body)
	}))
	defer leader.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	for _, c := range []struct {
		name, lead, method, path string
		header                   string
		want                     int
	}{
		{"forwarded", leader.URL, "PUT", "/api/v1/quotas/user:a?x=1", "", http.StatusOK},
		{"healthz answered", leader.URL, "GET", "/healthz", "", http.StatusOK},
		{"agents go to the leader", leader.URL, "GET", "/api/v1/agent", "", http.StatusServiceUnavailable},
		{"forwarded once only", leader.URL, "GET", "/api/v1/jobs", "http://elsewhere", http.StatusServiceUnavailable},
		{"no leader", "", "GET", "/api/v1/jobs", "", http.StatusServiceUnavailable},
		{"leader unreachable", dead.URL, "GET", "/api/v1/jobs", "", http.StatusServiceUnavailable},
	} {
		h := api.Standby(func(context.Context) (string, error) { return c.lead, nil }, "http://standby")
		req := httptest.NewRequest(c.method, c.path, nil)
		if c.header != "" {
			req.Header.Set("Berth-Forwarded-By", c.header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s: status %d, want %d: %s", c.name, rec.Code, c.want, rec.Body)
			continue
		}
		if c.want == http.StatusServiceUnavailable {
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
