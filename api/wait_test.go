package api_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
)

// waitAll asks, with token, for a wait for all jobs that gives up after
// 50 ms, and requires 200.
func (s *server) waitAll(token string) berth.WaitResult {
	s.t.Helper()
	status, _, data := s.doAuth("POST", "/api/v1/wait", `{"all":true,"timeout":"50ms"}`, token)
	var res berth.WaitResult
	if status != http.StatusOK || json.Unmarshal(data, &res) != nil {
		s.t.Fatalf("POST /api/v1/wait all: %d %s", status, data)
	}
	return res
}

// TestWaitAll: a wait for all covers the batch jobs active at the call,
// not services (counted apart); a user's covers its own jobs only, so it
// is done while another user's job still waits, and an admin's covers
// every user's.
func TestWaitAll(t *testing.T) {
	t.Parallel()
	s := newSecuredServer(t)
	alice := apitest.Token(t, s.sec, "alice", auth.RoleUser, "")
	submitAs := func(token, body string) string {
		t.Helper()
		status, _, data := s.doAuth("POST", "/api/v1/jobs", body, token)
		var resp berth.SubmitResponse
		if status != http.StatusCreated || json.Unmarshal(data, &resp) != nil || len(resp.Jobs) != 1 {
			t.Fatalf("submit %s: %d %s", body, status, data)
		}
		return resp.Jobs[0].ID
	}
	alices := submitAs(alice, `{"command":["sleep","100"]}`)
	submitAs(alice, `{"command":["sleep","100"],"kind":"service"}`)
	bobs := submitAs(s.token, `{"command":["sleep","100"],"user":"bob"}`)

	for _, tc := range []struct {
		who, token string
		pending    []string
	}{
		{"alice", alice, []string{alices}},
		{"the admin", s.token, []string{alices, bobs}},
	} {
		res := s.waitAll(tc.token)
		slices.Sort(res.PendingIDs)
		if want := slices.Sorted(slices.Values(tc.pending)); res.Done || res.Total != len(want) ||
			!slices.Equal(res.PendingIDs, want) || res.Services != 1 {
			t.Errorf("%s waits for all: %+v; want its batch jobs %v pending and 1 service left out", tc.who, res, tc.pending)
		}
	}

	if status, _, data := s.doAuth("POST", "/api/v1/jobs/"+alices+"/cancel", "", alice); status != http.StatusOK {
		t.Fatalf("alice cancels her job: %d %s", status, data)
	}
	if res := s.waitAll(alice); !res.Done || res.Total != 0 || res.Services != 1 {
		t.Errorf("alice waits for all once her batch job ended: %+v; want done, nothing left but her service", res)
	}
	if res := s.waitAll(s.token); res.Done || res.Total != 1 || len(res.PendingIDs) != 1 || res.PendingIDs[0] != bobs {
		t.Errorf("the admin waits for all while bob's job waits: %+v; want bob's job pending", res)
	}
	if st := s.jobState(bobs); st != berth.JobPending {
		t.Errorf("bob's job is %s, want pending", st)
	}
}
