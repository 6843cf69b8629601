package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"reflect"
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
	now := time.Now().UTC()
	var ids berth.IDGen
	job := &berth.Job{ID: ids.New(now), JobSpec: berth.DefaultJobSpec(), State: berth.JobFailed, Attempts: 2, CreatedAt: now}
	job.Command = berth.Argv{"flaky"}
	first := &berth.Attempt{ID: ids.New(now), JobID: job.ID, WorkerID: "w-1", Host: "h1", State: berth.AttemptFailed, CreatedAt: now}
	second := &berth.Attempt{ID: ids.New(now), JobID: job.ID, WorkerID: "w-2", Host: "h2", State: berth.AttemptFailed, CreatedAt: now}
	s := serveJob(t, job, []*berth.Attempt{first, second}, []store.LogChunk{
		{AttemptID: first.ID, Data: []byte("partial")},
		{AttemptID: second.ID, Data: []byte("second\n")},
	})
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

// TestLogsNameAGangMembersRank reads the output of a two-member gang
// placed twice: each member's block is headed by its attempt and rank, and
// attempt=2 streams both members of the second placement.
func TestLogsNameAGangMembersRank(t *testing.T) {
	t.Parallel()
	job, attempts := retriedGang()
	var chunks []store.LogChunk
	for i, a := range attempts {
		chunks = append(chunks, store.LogChunk{AttemptID: a.ID, Data: fmt.Appendf(nil, "p%d r%d\n", i/2+1, a.TaskIndex)})
	}
	s := serveJob(t, job, attempts, chunks)
	head := func(i int) string {
		a := attempts[i]
		return fmt.Sprintf("==> attempt %d, rank %d on %s (%s) <==\n", i/2+1, a.TaskIndex, a.Host, a.ID)
	}
	second := head(2) + "p2 r0\n" + head(3) + "p2 r1\n"
	for path, want := range map[string]string{
		"/logs":           head(0) + "p1 r0\n" + head(1) + "p1 r1\n" + second,
		"/logs?attempt=2": second,
		"/logs?attempt=1": head(0) + "p1 r0\n" + head(1) + "p1 r1\n",
	} {
		if code, _, body := s.do("GET", "/api/v1/jobs/"+job.ID+path, ""); code != 200 || string(body) != want {
			t.Errorf("GET %s: %d\n%s\nwant:\n%s", path, code, body, want)
		}
	}
	if code, _, body := s.do("GET", "/api/v1/jobs/"+job.ID+"/logs?attempt=3", ""); code != 404 {
		t.Errorf("GET attempt 3 of 2: %d %s; want 404", code, body)
	}
}

// TestLogRecordsKeepStreamsAndRanks reads a retried gang's output as
// records: each chunk with its attempt, rank, placement and stream, and
// the refusals of what records cannot combine with.
func TestLogRecordsKeepStreamsAndRanks(t *testing.T) {
	t.Parallel()
	job, attempts := retriedGang()
	var chunks []store.LogChunk
	var want []berth.LogRecord
	for i, a := range attempts {
		placement, rank := i/2+1, a.TaskIndex
		out := fmt.Appendf(nil, "p%d r%d\n", placement, rank)
		warn := fmt.Appendf(nil, "warn r%d\n", rank)
		chunks = append(chunks, store.LogChunk{AttemptID: a.ID, Data: out},
			store.LogChunk{AttemptID: a.ID, Offset: int64(len(out)), Data: warn, Stream: berth.StreamStderr})
		want = append(want, berth.LogRecord{AttemptID: a.ID, Rank: rank, Placement: placement, Data: out},
			berth.LogRecord{AttemptID: a.ID, Rank: rank, Placement: placement, Stream: berth.StreamStderr, Offset: int64(len(out)), Data: warn})
	}
	s := serveJob(t, job, attempts, chunks)
	for _, path := range []string{"/logs?format=records", "/logs?format=records&follow=true"} {
		code, ctype, body := s.do("GET", "/api/v1/jobs/"+job.ID+path, "")
		if code != 200 || ctype != "application/x-ndjson" {
			t.Fatalf("GET %s: %d %s %s", path, code, ctype, body)
		}
		var got []berth.LogRecord
		dec := json.NewDecoder(bytes.NewReader(body))
		for dec.More() {
			var rec berth.LogRecord
			if err := dec.Decode(&rec); err != nil {
				t.Fatalf("GET %s: %v in %s", path, err, body)
			}
			got = append(got, rec)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("GET %s:\n got %+v\nwant %+v", path, got, want)
		}
	}
	for path, field := range map[string]string{
		"/logs?format=html":              "format",
		"/logs?format=records&offset=3":  "format",
		"/logs?format=records&attempt=1": "format",
	} {
		if code, _, body := s.do("GET", "/api/v1/jobs/"+job.ID+path, ""); code != 400 || !strings.Contains(string(body), `"field":"`+field+`"`) {
			t.Errorf("GET %s: %d %s; want 400 naming %q", path, code, body, field)
		}
	}
}

// retriedGang returns a succeeded two-member gang placed twice, and its
// attempts: each placement's rank 0, then its rank 1.
func retriedGang() (*berth.Job, []*berth.Attempt) {
	now := time.Now().UTC()
	var ids berth.IDGen
	job := &berth.Job{ID: ids.New(now), JobSpec: berth.DefaultJobSpec(), State: berth.JobSucceeded, Attempts: 2, CreatedAt: now}
	job.Command, job.Nodes = berth.Argv{"train"}, 2
	var attempts []*berth.Attempt
	for range 2 {
		for rank := range 2 {
			attempts = append(attempts, &berth.Attempt{ID: ids.New(now), JobID: job.ID, TaskIndex: rank,
				WorkerID: fmt.Sprint("w-", rank), Host: fmt.Sprint("h", rank), State: berth.AttemptSucceeded, CreatedAt: now})
		}
	}
	return job, attempts
}

// serveJob stores job with its attempts and output in a fresh SQLite
// store and serves the API on it, as an admin sees it.
func serveJob(t *testing.T, job *berth.Job, attempts []*berth.Attempt, logs []store.LogChunk) *server {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Write(ctx, &store.Batch{Jobs: []*berth.Job{job}, Attempts: attempts, Logs: logs}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, ctl, sec := startController(t, dir, func(st store.Store) *api.Security { return apitest.Security(t, st, auth.RoleAdmin) })
	hs := httptest.NewServer(api.New(ctl, st, sec, nil))
	t.Cleanup(hs.Close)
	return &server{t: t, url: hs.URL}
}
