package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// TestSubmitRefusesWhatNoWorkerFits: against a cluster whose one worker
// has 4 H100s, a job, array, gang or schedule entry that no worker could
// ever run is a 409 unsatisfiable naming the field and what the worker
// has, and stores and announces nothing; with hold_until_fits it is
// accepted with that as a warning.
func TestSubmitRefusesWhatNoWorkerFits(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	reg := &wire.Register{Version: wire.Version, WorkerID: "w1", Host: "h1", CPUs: 16, Memory: 64 << 30, Slots: 4}
	for i := range 4 {
		reg.GPUs = append(reg.GPUs, berth.GPU{Index: i, Model: "H100", Memory: 80 << 30})
	}
	s.registerAgent(ctx, reg)
	events := s.ctl.Bus().Last()

	for _, tc := range []struct {
		path, body, field, message string
	}{
		{"/api/v1/jobs", `{"command":["true"],"resources":{"gpus":8}}`, "resources.gpus", "8 requested; the largest worker has 4xH100:80GiB"},
		{"/api/v1/jobs?ids_only=true", `{"command":["true"],"resources":{"gpus":8},"array":3}`, "resources.gpus", "8 requested"},
		{"/api/v1/jobs", `{"command":["true"],"resources":{"gpus":1,"gpu_type":"B200"}}`, "resources.gpu_type", `"B200" requested; the workers have H100`},
		{"/api/v1/jobs", `{"command":["true"],"resources":{"memory":"1TiB"}}`, "resources.memory", "1TiB requested; the largest worker has 64GiB"},
		{"/api/v1/jobs", `{"command":["true"],"resources":{"cpus":32}}`, "resources.cpus", "32 requested; the largest worker has 16"},
		{"/api/v1/jobs", `{"command":["true"],"nodes":2,"resources":{"gpus":4}}`, "nodes", "2 requested; only 1 worker has 4 GPUs"},
		{"/api/schedule", `{"name":"nightly","cron":"@daily","job":{"command":"true","resources":{"gpus":8}}}`, "job.resources.gpus", "8 requested"},
	} {
		status, ctype, data := s.do("POST", tc.path, tc.body)
		checkError(t, status, ctype, data, http.StatusConflict, berth.ECodeUnsatisfiable, tc.field)
		var e errorBody
		if json.Unmarshal(data, &e) != nil || e.Error == nil || !strings.HasPrefix(e.Error.Message, tc.message) ||
			!strings.Contains(e.Error.Message, "hold_until_fits") {
			t.Errorf("POST %s %s: %s; want a message starting %q and naming hold_until_fits", tc.path, tc.body, data, tc.message)
		}
	}
	if n := s.count(); n != 0 {
		t.Errorf("store holds %d jobs after refusals, want 0", n)
	}
	if a := s.call("GET", "/api/schedule", ""); a.status != 200 || strings.TrimSpace(string(a.body)) != `{"schedules":[]}` {
		t.Errorf("schedules after a refusal: %d %s, want none", a.status, a.body)
	}
	if last := s.ctl.Bus().Last(); last != events {
		t.Errorf("%d events published by refused submissions, want 0", last-events)
	}

	status, _, data := s.do("POST", "/api/v1/jobs", `{"command":["true"],"resources":{"gpus":8},"hold_until_fits":true}`)
	var answer struct {
		Jobs     []*berth.Job
		Warnings []string
	}
	if status != http.StatusCreated || json.Unmarshal(data, &answer) != nil || len(answer.Jobs) != 1 ||
		len(answer.Warnings) != 1 || !strings.HasPrefix(answer.Warnings[0], "resources.gpus: 8 requested; the largest worker has 4xH100:80GiB") {
		t.Fatalf("held: %d %s; want 201, one job and the refusal as a warning", status, data)
	}
	if a := s.call("POST", "/api/schedule", `{"name":"nightly","cron":"@daily","job":{"command":"true","resources":{"gpus":8},"hold_until_fits":true}}`); a.status != 200 {
		t.Errorf("held schedule entry: %d %s, want 200", a.status, a.body)
	}
}
