package client_test

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/sqlite"
)

// fakeClock is a retry clock whose Sleep returns at once, moving Now on by
// the delay; it records the delays and the outages Notify reported, and
// calls onSleep (when set) with the number of the pause.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	slept   []time.Duration
	notices []error
	onSleep func(n int)
}

// retry returns the Retry of a client on c's clock, giving up after d.
func (c *fakeClock) retry(d time.Duration) client.Retry {
	c.now = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	return client.Retry{For: d, Now: c.Now, Sleep: c.Sleep, Notify: c.notify}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.slept = append(c.slept, d)
	n, hook := len(c.slept), c.onSleep
	c.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	return ctx.Err()
}

func (c *fakeClock) notify(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notices = append(c.notices, err)
}

// pauses returns the delays slept so far.
func (c *fakeClock) pauses() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.slept)
}

// script answers the requests of a fake server in turn: the nth request
// (from 0) gets steps[n], the last step every request after.
func script(steps ...http.HandlerFunc) http.HandlerFunc {
	var mu sync.Mutex
	n := 0
	return func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		step := steps[min(n, len(steps)-1)]
		n++
		mu.Unlock()
		step(w, r)
	}
}

// answers answers with status and body.
func answers(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// closes closes the connection of a request it has read without a word,
// as a server killed mid-request: the client reads EOF.
func closes(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.Close()
}

// streamsThenDies sends a log stream's first bytes, then its connection
// dies with the response unfinished.
func streamsThenDies(data string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, data)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		closes(w, r)
	}
}

const (
	waitDone    = `{"done":true,"total":1,"counts":{"succeeded":1},"pending":0}`
	waitPending = `{"done":false,"total":1,"counts":{},"pending":1,"pending_ids":["j1"]}`
)

// TestWaitRidesOutAnOutage fails the first three waits in each way a
// server restart or failover fails them: Wait tries again, pausing 1 s,
// 2 s, 4 s, and returns the answer of the fourth.
func TestWaitRidesOutAnOutage(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]http.HandlerFunc{
		"reset":             resets,
		"EOF":               closes,
		"502":               answers(http.StatusBadGateway, "bad gateway"),
		"504":               answers(http.StatusGatewayTimeout, "<html>gateway timeout</html>"),
		"standby":           standby(""),
		"shutting down 503": answers(http.StatusServiceUnavailable, `{"error":{"code":"unavailable","message":"the server is shutting down"}}`),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fs := newFakeServer(t, script(fail, fail, fail, answers(http.StatusOK, waitDone)))
			var clock fakeClock
			c := client.New(fs.url, "", nil)
			c.Retry = clock.retry(time.Minute)
			res, err := c.Wait(t.Context(), []string{"j1"}, false, 0)
			if err != nil || !res.Done || res.Counts[berth.JobSucceeded] != 1 {
				t.Fatalf("Wait = %+v, %v; want done, 1 succeeded", res, err)
			}
			if n := len(fs.requests()); n != 4 {
				t.Errorf("%d requests, want 4", n)
			}
			if got, want := clock.pauses(), []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}; !slices.Equal(got, want) {
				t.Errorf("paused %v, want %v", got, want)
			}
			if len(clock.notices) != 1 {
				t.Errorf("Notify called %d times, want once for the one outage", len(clock.notices))
			}
		})
	}
}

// TestWaitGivesUpAfterRetryFor: with no server answering, Wait gives up
// once tries have failed for Retry.For, its last try at that moment,
// with an *client.OutageError holding the last failure.
func TestWaitGivesUpAfterRetryFor(t *testing.T) {
	t.Parallel()
	dead := deadURL(t)
	var clock fakeClock
	c := client.New(dead, "", nil)
	c.Retry = clock.retry(2 * time.Minute)
	_, err := c.Wait(t.Context(), []string{"j1"}, false, 0)
	var oe *client.OutageError
	if !errors.As(err, &oe) || oe.For != 2*time.Minute {
		t.Fatalf("Wait with no server = %v; want an OutageError after 2m0s", err)
	}
	if want := "cannot reach the server at " + dead; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "2m0s") {
		t.Errorf("error %q; want it to say 2m0s and %q", err, want)
	}
	var total time.Duration
	for _, d := range clock.pauses() {
		if d > 5*time.Second {
			t.Errorf("paused %v, more than 5s", d)
		}
		total += d
	}
	if total != 2*time.Minute {
		t.Errorf("paused %v in all, want 2m0s", total)
	}
	if len(clock.notices) != 1 {
		t.Errorf("Notify called %d times, want once", len(clock.notices))
	}
}

// TestWaitRetryForCountsFailuresInARow: an answer in the middle of two
// outages, each shorter than Retry.For, starts the count again.
func TestWaitRetryForCountsFailuresInARow(t *testing.T) {
	t.Parallel()
	down := answers(http.StatusBadGateway, "")
	fs := newFakeServer(t, script(down, down, down, answers(http.StatusOK, waitPending),
		down, down, down, answers(http.StatusOK, waitDone)))
	var clock fakeClock
	c := client.New(fs.url, "", nil)
	c.Retry = clock.retry(10 * time.Second) // each outage lasts 1+2+4 s; both together 14 s
	res, err := c.Wait(t.Context(), []string{"j1"}, false, 0)
	if err != nil || !res.Done {
		t.Fatalf("Wait = %+v, %v; want done", res, err)
	}
	if len(clock.notices) != 2 {
		t.Errorf("Notify called %d times, want once per outage", len(clock.notices))
	}
}

// TestWaitTimeoutEndsAnOutage: an outage outlasting Wait's own timeout
// ends at the timeout.
func TestWaitTimeoutEndsAnOutage(t *testing.T) {
	t.Parallel()
	var clock fakeClock
	c := client.New(deadURL(t), "", nil)
	c.Retry = clock.retry(2 * time.Minute)
	_, err := c.Wait(t.Context(), []string{"j1"}, false, 10*time.Second)
	var oe *client.OutageError
	if !errors.As(err, &oe) || oe.For != 10*time.Second {
		t.Fatalf("Wait --timeout 10s with no server = %v; want an OutageError after 10s", err)
	}
}

// TestRefusalsAreNotRetried: a 4xx answer (and a 500) is the server's
// word, returned at once.
func TestRefusalsAreNotRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		code   string
	}{
		{http.StatusBadRequest, berth.ECodeInvalid},
		{http.StatusUnauthorized, berth.ECodeUnauthorized},
		{http.StatusForbidden, berth.ECodeForbidden},
		{http.StatusNotFound, berth.ECodeNotFound},
		{http.StatusInternalServerError, berth.ECodeInternal},
	} {
		body := fmt.Sprintf(`{"error":{"code":%q,"message":"no"}}`, tc.code)
		for _, call := range []struct {
			name string
			do   func(*client.Client) error
		}{
			{"wait", func(c *client.Client) error { _, err := c.Wait(t.Context(), []string{"j1"}, false, 0); return err }},
			{"logs -f", func(c *client.Client) error {
				return c.Logs(t.Context(), "j1", client.LogOptions{Follow: true}, io.Discard)
			}},
		} {
			fs := newFakeServer(t, answers(tc.status, body))
			var clock fakeClock
			c := client.New(fs.url, "", nil)
			c.Retry = clock.retry(time.Minute)
			err := call.do(c)
			var be *berth.Error
			if !errors.As(err, &be) || be.Code != tc.code || len(fs.requests()) != 1 || len(clock.pauses()) != 0 {
				t.Errorf("%s answered %d: error %v after %d requests, %d pauses; want the %s error at once",
					call.name, tc.status, err, len(fs.requests()), len(clock.pauses()), tc.code)
			}
		}
	}
}

// TestLogsFollowResumesWhereItStopped breaks a followed log stream in the
// middle of a line, then fails a try: Logs asks again from the offset it
// has written up to.
func TestLogsFollowResumesWhereItStopped(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var queries []string
	steps := script(
		streamsThenDies("one\ntw"),
		answers(http.StatusBadGateway, ""),
		streamsThenDies("o\nthr"),
		answers(http.StatusOK, "ee\n"),
	)
	fs := newFakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		steps(w, r)
	})
	var clock fakeClock
	c := client.New(fs.url, "", nil)
	c.Retry = clock.retry(time.Minute)
	var out strings.Builder
	if err := c.Logs(t.Context(), "j1", client.LogOptions{Follow: true}, &out); err != nil {
		t.Fatalf("Logs: %v", err)
	}
	if out.String() != "one\ntwo\nthree\n" {
		t.Errorf("Logs wrote %q, want each byte once", out.String())
	}
	want := []string{"follow=true&attempt=0&offset=0", "follow=true&attempt=0&offset=6", "follow=true&attempt=0&offset=6",
		"follow=true&attempt=0&offset=11"}
	if !slices.Equal(queries, want) {
		t.Errorf("queries %q, want %q", queries, want)
	}
	// A stream that answered ends an outage: 1 s after each break, 2 s
	// after the failure that followed the first.
	if got, want := clock.pauses(), []time.Duration{time.Second, 2 * time.Second, time.Second}; !slices.Equal(got, want) {
		t.Errorf("paused %v, want %v", got, want)
	}
}

// TestLogRecordsFollowSkipsWhatItHad breaks a followed record stream after
// two records, one of them cut short; asked again, the server sends every
// record from the start, the last grown: LogRecords passes each byte of
// each attempt on once, with its stream.
func TestLogRecordsFollowSkipsWhatItHad(t *testing.T) {
	t.Parallel()
	rec := func(attempt, stream string, offset int, data string) string {
		return fmt.Sprintf(`{"attempt_id":%q,"rank":0,"placement":1,"stream":%q,"offset":%d,"data":%q}`+"\n",
			attempt, stream, offset, base64.StdEncoding.EncodeToString([]byte(data)))
	}
	first := rec("a1", "", 0, "out\n") + rec("a1", "stderr", 4, "err\n")
	steps := script(
		streamsThenDies(first+rec("a2", "", 0, "x")[:20]), // a record cut off mid-line
		answers(http.StatusOK, first+rec("a1", "", 8, "more\n")+rec("a2", "", 0, "x\n")),
	)
	fs := newFakeServer(t, steps)
	var clock fakeClock
	c := client.New(fs.url, "", nil)
	c.Retry = clock.retry(time.Minute)
	var got []string
	err := c.LogRecords(t.Context(), "j1", true, func(r *berth.LogRecord) error {
		got = append(got, fmt.Sprintf("%s %s@%d %q", r.AttemptID, cmp.Or(r.Stream, "stdout"), r.Offset, r.Data))
		return nil
	})
	if err != nil {
		t.Fatalf("LogRecords: %v", err)
	}
	want := []string{`a1 stdout@0 "out\n"`, `a1 stderr@4 "err\n"`, `a1 stdout@8 "more\n"`, `a2 stdout@0 "x\n"`}
	if !slices.Equal(got, want) {
		t.Errorf("records passed on:\n%q\nwant\n%q", got, want)
	}
	// An error of fn ends it, returned as it is.
	stop := errors.New("stop")
	if err := c.LogRecords(t.Context(), "j1", true, func(*berth.LogRecord) error { return stop }); err != stop {
		t.Errorf("LogRecords with a failing fn = %v, want its error", err)
	}
}

// TestLogsWithoutFollowIsOneTry: printing the logs once is not retried.
func TestLogsWithoutFollowIsOneTry(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, script(streamsThenDies("one\n"), answers(http.StatusOK, "one\ntwo\n")))
	var clock fakeClock
	c := client.New(fs.url, "", nil)
	c.Retry = clock.retry(time.Minute)
	var out strings.Builder
	if err := c.Logs(t.Context(), "j1", client.LogOptions{}, &out); err == nil || len(fs.requests()) != 1 || len(clock.pauses()) != 0 {
		t.Errorf("Logs without follow of a broken stream: %v after %d requests; want the error at once", err, len(fs.requests()))
	}
}

// failingWriter fails every write.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestLogsWriteErrorIsNotRetried: failing to write the output is no
// outage.
func TestLogsWriteErrorIsNotRetried(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, answers(http.StatusOK, "one\n"))
	var clock fakeClock
	c := client.New(fs.url, "", nil)
	c.Retry = clock.retry(time.Minute)
	if err := c.Logs(t.Context(), "j1", client.LogOptions{Follow: true}, failingWriter{}); err == nil || !strings.Contains(err.Error(), "disk full") ||
		len(fs.requests()) != 1 {
		t.Errorf("Logs into a failing writer: %v after %d requests; want disk full at once", err, len(fs.requests()))
	}
}

// restartable is a real API server on real SQLite that can stop and start
// again on the same address and data.
type restartable struct {
	t    *testing.T
	dir  string
	addr string
	stop func()
}

// start starts the server (on a free port the first time).
func (s *restartable) start() {
	s.t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(s.dir, "berth.db"))
	if err != nil {
		s.t.Fatal(err)
	}
	ctl := controller.New(controller.Config{Store: st})
	if err := ctl.Start(ctx); err != nil {
		s.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", cmp.Or(s.addr, "127.0.0.1:0"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	hs := httptest.NewUnstartedServer(api.New(ctl, st, apitest.Security(s.t, st, auth.RoleAdmin), nil))
	hs.Listener = ln
	hs.Start()
	s.stop = func() {
		s.stop = nil
		hs.CloseClientConnections()
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ctl.Stop(ctx); err != nil {
			s.t.Errorf("stop controller: %v", err)
		}
		if err := st.Close(); err != nil {
			s.t.Errorf("close store: %v", err)
		}
	}
}

// TestWaitRidesOutARestart waits for a job on a server that has stopped:
// while Wait pauses, the server starts again and the job ends; Wait then
// reports it.
func TestWaitRidesOutARestart(t *testing.T) {
	t.Parallel()
	srv := &restartable{t: t, dir: t.TempDir()}
	srv.start()
	t.Cleanup(func() {
		if srv.stop != nil {
			srv.stop()
		}
	})
	url := "http://" + srv.addr
	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Command = berth.Argv{"true"}
	jobs, err := client.New(url, "", nil).Submit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	id := jobs[0].ID
	srv.stop()

	var clock fakeClock
	c := client.New(url, "", nil)
	c.Retry = clock.retry(time.Minute)
	clock.onSleep = func(n int) {
		if n == 1 { // the server is back, and the job is cancelled there
			srv.start()
			if _, err := client.New(url, "", nil).Cancel(t.Context(), id); err != nil {
				t.Errorf("cancel after the restart: %v", err)
			}
		}
	}
	res, err := c.Wait(t.Context(), []string{id}, false, 0)
	if err != nil || !res.Done || res.Counts[berth.JobCancelled] != 1 {
		t.Fatalf("Wait across a restart = %+v, %v; want done, 1 cancelled", res, err)
	}
	if len(clock.notices) != 1 || !strings.Contains(clock.notices[0].Error(), "cannot reach the server") {
		t.Errorf("notices %v; want one, of the refused connection", clock.notices)
	}
}
