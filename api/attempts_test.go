package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/wire"
)

// TestAttemptValidIsReadLikeItsJob: GET /api/v1/attempts/{id}/valid says
// valid for a running attempt to its job's owner and to those who read
// every job, refuses another user (403), answers 404 for an unknown
// attempt, and says not valid, with the reason, once the job is being
// cancelled.
func TestAttemptValidIsReadLikeItsJob(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	alice := apitest.Token(t, s.sec, "alice", auth.RoleUser, "")
	carol := apitest.Token(t, s.sec, "carol", auth.RoleUser, "")
	vera := apitest.Token(t, s.sec, "vera", auth.RoleViewer, "")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	agent := s.dialAgent(ctx)
	reg, err := wire.Encode(wire.TypeRegister, &wire.Register{Version: wire.Version, WorkerID: "w1", Host: "h1", Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Write(ctx, websocket.MessageText, reg); err != nil {
		t.Fatal(err)
	}
	status, _, data := s.doAuth("POST", "/api/v1/jobs", `{"command":["sleep","100"]}`, alice)
	var sub berth.SubmitResponse
	if status != http.StatusCreated || json.Unmarshal(data, &sub) != nil {
		t.Fatalf("submit: %d %s", status, data)
	}
	var assign *wire.JobAssign
	for assign == nil {
		_, frame, err := agent.Read(ctx)
		if err != nil {
			t.Fatalf("awaiting the assignment: %v", err)
		}
		msgs, err := wire.DecodeFrame(frame)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if a, ok := m.Body.(*wire.JobAssign); ok {
				assign = a
			}
		}
	}
	path := "/api/v1/attempts/" + assign.AttemptID + "/valid"
	validity := func(token string, want bool) berth.AttemptValidity {
		t.Helper()
		status, _, data := s.doAuth("GET", path, "", token)
		var v berth.AttemptValidity
		if status != http.StatusOK || json.Unmarshal(data, &v) != nil || v.Valid != want ||
			v.AttemptID != assign.AttemptID || v.JobID != sub.Jobs[0].ID {
			t.Fatalf("GET %s: %d %s; want 200, valid %v for job %s", path, status, data, want, sub.Jobs[0].ID)
		}
		return v
	}
	validity(alice, true)
	validity(vera, true)
	status, ctype, data := s.doAuth("GET", path, "", carol)
	checkError(t, status, ctype, data, http.StatusForbidden, berth.ECodeForbidden, "")
	status, ctype, data = s.doAuth("GET", "/api/v1/attempts/nope/valid", "", alice)
	checkError(t, status, ctype, data, http.StatusNotFound, berth.ECodeNotFound, "id")

	if status, _, data := s.doAuth("POST", "/api/v1/jobs/"+sub.Jobs[0].ID+"/cancel", "", alice); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, data)
	}
	if v := validity(alice, false); !strings.Contains(v.Reason, "being stopped") {
		t.Errorf("reason %q, want it to say the attempt is being stopped", v.Reason)
	}
}
