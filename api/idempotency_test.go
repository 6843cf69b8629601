package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
)

// TestSubmitIdempotencyKeyPerUser: a key another user submitted with
// creates the request's own jobs (201) and shows nothing of the other
// user's; a user's repeat is 200 with their first jobs; a different
// request under a key the user has used is 409 on idempotency_key and
// stores nothing.
func TestSubmitIdempotencyKeyPerUser(t *testing.T) {
	t.Parallel()
	s := newSecuredServer(t)
	alice := apitest.Token(t, s.sec, "alice", auth.RoleUser, "")
	adminBody := `{"command":["echo","hi"],"env":{"WANDB_API_KEY":"sk-admin-secret"},"idempotency_key":"nightly-eval"}`
	admins := s.submit(adminBody, http.StatusCreated)

	submitAs := func(body string, want int) []*berth.Job {
		t.Helper()
		status, _, data := s.doAuth("POST", "/api/v1/jobs", body, alice)
		if status != want {
			t.Fatalf("alice POST /api/v1/jobs %s: status %d, want %d: %s", body, status, want, data)
		}
		if bytes.Contains(data, []byte("sk-admin-secret")) {
			t.Fatalf("alice's answer shows admin's env: %s", data)
		}
		var resp berth.SubmitResponse
		if err := json.Unmarshal(data, &resp); err != nil {
			t.Fatalf("decode submit response: %v: %s", err, data)
		}
		return resp.Jobs
	}
	aliceBody := `{"command":["echo","alice"],"idempotency_key":"nightly-eval"}`
	hers := submitAs(aliceBody, http.StatusCreated)
	if len(hers) != 1 || hers[0].ID == admins[0].ID || hers[0].User != "alice" {
		t.Fatalf("alice's submission returned %+v, want a job of her own", hers[0])
	}
	if again := submitAs(aliceBody, http.StatusOK); !slices.Equal(ids(again), ids(hers)) {
		t.Errorf("alice's repeat returned %v, want %v", ids(again), ids(hers))
	}
	if again := s.submit(adminBody, http.StatusOK); !slices.Equal(ids(again), ids(admins)) {
		t.Errorf("admin's repeat returned %v, want %v", ids(again), ids(admins))
	}

	for _, body := range []string{
		`{"command":["echo","bye"],"idempotency_key":"nightly-eval"}`,
		`{"command":["echo","alice"],"array":2,"idempotency_key":"nightly-eval"}`,
	} {
		status, ctype, data := s.doAuth("POST", "/api/v1/jobs", body, alice)
		checkError(t, status, ctype, data, http.StatusConflict, berth.ECodeConflict, "idempotency_key")
		if !strings.Contains(string(data), hers[0].ID) || strings.Contains(string(data), admins[0].ID) {
			t.Errorf("conflict %s should name alice's job %s and not admin's", data, hers[0].ID)
		}
	}
	if n := s.count(); n != 2 {
		t.Errorf("store holds %d jobs, want 2", n)
	}
}
