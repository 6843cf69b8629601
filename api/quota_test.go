package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// quotas GETs /api/v1/quotas and requires 200 and {"quotas":[...]}.
func (s *server) quotas() []*berth.QuotaRule {
	s.t.Helper()
	status, ctype, data := s.do("GET", "/api/v1/quotas", "")
	if status != http.StatusOK || ctype != "application/json" {
		s.t.Fatalf("GET /api/v1/quotas: status %d, %s: %s", status, ctype, data)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || len(raw) != 1 || string(raw["quotas"]) == "null" || raw["quotas"] == nil {
		s.t.Fatalf(`GET /api/v1/quotas = %s, want {"quotas":[...]}`, data)
	}
	var l berth.QuotaList
	if err := json.Unmarshal(data, &l); err != nil {
		s.t.Fatalf("decode quota list: %v: %s", err, data)
	}
	return l.Quotas
}

// putQuota PUTs body to the rule id and requires status want, returning
// the rule answered.
func (s *server) putQuota(id, body string, want int) *berth.QuotaRule {
	s.t.Helper()
	status, ctype, data := s.do("PUT", "/api/v1/quotas/"+id, body)
	if status != want || ctype != "application/json" {
		s.t.Fatalf("PUT /api/v1/quotas/%s %s: status %d (%s), want %d: %s", id, body, status, ctype, want, data)
	}
	var q berth.QuotaRule
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		s.t.Fatalf("PUT answer %s is not a rule: %v", data, err)
	}
	return &q
}

func TestQuotaSetListDelete(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	if q := s.quotas(); len(q) != 0 {
		t.Fatalf("quotas of a new server = %+v, want none", q)
	}
	start := time.Now().Add(-time.Second)

	alice := s.putQuota("user:alice", `{"max_gpus":8,"max_jobs":4,"weight":2}`, http.StatusCreated)
	if alice.Scope != "user" || alice.Name != "alice" || alice.MaxGPUs != 8 || alice.MaxJobs != 4 || alice.Weight != 2 ||
		alice.UpdatedAt.Before(start) || alice.UpdatedAt.Location() != time.UTC {
		t.Errorf("created rule = %+v", alice)
	}
	// Absent fields are no limit; a repeat replaces the rule (200).
	replaced := s.putQuota("user:alice", `{"max_jobs":1}`, http.StatusOK)
	if replaced.MaxGPUs != berth.NoLimit || replaced.MaxJobs != 1 || replaced.Weight != 0 || replaced.UpdatedAt.Before(alice.UpdatedAt) {
		t.Errorf("replaced rule = %+v, want only jobs<=1", replaced)
	}
	gpu := s.putQuota("queue:gpu", `{"max_gpus":0}`, http.StatusCreated)
	tmpl := s.putQuota("template:jupyter", `{"max_gpus":1,"max_jobs":2}`, http.StatusCreated)
	got := s.quotas()
	if len(got) != 3 || *got[0] != *gpu || *got[1] != *tmpl || *got[2] != *replaced {
		t.Errorf("GET /api/v1/quotas = %+v, want queue:gpu, template:jupyter, user:alice as answered", got)
	}

	// A rule as GET answers it can be PUT back (scope and name agree with
	// the path; updated_at is the server's).
	body, _ := json.Marshal(got[1])
	again := s.putQuota("template:jupyter", string(body), http.StatusOK)
	if again.MaxGPUs != 1 || again.MaxJobs != 2 || again.UpdatedAt.Before(tmpl.UpdatedAt) {
		t.Errorf("rule PUT back = %+v", again)
	}

	// Delete: 204 with no body, then 404.
	status, _, data := s.do("DELETE", "/api/v1/quotas/user:alice", "")
	if status != http.StatusNoContent || len(data) != 0 {
		t.Fatalf("DELETE user:alice: status %d, body %q; want 204 and none", status, data)
	}
	status, ctype, data := s.do("DELETE", "/api/v1/quotas/user:alice", "")
	checkError(t, status, ctype, data, http.StatusNotFound, berth.ECodeNotFound, "id")
	if got := s.quotas(); len(got) != 2 || got[0].ID() != "queue:gpu" || got[1].ID() != "template:jupyter" {
		t.Errorf("quotas after delete = %+v", got)
	}

	// Each change was announced once durable, in order.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	events, _, err := s.ctl.Bus().Read(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range events {
		seen = append(seen, e.Type+" "+e.Quota)
	}
	want := []string{
		berth.EventQuotaSet + " user:alice", berth.EventQuotaSet + " user:alice",
		berth.EventQuotaSet + " queue:gpu", berth.EventQuotaSet + " template:jupyter",
		berth.EventQuotaSet + " template:jupyter", berth.EventQuotaDeleted + " user:alice",
	}
	if len(seen) != len(want) {
		t.Fatalf("events = %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("event %d = %q, want %q", i, seen[i], want[i])
		}
	}
}

func TestQuotaRejectsBadInputAndStoresNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	for _, tt := range []struct {
		name, method, id, body, field string
	}{
		{"id without scope", "PUT", "alice", `{"max_gpus":1}`, "id"},
		{"unknown scope", "PUT", "group:ml", `{"max_gpus":1}`, "scope"},
		{"empty name", "PUT", "user:", `{"max_gpus":1}`, "name"},
		{"name with space", "PUT", "user:a%20b", `{"max_gpus":1}`, "name"},
		{"caps nothing", "PUT", "user:alice", `{}`, "max_gpus"},
		{"all no limit", "PUT", "user:alice", `{"max_gpus":-1,"max_jobs":-1}`, "max_gpus"},
		{"gpus as string", "PUT", "user:alice", `{"max_gpus":"8"}`, "max_gpus"},
		{"fractional gpus", "PUT", "user:alice", `{"max_gpus":1.5}`, "max_gpus"},
		{"gpus -2", "PUT", "user:alice", `{"max_gpus":-2}`, "max_gpus"},
		{"jobs over max", "PUT", "user:alice", `{"max_jobs":1000001}`, "max_jobs"},
		{"negative weight", "PUT", "user:alice", `{"weight":-1}`, "weight"},
		{"weight on a queue", "PUT", "queue:gpu", `{"max_gpus":1,"weight":2}`, "weight"},
		{"unknown field", "PUT", "user:alice", `{"gpus":8}`, "gpus"},
		{"scope contradicting the path", "PUT", "user:alice", `{"scope":"queue","max_gpus":1}`, "scope"},
		{"name contradicting the path", "PUT", "user:alice", `{"name":"bob","max_gpus":1}`, "name"},
		{"malformed JSON", "PUT", "user:alice", `{"max_gpus":`, "body"},
		{"empty body", "PUT", "user:alice", ``, "body"},
		{"trailing data", "PUT", "user:alice", `{"max_gpus":1} {}`, "body"},
		{"array body", "PUT", "user:alice", `[{"max_gpus":1}]`, "body"},
		{"delete of a malformed id", "DELETE", "alice", ``, "id"},
		{"delete of a bad scope", "DELETE", "group:ml", ``, "scope"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			status, ctype, data := s.do(tt.method, "/api/v1/quotas/"+tt.id, tt.body)
			checkError(t, status, ctype, data, http.StatusBadRequest, berth.ECodeInvalid, tt.field)
		})
	}
	t.Cleanup(func() {
		if q := s.quotas(); len(q) != 0 {
			t.Errorf("store holds %+v after rejected requests, want nothing", q)
		}
		if last := s.ctl.Bus().Last(); last != 0 {
			t.Errorf("%d events published after rejected requests, want 0", last)
		}
	})
}
