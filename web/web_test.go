package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/arbiter"
	"github.com/berth-dev/berth/audit"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/web"
	"github.com/berth-dev/berth/wire"
)

// testTimeout bounds every wait so that a missing change fails the test
// instead of hanging it.
const testTimeout = 20 * time.Second

// dash is a real controller on a real SQLite store behind the API, with
// the dashboard as its Web handler.
type dash struct {
	t      *testing.T
	url    string
	st     *sqlite.Store
	ctl    *controller.Controller
	sec    *api.Security
	web    *web.Handler
	client *http.Client // follows no redirects
	tokens map[auth.Role]string
}

// newDash starts a dashboard that trusts loopback clients as trust (""
// for no one), with a token for each person's role.
func newDash(t *testing.T, trust auth.Role, cfg web.Config) *dash {
	t.Helper()
	return newSeededDash(t, trust, cfg, func(*sqlite.Store) {})
}

// newSeededDash is newDash with seed writing to the store before the
// controller starts.
func newSeededDash(t *testing.T, trust auth.Role, cfg web.Config, seed func(*sqlite.Store)) *dash {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "berth.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	seed(st)
	auditPath := filepath.Join(dir, "audit.log")
	sec := apitest.SecurityWithAudit(t, st, trust, auditPath)
	ctl := controller.New(controller.Config{Store: st, Secrets: sec.Secrets, PeerTokens: sec.Secrets})
	if err := ctl.Start(ctx); err != nil {
		t.Fatalf("start controller: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := ctl.Stop(ctx); err != nil {
			t.Errorf("stop controller: %v", err)
		}
	})
	cfg.Ctl, cfg.Store, cfg.CheckToken, cfg.AuditPath = ctl, st, sec.Ingress.CheckToken, auditPath
	h := web.New(cfg)
	srv := api.New(ctl, st, sec, nil)
	srv.Web = h
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	d := &dash{t: t, url: hs.URL, st: st, ctl: ctl, sec: sec, web: h, tokens: map[auth.Role]string{},
		client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	for _, role := range []auth.Role{auth.RoleViewer, auth.RoleOperator, auth.RoleAdmin} {
		d.tokens[role] = apitest.Token(t, sec, string(role)+"-1", role, "")
	}
	return d
}

// get reads path as a browser signed in with token (none: ""), and
// returns the status and the body.
func (d *dash) get(path, token string) (int, string) {
	d.t.Helper()
	resp := d.do("GET", path, token, nil, nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}

// do sends a request carrying token in the sign-in cookie.
func (d *dash) do(method, path, token string, form url.Values, hdr http.Header) *http.Response {
	d.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, d.url+path, body)
	if err != nil {
		d.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if token != "" {
		req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: token})
	}
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// page reads path with token and requires 200.
func (d *dash) page(path, token string) string {
	d.t.Helper()
	status, body := d.get(path, token)
	if status != http.StatusOK {
		d.t.Fatalf("GET %s: %d, want 200:\n%s", path, status, body)
	}
	return body
}

// submit submits a job for user and returns it.
func (d *dash) submit(user, name, queue string, gpus int) *berth.Job {
	d.t.Helper()
	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.User, req.Name, req.Queue, req.Command = user, name, queue, berth.Argv{"true"}
	req.Resources.GPUs = gpus
	req.HoldUntilFits = true // a job no worker fits waits, as the pages show it
	jobs, err := d.ctl.Submit(context.Background(), req)
	if err != nil {
		d.t.Fatalf("submit %s: %v", name, err)
	}
	return jobs[0]
}

// wantIn requires every one of wants in body.
func wantIn(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, body)
		}
	}
}

// wantNotIn requires none of wants in body.
func wantNotIn(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if strings.Contains(body, w) {
			t.Errorf("%s has %q, want it absent", what, w)
		}
	}
}

// row returns the table row of body whose opening tag carries attr.
func row(t *testing.T, body, attr string) string {
	t.Helper()
	i := strings.Index(body, "<tr "+attr)
	if i < 0 {
		t.Fatalf("no row <tr %s> in:\n%s", attr, body)
	}
	end := strings.Index(body[i:], "</tr>")
	return body[i : i+end]
}

// cells returns the text of a row's cells, tags stripped.
func cells(r string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?s)<t[hd][^>]*>(.*?)</t[hd]>`).FindAllStringSubmatch(r, -1) {
		out = append(out, strings.TrimSpace(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], "")))
	}
	return out
}

func TestPagesRender(t *testing.T) {
	t.Parallel()
	d := newDash(t, "", web.Config{})
	admin := d.tokens[auth.RoleAdmin]
	a := d.submit("alice", "train-a", "gpu", 2)
	b := d.submit("bob", "eval-b", "gpu", 1)
	c := d.submit("bob", "prep-c", "cpu", 0)
	reg := arbiter.NewRegistry(d.st)
	if _, err := reg.Put(context.Background(), berth.ScheduleRequest{Name: "nightly-eval", Owner: "ml-team", Cron: "0 3 * * *",
		Description: "evals at 3"}); err != nil {
		t.Fatal(err)
	}
	if err := d.sec.Audit.Append(audit.Entry{Action: "test.recorded", Actor: "tester", Target: "job/x", Fields: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}

	body := d.page("/", admin)
	wantIn(t, "overview", body, "<h1>Overview</h1>", `<a href="/audit">Audit</a>`, "admin-1", "Sign out", "Busy GPUs")
	if got := cells(row(t, body, `data-queue="gpu"`)); strings.Join(got, "|") != "gpu|0|0|0|0|0|2|"+got[7] || !strings.HasSuffix(got[7], "s") {
		t.Errorf("gpu queue row = %q, want no GPUs and 2 pending, waiting some seconds", got)
	}
	if got := cells(row(t, body, `data-queue="cpu"`)); got[6] != "1" {
		t.Errorf("cpu queue row = %q, want 1 pending", got)
	}
	if got := cells(row(t, body, `data-queue=""`)); got[0] != "All queues" || got[6] != "3" {
		t.Errorf("total row = %q, want 3 pending", got)
	}

	body = d.page("/jobs", admin)
	wantIn(t, "jobs", body, a.ID, b.ID, c.ID, "train-a", "eval-b", "alice", "bob", `<th scope="col">State</th>`)
	if strings.Index(body, c.ID) > strings.Index(body, a.ID) {
		t.Errorf("jobs are not newest first")
	}
	body = d.page("/jobs?state=pending&queue=cpu", admin)
	wantIn(t, "jobs of queue cpu", body, c.ID)
	wantNotIn(t, "jobs of queue cpu", body, a.ID, b.ID)
	if status, body := d.get("/jobs?state=sleeping", admin); status != http.StatusBadRequest || !strings.Contains(body, "not a job state") {
		t.Errorf("bad state: %d, want 400 naming the rule:\n%s", status, body)
	}
	if status, body := d.get("/jobs?cursor=garbage", admin); status != http.StatusBadRequest || !strings.Contains(body, "not a cursor this server issued") {
		t.Errorf("bad cursor: %d, want 400 naming the rule:\n%s", status, body)
	}
	body = d.page("/jobs?cursor=", admin)
	wantIn(t, "jobs with an empty cursor", body, a.ID, b.ID, c.ID)
	body = d.page("/jobs?cursor="+c.ID, admin)
	wantIn(t, "jobs older than the newest", body, a.ID, b.ID)

	body = d.page("/jobs/"+a.ID, admin)
	wantIn(t, "job page", body, "train-a", "pending", "alice", "2 GPUs", `data-action="cancel"`, `data-action="resubmit"`,
		`data-src="/api/v1/jobs/`+a.ID+`/logs?follow=true"`, `/api/v1/jobs/`+a.ID+`/logs?download=true`, "No attempt yet", "Submitted")
	if status, _ := d.get("/jobs/01NOSUCHJOB0000000000000000", admin); status != http.StatusNotFound {
		t.Errorf("unknown job: %d, want 404", status)
	}

	body = d.page("/workers", admin)
	wantIn(t, "workers", body, "No worker has registered yet", "Observed", "Desired")
	body = d.page("/services", admin)
	wantIn(t, "services", body, "No active services", "No service is ready")
	body = d.page("/schedules", admin)
	wantIn(t, "schedules", body, "nightly-eval", "ml-team", "0 3 * * *", "evals at 3", "display only")
	body = d.page("/events", admin)
	wantIn(t, "events", body, `<tbody data-after="`, "job.submitted")
	body = d.page("/audit", admin)
	wantIn(t, "audit", body, "test.recorded", "tester", "job/x", "k=v")
	body = d.page("/static/app.js", "")
	wantIn(t, "app.js", body, "EventSource", "fragment")
	if status, _ := d.get("/nope", admin); status != http.StatusNotFound {
		t.Errorf("GET /nope: %d, want 404", status)
	}
}

func TestUsersSeeOnlyTheirJobs(t *testing.T) {
	t.Parallel()
	d := newDash(t, "", web.Config{})
	alice := apitest.Token(t, d.sec, "alice", auth.RoleUser, "")
	mine := d.submit("alice", "mine", "gpu", 1)
	theirs := d.submit("bob", "theirs", "gpu", 1)

	body := d.page("/jobs", alice)
	wantIn(t, "alice's jobs", body, mine.ID, "Your jobs only")
	wantNotIn(t, "alice's jobs", body, theirs.ID, `<a href="/audit">`)
	for _, path := range []string{"/jobs?user=bob", "/jobs/" + theirs.ID, "/api/v1/jobs/" + theirs.ID + "/logs?download=true"} {
		if status, body := d.get(path, alice); status != http.StatusForbidden {
			t.Errorf("alice GET %s: %d, want 403:\n%s", path, status, body)
		}
	}
	body = d.page("/jobs/"+mine.ID, alice)
	wantIn(t, "alice's job", body, `data-action="cancel"`)
	// A user sees capacity, not the queue depth summed over every user.
	body = d.page("/", alice)
	wantNotIn(t, "alice's overview", body, "Pending jobs", "plot-depth", "Finished, last hour")
	// A viewer sees every job but may not act.
	body = d.page("/jobs/"+theirs.ID, d.tokens[auth.RoleViewer])
	wantNotIn(t, "viewer's job page", body, `data-action="cancel"`, `data-action="resubmit"`)
	wantIn(t, "viewer's overview", d.page("/", d.tokens[auth.RoleViewer]), "Pending jobs")

	for _, tok := range []string{alice, d.tokens[auth.RoleViewer], d.tokens[auth.RoleOperator]} {
		if status, body := d.get("/audit", tok); status != http.StatusForbidden || !strings.Contains(body, "admin") {
			t.Errorf("/audit for a non-admin: %d, want 403 saying it needs admin:\n%s", status, body)
		}
	}
	// Not a person: an agent's credential reads no page.
	agent := apitest.Token(t, d.sec, "rack-1", auth.RoleAgent, "h1")
	if status, _ := d.get("/jobs", agent); status != http.StatusForbidden {
		t.Errorf("agent GET /jobs: %d, want 403", status)
	}
}

func TestLogin(t *testing.T) {
	t.Parallel()
	d := newDash(t, "", web.Config{})
	viewer := d.tokens[auth.RoleViewer]

	// Unauthenticated: sent to sign in, coming back to the page asked for.
	resp := d.do("GET", "/jobs?state=pending", "", nil, nil)
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/login?next="+url.QueryEscape("/jobs?state=pending") {
		t.Fatalf("GET /jobs signed out: %d to %q, want 303 to the sign-in page", resp.StatusCode, loc)
	}
	body := d.page("/login?next=/jobs", "")
	wantIn(t, "sign-in page", body, `<label for="token">`, `name="next" value="/jobs"`, `type="password"`)

	post := func(token, next string, hdr http.Header) *http.Response {
		t.Helper()
		resp := d.do("POST", "/login", "", url.Values{"token": {token}, "next": {next}}, hdr)
		resp.Body.Close()
		return resp
	}
	// A bad token: the form again, 401, no cookie.
	resp = d.do("POST", "/login", "", url.Values{"token": {"not-a-token"}, "next": {"/jobs"}}, nil)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 || !strings.Contains(string(data), "invalid token") {
		t.Errorf("bad token: %d, cookies %v, want 401 with the error and no cookie:\n%s", resp.StatusCode, resp.Cookies(), data)
	}
	// A good one: the cookie, and back to next.
	resp = post(viewer, "/jobs?state=pending", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/jobs?state=pending" {
		t.Fatalf("sign in: %d to %q, want 303 to /jobs?state=pending", resp.StatusCode, resp.Header.Get("Location"))
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 {
		t.Fatalf("sign in set cookies %v, want one", cookies)
	}
	ck := cookies[0]
	if ck.Name != auth.SessionCookie || ck.Value != viewer || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Secure {
		t.Errorf("cookie = %+v, want %s=token, HttpOnly, SameSite=Strict, Path=/, not Secure over plain HTTP", ck, auth.SessionCookie)
	}
	wantIn(t, "page signed in", d.page("/jobs", ck.Value), "viewer-1", "Sign out")

	// next is followed only to a path on this server.
	for _, next := range []string{"//evil.example/x", "https://evil.example/", "/\\evil.example", "jobs", "", "/login", "javascript:alert(1)"} {
		if loc := post(viewer, next, nil).Header.Get("Location"); loc != "/" {
			t.Errorf("next %q: redirected to %q, want /", next, loc)
		}
	}
	// Tokens that are not a person's, and sign-ins from another site.
	agent := apitest.Token(t, d.sec, "rack-1", auth.RoleAgent, "h1")
	if resp := post(agent, "/", nil); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("agent token: %d, want 401 and no cookie", resp.StatusCode)
	}
	if resp := post(viewer, "/", http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}}); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("cross-site sign-in: %d, want 403 and no cookie", resp.StatusCode)
	}

	// Sign out clears the cookie.
	resp = d.do("POST", "/logout", viewer, url.Values{}, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
		t.Errorf("sign out: %d to %q with cookies %v, want 303 to /login clearing the cookie", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	// A revoked token's cookie is cleared at the sign-in page.
	for _, tok := range d.sec.Tokens.List() {
		if tok.Name == "viewer-1" {
			if _, err := d.sec.Tokens.Revoke(context.Background(), tok.ID, func(*berth.Token) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	resp = d.do("GET", "/login", viewer, nil, nil)
	resp.Body.Close()
	if len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
		t.Errorf("sign-in page with a revoked token's cookie set %v, want it cleared", resp.Cookies())
	}
}

func TestLoopbackNeedsNoSignIn(t *testing.T) {
	t.Parallel()
	d := newDash(t, auth.RoleAdmin, web.Config{})
	body := d.page("/", "")
	wantIn(t, "loopback overview", body, "local", "trusted loopback client", "Sign in with a token")
	wantNotIn(t, "loopback overview", body, "Sign out")
}

func TestFragment(t *testing.T) {
	t.Parallel()
	d := newDash(t, "", web.Config{})
	admin := d.tokens[auth.RoleAdmin]
	j := d.submit("alice", "frag", "gpu", 0)
	full := d.page("/jobs", admin)
	wantIn(t, "full page", full, "<!doctype html>", "<nav", `<main id="main"`, "<h1>Jobs</h1>", j.ID)
	frag := d.page("/jobs?fragment=main", admin)
	wantIn(t, "fragment", frag, "<h1>Jobs</h1>", j.ID)
	wantNotIn(t, "fragment", frag, "<html", `<nav aria-label="Main"`, "<main", "</main>", "<script")
	if !strings.Contains(full, frag) {
		t.Errorf("the fragment is not the full page's main section:\n%s", frag)
	}
}

func TestLockBanner(t *testing.T) {
	t.Parallel()
	d := newDash(t, "", web.Config{})
	admin, viewer := d.tokens[auth.RoleAdmin], d.tokens[auth.RoleViewer]
	wantNotIn(t, "overview unlocked", d.page("/", admin), "Swap lock held")

	st, err := arbiter.NewLock(d.st).Acquire(context.Background(), "nightly-bench", "benchmarking llama", 10*time.Minute, "")
	if err != nil || !st.Held {
		t.Fatalf("acquire: %+v %v", st, err)
	}
	for _, path := range []string{"/", "/jobs", "/workers", "/events?fragment=main"} {
		body := d.page(path, admin)
		wantIn(t, path+" locked", body, "Swap lock held", "nightly-bench", "benchmarking llama", `data-action="force-release"`, "data-expires=")
		if !regexp.MustCompile(`(9m \d+s|10m)`).MatchString(body) {
			t.Errorf("%s: the banner lacks the time left (about 10m)", path)
		}
	}
	body := d.page("/", viewer)
	wantIn(t, "viewer's banner", body, "Swap lock held", "nightly-bench")
	wantNotIn(t, "viewer's banner", body, `data-action="force-release"`)
}

// agent is a fake worker agent on the API's WebSocket.
type agent struct {
	t *testing.T
	c *websocket.Conn
}

func (d *dash) dialAgent(ctx context.Context, reg *wire.Register) *agent {
	d.t.Helper()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(d.url, "http")+"/api/v1/agent",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.tokens[auth.RoleAdmin]}}})
	if err != nil {
		d.t.Fatalf("dial agent: %v", err)
	}
	d.t.Cleanup(func() { _ = c.CloseNow() })
	a := &agent{t: d.t, c: c}
	reg.Version = wire.Version
	a.send(ctx, wire.TypeRegister, reg)
	a.send(ctx, wire.TypeReadyForWork, &wire.ReadyForWork{})
	return a
}

func (a *agent) send(ctx context.Context, typ string, payload any) {
	a.t.Helper()
	frame, err := wire.Encode(typ, payload)
	if err != nil {
		a.t.Fatal(err)
	}
	if err := a.c.Write(ctx, websocket.MessageText, frame); err != nil {
		a.t.Fatalf("agent write %s: %v", typ, err)
	}
}

// assigned reads messages until a job_assign.
func (a *agent) assigned(ctx context.Context) *wire.JobAssign {
	a.t.Helper()
	for {
		_, data, err := a.c.Read(ctx)
		if err != nil {
			a.t.Fatalf("agent read: %v", err)
		}
		msgs, err := wire.DecodeFrame(data)
		if err != nil {
			a.t.Fatal(err)
		}
		for _, m := range msgs {
			if as, ok := m.Body.(*wire.JobAssign); ok {
				return as
			}
		}
	}
}

// eventually polls path until its body matches re.
func (d *dash) eventually(ctx context.Context, path, token string, re *regexp.Regexp) string {
	d.t.Helper()
	for {
		_, body := d.get(path, token)
		if re.MatchString(body) {
			return body
		}
		select {
		case <-ctx.Done():
			d.t.Fatalf("GET %s never matched %s:\n%s", path, re, body)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestWorkersAndCapacity(t *testing.T) {
	t.Parallel()
	d := newDash(t, "", web.Config{SampleEvery: 20 * time.Millisecond})
	d.web.Start(t.Context())
	t.Cleanup(d.web.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	admin, viewer := d.tokens[auth.RoleAdmin], d.tokens[auth.RoleViewer]
	gpus := make([]berth.GPU, 4)
	for i := range gpus {
		gpus[i] = berth.GPU{Index: i, Model: "H100", Memory: 80 << 30}
	}
	ag := d.dialAgent(ctx, &wire.Register{WorkerID: "w1", Host: "h1", Queues: []string{"gpu"}, GPUs: gpus, CPUs: 16, Memory: 64 << 30, Slots: 4})
	run := d.submit("alice", "runs", "gpu", 2)
	as := ag.assigned(ctx)
	if as.JobID != run.ID || len(as.GPUs) != 2 {
		t.Fatalf("assigned %+v, want job %s on 2 GPUs", as, run.ID)
	}
	ag.send(ctx, wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: as.AttemptID})
	ag.send(ctx, wire.TypeLog, &wire.Log{AttemptID: as.AttemptID, Data: []byte("epoch 1 loss 0.5\n")})
	waits := d.submit("bob", "too-big", "gpu", 8) // no worker has 8 GPUs

	// A placed job's GPUs are busy at once, but it leaves the queue only once
	// the agent's acceptance is handled: wait for both.
	body := d.eventually(ctx, "/", admin, regexp.MustCompile(
		`data-queue="gpu"(?s:.*?)<td class="num">2</td><td class="num">2</td><td class="num">0</td>\s*<td class="num"><a [^>]*>1</a>`))
	if got := cells(row(t, body, `data-queue="gpu"`)); strings.Join(got[:7], "|") != "gpu|1|4|2|2|0|1" {
		t.Errorf("gpu row = %q, want 1 worker, 4 GPUs, 2 busy, 2 free, 0 off, 1 pending", got)
	}
	body = d.eventually(ctx, "/", admin, regexp.MustCompile(`<polyline|<circle`))
	wantIn(t, "overview plots", body, `<svg id="plot-busy"`, `<svg id="plot-depth"`, "Busy GPUs over the last 6h")
	wantNotIn(t, "viewer overview", d.page("/", viewer), "<polyline class=\"line\" points=\"\"")

	body = d.page("/workers", admin)
	r := row(t, body, `data-worker="w1"`)
	wantIn(t, "worker row", r, "h1", "4× H100 80GiB", "ready", "every queue: on", `<form class="control" data-host="h1">`) // no control: on
	wantIn(t, "worker row", cells(r)[6], "2")
	wantNotIn(t, "viewer's workers", d.page("/workers", viewer), `<form class="control"`)
	checkCards(t, d.page("/", admin), map[string]int{"ready": 1, "busy": 0})

	// A second job takes the other two GPUs: the worker is busy, on the
	// overview's cards as in its table (no GPU free) and on the workers page.
	fill := d.submit("alice", "fills", "gpu", 2)
	as2 := ag.assigned(ctx)
	if as2.JobID != fill.ID {
		t.Fatalf("assigned %+v, want job %s", as2, fill.ID)
	}
	ag.send(ctx, wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: as2.AttemptID})
	body = d.eventually(ctx, "/", admin, regexp.MustCompile(`<dt>Workers busy</dt><dd>1</dd>`))
	if got := cells(row(t, body, `data-queue="gpu"`)); strings.Join(got[:6], "|") != "gpu|1|4|4|0|0" {
		t.Errorf("gpu row with every GPU held = %q, want 1 worker, 4 GPUs, 4 busy, 0 free", got)
	}
	checkCards(t, body, map[string]int{"ready": 0, "busy": 1})
	wantIn(t, "busy worker row", row(t, d.page("/workers", admin), `data-worker="w1"`), "busy")
	code := 0
	ag.send(ctx, wire.TypeJobResult, &wire.JobResult{AttemptID: as2.AttemptID, State: berth.AttemptSucceeded, ExitCode: &code})
	body = d.eventually(ctx, "/", admin, regexp.MustCompile(`<dt>Workers ready</dt><dd>1</dd>`))
	checkCards(t, body, map[string]int{"ready": 1, "busy": 0})

	// The job page reads the store, where the attempt is running once the
	// acceptance's group commit is durable, a little after the overview,
	// which reads the controller, shows it: wait for it.
	body = d.eventually(ctx, "/jobs/"+run.ID, admin, regexp.MustCompile(
		`data-attempt="`+as.AttemptID+`">(?:[^<]|<[^/]|</[^t]|</t[^r])*?state-running`))
	a := cells(row(t, body, `data-attempt="`+as.AttemptID+`"`))
	if a[2] != "h1" || a[3] != "0,1" || a[4] != "running" {
		t.Errorf("attempt row = %q, want on h1, GPUs 0,1, running", a)
	}
	wantIn(t, "job page", body, "Started", "running")
	body = d.page("/jobs/"+waits.ID, admin)
	wantIn(t, "pending job", body, "waiting: ", "Waiting for")

	d.eventually(ctx, "/api/v1/jobs/"+run.ID+"/logs?download=true", admin, regexp.MustCompile("epoch 1 loss 0.5"))
	resp := d.do("GET", "/api/v1/jobs/"+run.ID+"/logs?download=true", admin, nil, nil)
	resp.Body.Close()
	if cd := resp.Header.Get("Content-Disposition"); cd != fmt.Sprintf("attachment; filename=%q", run.ID+".log") {
		t.Errorf("log download Content-Disposition = %q", cd)
	}

	// Turning the queue off: desired and observed side by side, and no
	// more capacity for the queue.
	if _, err := d.ctl.SetWorkerControl(ctx, "h1", berth.ControlRequest{Queue: "gpu", DesiredState: berth.DesiredOff, StopPolicy: berth.StopDrain, RequestedBy: "ops"}); err != nil {
		t.Fatal(err)
	}
	body = d.page("/workers", admin)
	wantIn(t, "worker row off", row(t, body, `data-worker="w1"`), "gpu: off (drain)", "by ops")
	body = d.page("/", admin)
	if got := cells(row(t, body, `data-queue="gpu"`)); got[1] != "0" || got[2] != "0" || got[5] != "4" {
		t.Errorf("gpu row with the queue off = %q, want no workers taking work, 0 GPUs, 4 off", got)
	}
}

// checkCards checks the overview's worker cards: the counts of want, and
// ready plus busy equal to the workers taking work of its capacity
// table's total row.
func checkCards(t *testing.T, body string, want map[string]int) {
	t.Helper()
	cards := map[string]int{}
	for _, m := range regexp.MustCompile(`<dt>Workers (\w+)</dt><dd>(\d+)</dd>`).FindAllStringSubmatch(body, -1) {
		n, _ := strconv.Atoi(m[2])
		cards[m[1]] = n
	}
	for st, n := range want {
		if cards[st] != n {
			t.Errorf("card workers %s = %d, want %d (cards %v)", st, cards[st], n, cards)
		}
	}
	if total := cells(row(t, body, `data-queue=""`)); total[1] != strconv.Itoa(cards["ready"]+cards["busy"]) {
		t.Errorf("the total row's workers taking work %s, the cards ready %d + busy %d", total[1], cards["ready"], cards["busy"])
	}
}

// TestAPIPathsAreNotPages checks that the paths outside the dashboard stay
// the API's when the dashboard is on: /healthz answers its JSON unsigned,
// /metrics and /api/… their own.
func TestAPIPathsAreNotPages(t *testing.T) {
	t.Parallel()
	d := newDash(t, "", web.Config{})
	for path, want := range map[string]string{
		"/healthz":        `"status":"ok"`,
		"/api/v1/workers": `"error"`, // 401 JSON, not a sign-in page
		"/metrics":        `"error"`,
		"/api/v1/no-such": `"error"`,
	} {
		status, body := d.get(path, "")
		if !strings.Contains(body, want) || strings.Contains(body, "<html") {
			t.Errorf("GET %s: %d %.200s; want the API's answer (%s)", path, status, body, want)
		}
	}
}
