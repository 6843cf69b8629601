package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
)

// leakyCause is a store failure whose text holds what a client must never
// see: a path and a SQL state.
var leakyCause = &fs.PathError{Op: "open", Path: "/var/lib/berth/secret/berth.db", Err: syscall.EIO}

const leakySQLState = "SQLSTATE 57P01"

// brokenReads is a real store whose job listing fails with leakyCause.
type brokenReads struct{ store.Store }

func (brokenReads) Jobs(context.Context, store.JobFilter) ([]*berth.Job, error) {
	return nil, fmt.Errorf("list jobs (%s): %w", leakySQLState, leakyCause)
}

// logBuffer collects JSON log lines, safe for the handlers' goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the records logged so far.
func (b *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// checkWithheld checks a 5xx answer: status and code as wanted, message
// msg, a request id in the header, and no trace of the cause in the body;
// and that exactly one log line names that id, at level, with the
// cause's text.
func checkWithheld(t *testing.T, rec *httptest.ResponseRecorder, logs *logBuffer, status int, code, msg, level string) {
	t.Helper()
	id := rec.Header().Get(berth.RequestIDHeader)
	if len(id) != 26 {
		t.Fatalf("%s = %q, want a 26-character id", berth.RequestIDHeader, id)
	}
	msg = strings.ReplaceAll(msg, "ID", id)
	var body berth.ErrorBody
	if rec.Code != status || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error == nil ||
		body.Error.Code != code || body.Error.Message != msg || body.Error.Field != "" {
		t.Errorf("answer %d %s, want %d {%q, %q}", rec.Code, rec.Body, status, code, msg)
	}
	for _, leak := range []string{leakyCause.Path, leakySQLState, "input/output error"} {
		if strings.Contains(rec.Body.String(), leak) {
			t.Errorf("answer %s leaks %q", rec.Body, leak)
		}
	}
	var found int
	for _, l := range logs.lines(t) {
		if l["request_id"] != id {
			continue
		}
		found++
		if text, _ := l["err"].(string); l["level"] != level || !strings.Contains(text, leakyCause.Path) {
			t.Errorf("log line %v: want level %s and the cause's text", l, level)
		}
	}
	if found != 1 {
		t.Errorf("%d log lines name request %s, want 1: %v", found, id, logs.lines(t))
	}
}

// TestInternalErrorLoggedNotSent: a store failure answers 500 "internal
// error (request ID)" with ID in Berth-Request-Id, and the server's log
// has that id with the failure's text; a cause behind a 503 is logged,
// not sent, likewise.
func TestInternalErrorLoggedNotSent(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sec := apitest.Security(t, st, "")
	token := apitest.Token(t, sec, "root", auth.RoleAdmin, "")
	var logs logBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	serve := func(leader func(context.Context) (string, error), path string) *httptest.ResponseRecorder {
		h := api.Standby(brokenReads{st}, leader, "http://standby", sec, log)
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(berth.RequestIDHeader, "01CLIENTCHOSEN0000000000000") // ignored
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	noLeader := func(context.Context) (string, error) { return "", nil }
	checkWithheld(t, serve(noLeader, "/api/v1/jobs"), &logs, http.StatusInternalServerError,
		berth.ECodeInternal, "internal error (request ID)", "ERROR")
	leaderUnknown := func(context.Context) (string, error) {
		return "", fmt.Errorf("read leader (%s): %w", leakySQLState, leakyCause)
	}
	checkWithheld(t, serve(leaderUnknown, "/api/v1/workers"), &logs, http.StatusServiceUnavailable,
		berth.ECodeUnavailable, "this server is a standby and cannot read who leads", "WARN")
}

// failingWrites is a real store whose writes fail with leakyCause once
// failing is set.
type failingWrites struct {
	store.Store
	failing atomic.Bool
}

func (s *failingWrites) Write(ctx context.Context, b *store.Batch) error {
	if s.failing.Load() {
		return fmt.Errorf("write (%s): %w", leakySQLState, leakyCause)
	}
	return s.Store.Write(ctx, b)
}

// TestHealthzStoreFailed: once the store failed, the unauthenticated
// /healthz answers 503 "store unavailable" and logs the failure with the
// request id; the controller's error keeps the cause for errors.Is.
func TestHealthzStoreFailed(t *testing.T) {
	t.Parallel()
	sqlst, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer sqlst.Close()
	st := &failingWrites{Store: sqlst}
	sec := apitest.Security(t, sqlst, "")
	ctl := controller.New(controller.Config{Store: st, Secrets: sec.Secrets})
	if err := ctl.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer ctl.Stop(context.Background()) // it fails: the store did
	var logs logBuffer
	h := api.New(ctl, st, sec, slog.New(slog.NewJSONHandler(&logs, nil)))
	st.failing.Store(true)
	spec := berth.DefaultJobSpec()
	spec.Command = []string{"true"}
	_, err = ctl.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec})
	if !errors.Is(err, syscall.EIO) || berth.ErrorCode(err) != berth.ECodeUnavailable {
		t.Fatalf("submit on a failing store: %v (code %s), want unavailable wrapping EIO", err, berth.ErrorCode(err))
	}
	<-ctl.Failed()
	for i := range 20 { // the loop has ended: each later call still says the store failed, not a shutdown
		if _, err := ctl.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec}); !errors.Is(err, syscall.EIO) {
			t.Fatalf("submit %d after the store failed: %v, want unavailable wrapping EIO", i, err)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	checkWithheld(t, rec, &logs, http.StatusServiceUnavailable, berth.ECodeUnavailable, "store unavailable", "WARN")
}

// TestEveryAnswerHasRequestID: every route — healthz, the API's reads and
// refusals, seed 000's swap lock, /metrics, an unknown path — answers with
// a new Berth-Request-Id, later requests with later ids.
func TestEveryAnswerHasRequestID(t *testing.T) {
	t.Parallel()
	s := newSecuredServer(t)
	var last string
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", http.StatusOK},
		{"/api/v1/jobs", "", http.StatusUnauthorized},
		{"/api/v1/jobs", s.token, http.StatusOK},
		{"/api/v1/jobs/01NOPE", s.token, http.StatusNotFound},
		{"/api/swap/lock", s.token, http.StatusOK},
		{"/metrics", s.token, http.StatusOK},
		{"/no/such/path", s.token, http.StatusNotFound},
	} {
		hdr := http.Header{}
		if c.token != "" {
			hdr.Set("Authorization", "Bearer "+c.token)
		}
		hdr.Set(berth.RequestIDHeader, "01CLIENTCHOSEN0000000000000")
		resp, data := s.send("GET", c.path, "", hdr)
		ids := resp.Header.Values(berth.RequestIDHeader)
		if resp.StatusCode != c.want || len(ids) != 1 || len(ids[0]) != 26 || ids[0] <= last {
			t.Errorf("GET %s: %d with ids %q (the one before %q), want %d and one later id: %s",
				c.path, resp.StatusCode, ids, last, c.want, data)
			continue
		}
		last = ids[0]
	}
}
