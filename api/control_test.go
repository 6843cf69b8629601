package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
)

// controls GETs a host's controls and requires 200.
func (s *server) controls(host string) []*berth.WorkerControl {
	s.t.Helper()
	status, _, data := s.do("GET", "/api/v1/workers/"+host+"/control", "")
	var l berth.ControlList
	if status != http.StatusOK || json.Unmarshal(data, &l) != nil || l.Controls == nil {
		s.t.Fatalf(`GET control of %s: %d %s, want {"controls":[...]}`, host, status, data)
	}
	return l.Controls
}

func TestWorkerControlSetAndGet(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	status, _, data := s.do("PUT", "/api/v1/workers/spark/control", `{"queue":"gpu","desired_state":"off","stop_policy":"drain","requested_by":"ops"}`)
	var resp berth.ControlResponse
	if status != http.StatusOK || json.Unmarshal(data, &resp) != nil || len(resp.Controls) != 1 {
		t.Fatalf("PUT control: %d %s", status, data)
	}
	if c := resp.Controls[0]; c.Host != "spark" || c.Queue != "gpu" || !c.Off() || c.StopPolicy != "drain" || c.RequestedBy != "ops" || c.UpdatedAt.IsZero() {
		t.Fatalf("control = %+v", c)
	}
	// No queue: every queue, with the default policy, overwriting gpu's row.
	status, _, data = s.do("PUT", "/api/v1/workers/spark/control", `{"desired_state":"off"}`)
	if status != http.StatusOK {
		t.Fatalf("PUT control for every queue: %d %s", status, data)
	}
	got := s.controls("spark")
	if len(got) != 2 || got[0].Queue != "*" || got[1].Queue != "gpu" || got[0].StopPolicy != "hard" || got[1].StopPolicy != "hard" {
		t.Fatalf("controls = %+v, want * and gpu both off (hard)", got)
	}
	if other := s.controls("other"); len(other) != 0 {
		t.Fatalf("controls of another host = %+v", other)
	}
}

func TestWorkerControlBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	for _, c := range []struct{ host, body, field string }{
		{"spark", `{"desired_state":"off","stop_policy":"gentle"}`, "stop_policy"},
		{"spark", `{"desired_state":"sideways"}`, "desired_state"},
		{"spark", `{"desired_state":""}`, "desired_state"},
		{"spark", `{"desired_state":"off","queue":"GPU!"}`, "queue"},
		{"spark", `{"desired_state":"off","requested_by":"` + strings.Repeat("x", 129) + `"}`, "requested_by"},
		{"spark", `{"desired_state":"off","colour":"red"}`, "colour"},
		{"spark", `{"desired_state":1}`, "desired_state"},
		{"-spark", `{"desired_state":"off"}`, "host"},
		{"sp%20ark", `{"desired_state":"off"}`, "host"},
	} {
		status, _, data := s.do("PUT", "/api/v1/workers/"+c.host+"/control", c.body)
		var body berth.ErrorBody
		if status != http.StatusBadRequest || json.Unmarshal(data, &body) != nil || body.Error == nil || body.Error.Field != c.field {
			t.Errorf("PUT %s %s: %d %s, want 400 naming %s", c.host, c.body, status, data, c.field)
		}
	}
	if got := s.controls("spark"); len(got) != 0 {
		t.Fatalf("controls after bad input = %+v, want none", got)
	}
	if status, _, _ := s.do("GET", "/api/v1/workers/-spark/control", ""); status != http.StatusBadRequest {
		t.Fatalf("GET control of a malformed host: %d, want 400", status)
	}
}
