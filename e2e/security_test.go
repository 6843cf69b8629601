package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/devca"
)

// caller makes raw API requests to one server as one bearer token ("" for
// none), keeping every response body it got when record is set.
type caller struct {
	t      *testing.T
	name   string // who, in failure messages
	url    string
	token  string
	hc     *http.Client
	record *[][]byte
}

// do sends one request with body (a string is sent as is, anything else as
// JSON) and extra headers, and returns the status, headers and body.
func (c caller) do(method, path string, body any, hdr map[string]string) (int, http.Header, []byte) {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	hc := c.hc
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	if c.record != nil {
		*c.record = append(*c.record, data)
	}
	return resp.StatusCode, resp.Header, data
}

// expect sends a request and fails the test unless the status is want; it
// returns the body.
func (c caller) expect(want int, method, path string, body any) []byte {
	c.t.Helper()
	got, _, data := c.do(method, path, body, nil)
	if got != want {
		c.t.Fatalf("%s %s as %q: status %d, want %d; body %s", method, path, c.who(), got, want, data)
	}
	return data
}

func (c caller) who() string {
	if c.name != "" {
		return c.name
	}
	if c.token == "" {
		return "no token"
	}
	return "a token"
}

// runCLI runs a short-lived berth command with BERTH_TOKEN=token and stdin,
// and returns its stdout and stderr and its error (an *exec.ExitError for a
// non-zero status).
func runCLI(t *testing.T, token, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, berthBin, args...)
	cmd.Dir = t.TempDir() // as start's
	cmd.Env = append(os.Environ(), "BERTH_TOKEN="+token, "BERTH_SERVER=", "BERTH_CA=", "BERTH_CA_FINGERPRINT=",
		"BERTH_JOIN_TOKEN=", "BERTH_CREDENTIALS="+filepath.Join(t.TempDir(), "credentials.json"))
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// mustCLI is runCLI that fails the test unless the command exits 0.
func mustCLI(t *testing.T, token, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := runCLI(t, token, stdin, args...)
	if err != nil {
		t.Fatalf("berth %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// readToken reads a token file and checks it is private (mode 0600).
func readToken(t *testing.T, path string) string {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatalf("token file: %v", err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Fatalf("%s has mode %v, want 0600", path, mode)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		t.Fatalf("%s is empty", path)
	}
	return tok
}

// issue creates a token through the admin client cl.c.
func (cl *cluster) issue(name, role string) *berth.IssuedToken {
	cl.t.Helper()
	tok, err := cl.c.CreateToken(context.Background(), berth.TokenRequest{Name: name, Role: role})
	if err != nil {
		cl.t.Fatalf("create %s token for %s: %v", role, name, err)
	}
	if tok.Secret == "" || tok.Role != role || tok.Name != name {
		cl.t.Fatalf("issued token %+v, want one for %s with role %s and its secret", tok.Token, name, role)
	}
	return tok
}

// jobCount returns how many jobs the server holds, as the admin sees them.
func (cl *cluster) jobCount() int {
	cl.t.Helper()
	list, err := cl.c.Jobs(context.Background(), client.ListOptions{})
	if err != nil {
		cl.t.Fatalf("list jobs: %v", err)
	}
	return len(list.Jobs)
}

// offControls returns the controls turning a queue of host off.
func (cl *cluster) offControls(host string) []*berth.WorkerControl {
	cl.t.Helper()
	cs, err := cl.c.WorkerControls(context.Background(), host)
	if err != nil {
		cl.t.Fatalf("controls of %s: %v", host, err)
	}
	var off []*berth.WorkerControl
	for _, c := range cs {
		if c.Off() {
			off = append(off, c)
		}
	}
	return off
}

// workerState returns the state of host's worker, "" when there is none.
func (cl *cluster) workerState(host string) berth.WorkerState {
	cl.t.Helper()
	ws, err := cl.c.Workers(context.Background())
	if err != nil {
		cl.t.Fatalf("workers: %v", err)
	}
	for _, w := range ws {
		if w.Host == host {
			return w.State
		}
	}
	return ""
}

// jobList decodes a GET /api/v1/jobs body.
func jobList(t *testing.T, body []byte) []*berth.Job {
	t.Helper()
	var l berth.JobList
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("job list %s: %v", body, err)
	}
	return l.Jobs
}

// TestSecurityTokensAndRoles runs a server that trusts no one on loopback:
// the first admin token is saved in its data dir; an agent joins with a join
// token, keeps the credential it gets (0600) and, restarted without the
// join token (revoked by then), registers with it. Users, a viewer and an
// operator then get exactly their rights, and every refusal leaves the jobs
// and the worker as they were; no token is 401, an agent credential on the
// people's API is 403 and a revoked token 401.
func TestSecurityTokensAndRoles(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--trust-loopback", "none")
	anon := caller{t: t, name: "no token", url: cl.url}
	// Nothing is open without a token, not even reading.
	for _, path := range []string{"/api/v1/jobs", "/api/v1/workers", "/api/v1/tokens"} {
		anon.expect(http.StatusUnauthorized, http.MethodGet, path, nil)
	}
	admin := readToken(t, filepath.Join(cl.dir, "server", "admin.token"))
	cl.c = client.New(cl.url, admin, nil)
	if _, err := client.New(cl.url, "", nil).Workers(context.Background()); berth.ErrorCode(err) != berth.ECodeUnauthorized {
		t.Fatalf("workers without a token: %v, want unauthorized", err)
	}

	// An agent joins with a join token made by berth token create.
	joinOut := mustCLI(t, admin, "", "token", "create", "--server", cl.url, "--role", "agent", "--name", "rack", "-o", "json")
	var join berth.IssuedToken
	if err := json.Unmarshal([]byte(joinOut), &join); err != nil || join.Secret == "" || join.Role != "agent" || join.Worker != "" {
		t.Fatalf("berth token create --role agent: %q (%v), want a join token bound to no worker", joinOut, err)
	}
	cl.addAgent("a1", "--join-token", join.Secret)
	agentDir := filepath.Join(cl.dir, "agent-a1")
	cred := readToken(t, filepath.Join(agentDir, "credential"))
	if cred == join.Secret {
		t.Fatal("the agent saved the join token as its credential; want a credential of its own")
	}
	tokens, err := cl.c.Tokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var bound bool
	for _, tok := range tokens {
		bound = bound || (tok.Role == "agent" && tok.Worker == "a1" && tok.ID != join.ID)
	}
	if !bound {
		t.Fatalf("tokens %v: no agent credential bound to a1", tokens)
	}

	// Restarted without a join token, and with the join token revoked, the
	// agent registers with its saved credential.
	if _, err := cl.c.RevokeToken(context.Background(), join.ID); err != nil {
		t.Fatal(err)
	}
	cl.agents["a1"].stop()
	cl.awaitWorker("a1", berth.WorkerDisconnected, berth.WorkerLost)
	restarted := start(t, "agent a1 (restarted)", "agent", "--server", cl.url, "--host", "a1", "--gpus", "2xT4:16GiB", "--data-dir", agentDir)
	cl.agents["a1"] = restarted
	if _, ok := restarted.out.await("msg=registered", 30*time.Second); !ok {
		t.Fatal("the restarted agent did not register with its saved credential")
	}
	cl.awaitWorker("a1", berth.WorkerReady)
	// The join token, revoked, joins nothing any more.
	joiner := caller{t: t, name: "revoked join token", url: cl.url, token: join.Secret}
	joiner.expect(http.StatusUnauthorized, http.MethodPost, "/api/v1/agents/join", map[string]string{"host": "a9"})

	alice := caller{t: t, name: "alice", url: cl.url, token: cl.issue("alice", "user").Secret}
	bobTok := cl.issue("bob", "user")
	bob := caller{t: t, name: "bob", url: cl.url, token: bobTok.Secret}
	viewer := caller{t: t, name: "viewer", url: cl.url, token: cl.issue("vera", "viewer").Secret}
	operator := caller{t: t, name: "operator", url: cl.url, token: cl.issue("otto", "operator").Secret}
	agentCred := caller{t: t, name: "agent a1's credential", url: cl.url, token: cred}

	// alice's job runs until the test lets it finish.
	gate := filepath.Join(t.TempDir(), "go")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	req := shellJob(`while [ ! -e ` + gate + ` ]; do sleep 0.05; done`)
	var submitted berth.SubmitResponse
	if err := json.Unmarshal(alice.expect(http.StatusCreated, http.MethodPost, "/api/v1/jobs", req), &submitted); err != nil || len(submitted.Jobs) != 1 {
		t.Fatalf("alice's submission: %v %v", submitted.Jobs, err)
	}
	job := submitted.Jobs[0]
	if job.User != "alice" {
		t.Fatalf("alice's job runs as %q, want alice", job.User)
	}
	cl.awaitState(job.ID, 30*time.Second, berth.JobRunning)
	jobPath := "/api/v1/jobs/" + job.ID
	unchanged := func(what string) {
		t.Helper()
		if d := cl.job(job.ID); d.State != berth.JobRunning || d.Attempts != 1 {
			t.Fatalf("after %s: alice's job is %s after %d attempts, want still running its first", what, d.State, d.Attempts)
		}
		if n := cl.jobCount(); n != 1 {
			t.Fatalf("after %s: %d jobs stored, want 1", what, n)
		}
	}

	// alice sees and lists her own job.
	alice.expect(http.StatusOK, http.MethodGet, jobPath, nil)
	if jobs := jobList(t, alice.expect(http.StatusOK, http.MethodGet, "/api/v1/jobs", nil)); len(jobs) != 1 || jobs[0].ID != job.ID {
		t.Fatalf("alice's listing: %v, want her job", jobs)
	}

	// bob, another user, can neither see, list, cancel nor impersonate.
	bob.expect(http.StatusForbidden, http.MethodGet, jobPath, nil)
	bob.expect(http.StatusForbidden, http.MethodGet, jobPath+"/logs", nil)
	bob.expect(http.StatusForbidden, http.MethodPost, jobPath+"/cancel", nil)
	unchanged("bob's cancel")
	if jobs := jobList(t, bob.expect(http.StatusOK, http.MethodGet, "/api/v1/jobs", nil)); len(jobs) != 0 {
		t.Fatalf("bob's listing shows %d jobs, want none of alice's", len(jobs))
	}
	bob.expect(http.StatusForbidden, http.MethodGet, "/api/v1/jobs?user=alice", nil)
	asAlice := shellJob("true")
	asAlice.User = "alice"
	bob.expect(http.StatusForbidden, http.MethodPost, "/api/v1/jobs", asAlice)
	unchanged("bob submitting as alice")

	// The viewer sees everything and changes nothing.
	var seen berth.JobDetail
	if err := json.Unmarshal(viewer.expect(http.StatusOK, http.MethodGet, jobPath, nil), &seen); err != nil || seen.Job == nil || seen.ID != job.ID {
		t.Fatalf("viewer's view of alice's job: %+v %v", seen.Job, err)
	}
	if jobs := jobList(t, viewer.expect(http.StatusOK, http.MethodGet, "/api/v1/jobs", nil)); len(jobs) != 1 {
		t.Fatalf("viewer's listing: %d jobs, want alice's", len(jobs))
	}
	viewer.expect(http.StatusForbidden, http.MethodPost, jobPath+"/cancel", nil)
	unchanged("the viewer's cancel")
	viewer.expect(http.StatusForbidden, http.MethodPost, "/api/v1/jobs", shellJob("true"))
	unchanged("the viewer's submission")

	// Turning a worker off is for operators: alice is refused, otto is not.
	off := berth.ControlRequest{DesiredState: berth.DesiredOff, StopPolicy: berth.StopDrain}
	alice.expect(http.StatusForbidden, http.MethodPut, "/api/v1/workers/a1/control", off)
	viewer.expect(http.StatusForbidden, http.MethodPut, "/api/v1/workers/a1/control", off)
	if c := cl.offControls("a1"); len(c) != 0 {
		t.Fatalf("after refused controls, a1 has off controls %+v", c[0])
	}
	if st := cl.workerState("a1"); st != berth.WorkerReady && st != berth.WorkerBusy {
		t.Fatalf("after refused controls, a1 is %s, want ready or busy", st)
	}
	unchanged("alice's worker control")

	// An agent credential speaks the agent protocol only.
	agentCred.expect(http.StatusForbidden, http.MethodGet, "/api/v1/jobs", nil)
	agentCred.expect(http.StatusForbidden, http.MethodPost, "/api/v1/jobs", shellJob("true"))
	unchanged("the agent credential's submission")

	operator.expect(http.StatusOK, http.MethodPut, "/api/v1/workers/a1/control", off)
	if c := cl.offControls("a1"); len(c) != 1 || c[0].Queue != berth.AllQueues {
		t.Fatalf("after the operator's drain, a1's off controls are %v, want one for every queue", c)
	}
	cl.awaitWorker("a1", berth.WorkerDraining)
	unchanged("the operator's drain") // drain lets the running job finish

	// A revoked token is refused outright.
	admin2 := caller{t: t, name: "admin", url: cl.url, token: admin}
	admin2.expect(http.StatusOK, http.MethodDelete, "/api/v1/tokens/"+bobTok.ID, nil)
	bob.expect(http.StatusUnauthorized, http.MethodGet, "/api/v1/jobs", nil)
	bob.expect(http.StatusUnauthorized, http.MethodPost, "/api/v1/jobs", shellJob("true"))
	unchanged("the revoked token's submission")

	// alice may act on her own job.
	alice.expect(http.StatusOK, http.MethodPost, jobPath+"/cancel", nil)
	if d := cl.awaitState(job.ID, 30*time.Second, berth.JobCancelled, berth.JobSucceeded, berth.JobFailed); d.State != berth.JobCancelled {
		t.Fatalf("alice's job after her cancel: %s, want cancelled", d.State)
	}
}

// TestSecurityAgentCredentialBoundToHost gives agent b the credential agent
// a joined with: the server refuses its registration, saying why, and no
// worker b appears while a stays registered.
func TestSecurityAgentCredentialBoundToHost(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	join := cl.issue("pool", "agent")
	cl.addAgent("a", "--join-token", join.Secret)
	cred, err := os.ReadFile(filepath.Join(cl.dir, "agent-a", "credential"))
	if err != nil {
		t.Fatal(err)
	}
	bDir := filepath.Join(cl.dir, "agent-b")
	if err := os.MkdirAll(bDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bDir, "credential"), cred, 0o600); err != nil {
		t.Fatal(err)
	}
	b := start(t, "agent b", "agent", "--server", cl.url, "--host", "b", "--gpus", "1xT4:16GiB", "--data-dir", bDir)
	const why = "this agent credential is for host a, not b"
	if _, ok := b.out.await(why, 30*time.Second); !ok {
		t.Fatalf("agent b's output does not say %q", why)
	}
	// It keeps being refused: a second try says so again.
	cl.eventually(30*time.Second, "agent b's second refusal", func() bool {
		return strings.Count(b.out.String(), why) >= 2
	})
	if _, ok := b.out.await("msg=registered", 0); ok {
		t.Fatal("agent b says it registered")
	}
	if st := cl.workerState("b"); st != "" {
		t.Fatalf("worker b is %s, want no such worker", st)
	}
	out := mustCLI(t, "", "", "workers", "--server", cl.url, "-o", "json")
	var ws []*berth.Worker
	if err := json.Unmarshal([]byte(out), &ws); err != nil {
		t.Fatalf("berth workers -o json: %q: %v", out, err)
	}
	if len(ws) != 1 || ws[0].Host != "a" || (ws[0].State != berth.WorkerReady && ws[0].State != berth.WorkerBusy) {
		t.Fatalf("berth workers: %s, want only a, ready", out)
	}
}

// TestSecuritySecretsNeverLeak runs jobs that print, report as progress,
// pass in the environment and even exec a secret: the job sees the real
// value (its hash proves it) while every API answer, the event stream, the
// CLI's output, the processes' logs, the audit log and every file of the
// server's data dir (the SQLite database included) never hold it.
func TestSecuritySecretsNeverLeak(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	agent := cl.addAgent("s1")
	carolTok := cl.issue("carol", "user").Secret
	var bodies [][]byte
	carol := caller{t: t, name: "carol", url: cl.url, token: carolTok, record: &bodies}
	local := caller{t: t, name: "local", url: cl.url, record: &bodies} // loopback: admin

	value := "s3cr3t-" + hex.EncodeToString([]byte(rand.Text()))[:24]
	sum := sha256.Sum256([]byte(value))
	wantHash := hex.EncodeToString(sum[:])
	var cliOut strings.Builder
	set := mustCLI(t, carolTok, value+"\n", "secret", "set", "API_KEY", "--server", cl.url)
	cliOut.WriteString(set)
	if !strings.Contains(set, "API_KEY") || !strings.Contains(set, "carol") {
		t.Fatalf("berth secret set: %q, want it to name API_KEY of carol", set)
	}

	req := shellJob(`echo key={{SECRET:API_KEY}}; echo progress; echo "BERTH_PROGRESS 0.5 {{SECRET:API_KEY}}"; ` +
		`echo "foo=$FOO"; printf %s "$FOO" | sha256sum | sed s/^/envhash=/; ` +
		`printf %s "{{SECRET:API_KEY}}" | sha256sum | sed s/^/arghash=/; ` +
		`ls /nonexistent-{{SECRET:API_KEY}}; exit 3`)
	req.Env = map[string]string{"FOO": "{{SECRET:API_KEY}}"}
	var resp berth.SubmitResponse
	if err := json.Unmarshal(carol.expect(http.StatusCreated, http.MethodPost, "/api/v1/jobs", req), &resp); err != nil || len(resp.Jobs) != 1 {
		t.Fatalf("submit: %v %v", resp.Jobs, err)
	}
	echo := resp.Jobs[0]
	// A job whose program is the secret: starting it fails, and the
	// error names the program.
	execReq := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	execReq.Command = berth.Argv{"{{SECRET:API_KEY}}"}
	var execResp berth.SubmitResponse
	if err := json.Unmarshal(carol.expect(http.StatusCreated, http.MethodPost, "/api/v1/jobs", execReq), &execResp); err != nil || len(execResp.Jobs) != 1 {
		t.Fatalf("submit: %v %v", execResp.Jobs, err)
	}
	exe := execResp.Jobs[0]
	if exe.ID == echo.ID {
		t.Fatal("both submissions made the same job")
	}
	// A reference to a secret carol does not have is refused at submission.
	missing := shellJob("echo {{SECRET:NOPE}}")
	carol.expect(http.StatusBadRequest, http.MethodPost, "/api/v1/jobs", missing)

	for _, id := range []string{echo.ID, exe.ID} {
		cl.awaitState(id, time.Minute, berth.JobSucceeded, berth.JobFailed, berth.JobCancelled)
	}
	var d berth.JobDetail
	if err := json.Unmarshal(carol.expect(http.StatusOK, http.MethodGet, "/api/v1/jobs/"+echo.ID, nil), &d); err != nil {
		t.Fatal(err)
	}
	if d.State != berth.JobFailed || d.ExitCode == nil || *d.ExitCode != 3 || len(d.AttemptList) != 1 {
		t.Fatalf("echo job: %s exit %v (%q), %d attempts %+v, want failed with exit 3 after one attempt", d.State, d.ExitCode, d.Reason, len(d.AttemptList), d.AttemptList)
	}
	if got := d.AttemptList[0].Progress; got != "0.5 ***" {
		t.Fatalf("echo job's progress %q, want the secret redacted: %q", got, "0.5 ***")
	}
	if d.Env["FOO"] != "{{SECRET:API_KEY}}" || !strings.Contains(strings.Join(d.Command, " "), "{{SECRET:API_KEY}}") {
		t.Fatalf("the job as stored: env %v, command %q; want the references, not values", d.Env, d.Command)
	}
	d = berth.JobDetail{}
	if err := json.Unmarshal(carol.expect(http.StatusOK, http.MethodGet, "/api/v1/jobs/"+exe.ID, nil), &d); err != nil {
		t.Fatal(err)
	}
	if d.State != berth.JobFailed || len(d.AttemptList) != 1 || !strings.Contains(d.AttemptList[0].Reason, `"***"`) {
		t.Fatalf("exec job: %s, reason %q, want failed to start with the program's name redacted (\"***\")", d.State, d.Reason)
	}
	local.expect(http.StatusOK, http.MethodGet, "/api/v1/jobs/"+echo.ID, nil)
	local.expect(http.StatusOK, http.MethodGet, "/api/v1/jobs/"+exe.ID, nil)
	carol.expect(http.StatusOK, http.MethodGet, "/api/v1/jobs", nil)
	local.expect(http.StatusOK, http.MethodGet, "/api/v1/jobs", nil)
	local.expect(http.StatusOK, http.MethodGet, "/api/v1/workers", nil)
	local.expect(http.StatusOK, http.MethodGet, "/api/v1/secrets?owner=*", nil)
	carol.expect(http.StatusOK, http.MethodGet, "/api/v1/secrets", nil)
	local.expect(http.StatusOK, http.MethodGet, "/api/v1/tokens", nil)

	// The output shows the job saw the value, masked where printed.
	logs := string(carol.expect(http.StatusOK, http.MethodGet, "/api/v1/jobs/"+echo.ID+"/logs", nil))
	stars := strings.Repeat("*", len(value))
	for _, want := range []string{"key=" + stars + "\n", "foo=" + stars + "\n", "envhash=" + wantHash, "arghash=" + wantHash,
		"BERTH_PROGRESS 0.5 " + stars + "\n", "/nonexistent-" + stars} {
		if !strings.Contains(logs, want) {
			t.Fatalf("echo job's output lacks %q:\n%s", want, logs)
		}
	}
	local.expect(http.StatusOK, http.MethodGet, "/api/v1/jobs/"+exe.ID+"/logs", nil)

	// The event stream, from the start, up to both jobs' failures.
	for _, c := range []caller{carol, local} {
		bodies = append(bodies, readEvents(t, c, echo.ID, exe.ID))
	}
	list := mustCLI(t, carolTok, "", "secret", "list", "--server", cl.url, "-o", "json")
	if !strings.Contains(list, `"API_KEY"`) {
		t.Fatalf("berth secret list: %q, want API_KEY", list)
	}
	cliOut.WriteString(list)
	cliOut.WriteString(mustCLI(t, carolTok, "", "logs", "--server", cl.url, echo.ID))
	cliOut.WriteString(mustCLI(t, carolTok, "", "job", "--server", cl.url, "-o", "json", echo.ID))
	cliOut.WriteString(mustCLI(t, carolTok, "", "job", "--server", cl.url, exe.ID))
	cliOut.WriteString(mustCLI(t, "", "", "audit", "export", "--data-dir", filepath.Join(cl.dir, "server")))
	if !strings.Contains(cliOut.String(), "secret.set") {
		t.Fatalf("the audit export does not record the secret's setting:\n%s", cliOut.String())
	}

	leaks := map[string][]byte{"berth CLI output": []byte(cliOut.String())}
	for i, b := range bodies {
		leaks["API response "+strconv.Itoa(i)] = b
	}
	// Stop the server so that what it wrote is on disk and its output is
	// complete; the agent's output too.
	cl.server.stop()
	agent.stop()
	leaks["server output"] = []byte(cl.server.out.String())
	leaks["agent output"] = []byte(agent.out.String())
	files := 0
	err := filepath.WalkDir(filepath.Join(cl.dir, "server"), func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		leaks[path] = data
		files++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"berth.db", "audit.log"} {
		if _, ok := leaks[filepath.Join(cl.dir, "server", name)]; !ok {
			t.Fatalf("the server's data dir has no %s among its %d files", name, files)
		}
	}
	for where, data := range leaks {
		if bytes.Contains(data, []byte(value)) {
			t.Errorf("the secret's value is in %s", where)
		}
	}
}

// readEvents reads the event stream as c from the start until both jobs'
// failure events have come, and returns all of it.
func readEvents(t *testing.T, c caller, ids ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"/api/v1/events?after=0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events as %s: status %d", c.who(), resp.StatusCode)
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var all bytes.Buffer
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for len(want) > 0 && sc.Scan() {
		all.Write(sc.Bytes())
		all.WriteByte('\n')
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e map[string]any
		if json.Unmarshal([]byte(data), &e) == nil && e["type"] == "job.failed" {
			delete(want, e["job_id"].(string))
		}
	}
	if len(want) > 0 {
		t.Fatalf("events as %s: no job.failed for %v (%v):\n%s", c.who(), want, sc.Err(), all.String())
	}
	return all.Bytes()
}

// startTLSServer starts berth server --tls-self-signed and returns it and
// its https:// URL.
func startTLSServer(t *testing.T, dataDir string) (*proc, string) {
	t.Helper()
	p := start(t, "tls server", "server", "--data-dir", dataDir, "--listen", freeAddr(t), "--tls-self-signed")
	line, ok := p.out.await("listening on", 30*time.Second)
	if !ok {
		t.Fatalf("TLS server did not start:\n%s", p.out)
	}
	u := regexp.MustCompile(`https://\S+`).FindString(line)
	if u == "" {
		t.Fatalf("server says %q, want an https:// URL", line)
	}
	return p, u
}

// TestSecurityTLSSelfSigned serves HTTPS with the development CA: an agent
// pinning the CA's fingerprint registers over wss://, a client trusting the
// CA file lists workers, and a wrong pin or plain HTTP get nowhere.
func TestSecurityTLSSelfSigned(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	server, url := startTLSServer(t, filepath.Join(dir, "server"))
	caFile := filepath.Join(dir, "server", "tls", "ca.pem")
	pemData, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemData)
	if block == nil {
		t.Fatalf("%s holds no PEM block", caFile)
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !ca.IsCA {
		t.Fatalf("%s: %v (CA %v), want a CA certificate", caFile, err, ca != nil && ca.IsCA)
	}
	// The server prints the CA's fingerprint, for clients to pin.
	fp := devca.Fingerprint(ca)
	if line, ok := server.out.await("fingerprint", 0); !ok || !strings.Contains(line, fp) || !strings.Contains(line, caFile) {
		t.Fatalf("the server prints %q; want the CA %s and its fingerprint %s", line, caFile, fp)
	}

	caCfg, err := devca.ClientConfig(caFile, "")
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(url, "", caCfg)
	if _, err := c.Workers(context.Background()); err != nil {
		t.Fatalf("client trusting %s: %v", caFile, err)
	}

	agent := start(t, "agent t1", "agent", "--server", url, "--ca-fingerprint", fp, "--host", "t1",
		"--gpus", "1xT4:16GiB", "--data-dir", filepath.Join(dir, "agent-t1"))
	if line, ok := agent.out.await("msg=registered", 30*time.Second); !ok || !strings.Contains(line, "server="+url) {
		t.Fatalf("the agent pinning the CA's fingerprint did not register with %s (over wss://): %q", url, line)
	}
	cl := &cluster{t: t, c: c}
	cl.awaitWorker("t1", berth.WorkerReady)

	// The CA pin alone works for a client too.
	pinCfg, err := devca.ClientConfig("", fp)
	if err != nil {
		t.Fatal(err)
	}
	if ws, err := client.New(url, "", pinCfg).Workers(context.Background()); err != nil || len(ws) != 1 {
		t.Fatalf("client pinning %s: %v workers, %v", fp, len(ws), err)
	}

	wrong := "sha256:" + strings.Repeat("ab", sha256.Size)
	wrongCfg, err := devca.ClientConfig("", wrong)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(url, "", wrongCfg).Workers(context.Background()); err == nil || !strings.Contains(err.Error(), "fingerprint") {
		t.Fatalf("client with a wrong pin: %v, want a fingerprint mismatch", err)
	}
	// Without the CA, the system roots do not trust the development CA.
	if _, err := client.New(url, "", nil).Workers(context.Background()); err == nil {
		t.Fatal("a client trusting only the system roots reached the server")
	}
	plain := "http://" + strings.TrimPrefix(url, "https://")
	if _, err := client.New(plain, "", nil).Workers(context.Background()); err == nil {
		t.Fatal("plain HTTP to the TLS port got an answer")
	}
	// An agent with a wrong pin does not register.
	bad := start(t, "agent t2", "agent", "--server", url, "--ca-fingerprint", wrong, "--host", "t2",
		"--gpus", "1xT4:16GiB", "--data-dir", filepath.Join(dir, "agent-t2"))
	if _, ok := bad.out.await("pinned fingerprint", 30*time.Second); !ok {
		t.Fatal("the agent with a wrong pin does not say its pin does not match")
	}
	if st := cl.workerState("t2"); st != "" {
		t.Fatalf("worker t2, with a wrong pin, is %s; want no such worker", st)
	}
}

// TestSecuritySameOriginAndRateLimit refuses a cross-origin browser
// submission (even from loopback, which is trusted), takes a same-origin
// one, and answers a burst past --rate-limit with 429 and Retry-After.
func TestSecuritySameOriginAndRateLimit(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--rate-limit", "5")
	local := caller{t: t, name: "local", url: cl.url}
	req := shellJob("true")
	status, _, body := local.do(http.MethodPost, "/api/v1/jobs", req, map[string]string{"Origin": "http://evil.example"})
	if status != http.StatusForbidden || !strings.Contains(string(body), "cross-origin") {
		t.Fatalf("cross-origin submission: %d %s, want 403 cross-origin", status, body)
	}
	status, _, body = local.do(http.MethodPost, "/api/v1/jobs", req, map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
	if status != http.StatusForbidden {
		t.Fatalf("cross-site submission: %d %s, want 403", status, body)
	}
	if jobs := jobList(t, local.expect(http.StatusOK, http.MethodGet, "/api/v1/jobs", nil)); len(jobs) != 0 {
		t.Fatalf("after refused cross-origin submissions, %d jobs stored, want 0", len(jobs))
	}
	status, _, body = local.do(http.MethodPost, "/api/v1/jobs", req, map[string]string{"Origin": cl.url})
	if status != http.StatusCreated {
		t.Fatalf("same-origin submission: %d %s, want 201", status, body)
	}
	if jobs := jobList(t, local.expect(http.StatusOK, http.MethodGet, "/api/v1/jobs", nil)); len(jobs) != 1 {
		t.Fatalf("after the same-origin submission, %d jobs stored, want 1", len(jobs))
	}

	// 5 a second with bursts of 11: a quick run of GETs hits the limit,
	// not before the 11th request admitted (3 so far; refused
	// cross-origin ones are answered before the limit is applied).
	admitted := 3
	var limited bool
	for i := 0; i < 200 && !limited; i++ {
		status, hdr, body := local.do(http.MethodGet, "/api/v1/workers", nil, nil)
		switch status {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
			limited = true
			after, err := strconv.Atoi(hdr.Get("Retry-After"))
			if err != nil || after < 1 {
				t.Fatalf("429 with Retry-After %q, want a whole number of seconds ≥ 1", hdr.Get("Retry-After"))
			}
			if berth.ErrorCode(decodeError(body)) != berth.ECodeTooMany {
				t.Fatalf("429 body %s, want a too-many error", body)
			}
			if admitted < 11 {
				t.Fatalf("limited after %d requests; the burst is 11", admitted)
			}
		default:
			t.Fatalf("GET workers: %d %s", status, body)
		}
	}
	if !limited {
		t.Fatal("200 quick requests were never rate-limited at 5 a second")
	}
	// /healthz is never limited.
	if status, _, body := local.do(http.MethodGet, "/healthz", nil, nil); status != http.StatusOK {
		t.Fatalf("healthz while limited: %d %s", status, body)
	}
}

// decodeError returns the *berth.Error of an error body, nil if none.
func decodeError(body []byte) error {
	var eb berth.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil {
		return errors.New("no error body")
	}
	return eb.Error
}
