package api_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
)

// TestLogsHeadEachAttemptOnItsOwnLine reads the output of a job retried
// once, whose first attempt ended mid-line: the second attempt is
// introduced by one header, on a line of its own, with or without follow.
func TestLogsHeadEachAttemptOnItsOwnLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	var ids berth.IDGen
	job := &berth.Job{ID: ids.New(now), JobSpec: berth.DefaultJobSpec(), State: berth.JobFailed, Attempts: 2, CreatedAt: now}
	job.Command = berth.Argv{"flaky"}
	first := &berth.Attempt{ID: ids.New(now), JobID: job.ID, WorkerID: "w-1", Host: "h1", State: berth.AttemptFailed, CreatedAt: now}
	second := &berth.Attempt{ID: ids.New(now), JobID: job.ID, WorkerID: "w-2", Host: "h2", State: berth.AttemptFailed, CreatedAt: now}
	err = st.Write(ctx, &store.Batch{Jobs: []*berth.Job{job}, Attempts: []*berth.Attempt{first, second}, Logs: []store.LogChunk{
		{AttemptID: first.ID, Data: []byte("partial")},
		{AttemptID: second.ID, Data: []byte("second\n")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	_, ctl, sec := startController(t, dir, func(st store.Store) *api.Security { return apitest.Security(t, st, auth.RoleAdmin) })
	hs := httptest.NewServer(api.New(ctl, sec, nil))
	t.Cleanup(hs.Close)
	s := &server{t: t, url: hs.URL}
	want := "partial\n==> attempt 2 on h2 (" + second.ID + ") <==\nsecond\n"
	for _, path := range []string{"/logs", "/logs?follow=true"} {
		if code, _, body := s.do("GET", "/api/v1/jobs/"+job.ID+path, ""); code != 200 || string(body) != want {
			t.Errorf("GET %s: %d\n%s\nwant:\n%s", path, code, body, want)
		}
	}
	// A client resuming from an offset gets the rest, headers included;
	// attempt=N gets one attempt's output alone.
	for path, want := range map[string]string{
		"/logs?offset=7":                  want[7:],
		"/logs?offset=12&follow=true":     want[12:],
		"/logs?offset=1000":               "",
		"/logs?attempt=1":                 "partial",
		"/logs?attempt=2&follow=true":     "second\n",
		"/logs?attempt=2&offset=3":        "ond\n",
		"/logs?attempt=0&offset=0":        want,
		"/logs?attempt=1&follow=true&x=1": "partial",
	} {
		if code, _, body := s.do("GET", "/api/v1/jobs/"+job.ID+path, ""); code != 200 || string(body) != want {
			t.Errorf("GET %s: %d %q, want %q", path, code, body, want)
		}
	}
	for path, field := range map[string]string{
		"/logs?attempt=3":             "",
		"/logs?attempt=3&follow=true": "", // the job has ended: no attempt 3 to wait for
		"/logs?attempt=-1":            "attempt",
		"/logs?attempt=x":             "attempt",
		"/logs?offset=-5":             "offset",
		"/logs?offset=1.5":            "offset",
	} {
		code, _, body := s.do("GET", "/api/v1/jobs/"+job.ID+path, "")
		if wantCode := map[bool]int{true: 404, false: 400}[field == ""]; code != wantCode || !strings.Contains(string(body), `"field":"`+field+`"`) && field != "" {
			t.Errorf("GET %s: %d %s; want %d naming %q", path, code, body, wantCode, field)
		}
	}
}
