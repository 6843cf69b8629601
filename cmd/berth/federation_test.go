package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// federated is two servers on real SQLite: a, the origin, with no
// worker, and b, its peer, with one agent.
type federated struct {
	a, b   *cli
	rsA    *runningServer
	bToken string // the peer token b minted for a
}

// newFederated starts b with an agent, mints b's peer token for a,
// starts a (its manager ticking every tick) and adds b as a's peer.
func newFederated(t *testing.T, tick time.Duration) *federated {
	t.Helper()
	ctx := context.Background()
	rsB, err := startServer(ctx, &serverConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rsB.Close(ctx) })
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		m := &Main{Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer), Getenv: func(string) string { return "" }}
		m.Run(agentCtx, []string{"agent", "--server", rsB.URL, "--gpus", "0", "--host", "bbox", "--data-dir", t.TempDir()})
	}()
	t.Cleanup(func() { stopAgent(); <-agentDone })
	issued, err := client.New(rsB.URL, "", nil).CreateToken(ctx, berth.TokenRequest{Role: "peer", Name: "a"})
	if err != nil {
		t.Fatal(err)
	}

	rsA, err := startServer(ctx, &serverConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", FederationTick: tick})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rsA.Close(ctx) })
	f := &federated{a: &cli{t: t, url: rsA.URL}, b: &cli{t: t, url: rsB.URL}, rsA: rsA, bToken: issued.Secret}
	tokenFile := filepath.Join(t.TempDir(), "b.token")
	if err := os.WriteFile(tokenFile, []byte(issued.Secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := f.a.run("peer", "add", "b", "--url", rsB.URL, "--token-file", tokenFile); code != 0 {
		t.Fatalf("peer add: exit %d: %s", code, errOut)
	}
	return f
}

// main is a berth command line of c's server writing to stdout.
func (c *cli) main(stdout io.Writer) *Main {
	return &Main{Stdout: stdout, Stderr: new(bytes.Buffer), Getenv: func(k string) string {
		if k == "BERTH_SERVER" {
			return c.url
		}
		return ""
	}}
}

// TestFederatedJobRunsOnThePeerAndStreamsThroughTheOrigin submits a job
// pinned to peer b on a, which has no worker: the manager hands it to b,
// whose agent runs it; berth logs -f on a streams its output from b (the
// client never told b's address), berth wait on a sees it end as b ran
// it, and exec on a is refused as the job runs elsewhere.
func TestFederatedJobRunsOnThePeerAndStreamsThroughTheOrigin(t *testing.T) {
	t.Parallel()
	f := newFederated(t, 20*time.Millisecond)
	code, out, errOut := f.a.run("submit", "--cluster", "b", "--", "sh", "-c", "echo hello from b; echo second line")
	if code != 0 {
		t.Fatalf("submit --cluster b: exit %d: %s", code, errOut)
	}
	id := strings.TrimSpace(out)

	code, out, errOut = f.a.run("logs", "-f", id)
	if code != 0 || out != "hello from b\nsecond line\n" {
		t.Fatalf("berth logs -f on the origin: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut = f.a.run("wait", id); code != 0 {
		t.Fatalf("berth wait on the origin: exit %d, %q, %q", code, out, errOut)
	}
	d := runJSON[berth.JobDetail](f.a, "job", id, "-o", "json")
	if d.State != berth.JobSucceeded || d.Cluster != "b" || len(d.Handoffs) != 1 || d.Handoffs[0].State != berth.HandoffDone {
		t.Fatalf("the job on the origin: %+v, handoffs %+v", d.Job, d.Handoffs)
	}
	remote := d.Handoffs[0].RemoteJobID
	if code, out, _ := f.b.run("logs", remote); code != 0 || out != "hello from b\nsecond line\n" {
		t.Fatalf("the job %s on the peer: exit %d, %q", remote, code, out)
	}

	// The records a berth run reads come through as well, attempt by
	// attempt.
	c := client.New(f.a.url, "", nil)
	var got strings.Builder
	if err := c.LogRecords(t.Context(), id, true, func(r *berth.LogRecord) error {
		got.Write(r.Data)
		return nil
	}); err != nil || got.String() != "hello from b\nsecond line\n" {
		t.Fatalf("log records through the origin: %q, %v", got.String(), err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	local := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	for _, args := range [][]string{{"exec", id, "--", "true"}, {"port-forward", id, local + ":8080"}} {
		code, out, errOut = f.a.run(args...)
		if code == 0 || !strings.Contains(errOut, "federation peer b") || !strings.Contains(errOut, "conflict") {
			t.Errorf("berth %s of a federated job: exit %d, %q, %q; want a conflict naming the peer", args[0], code, out, errOut)
		}
	}

	s := f.rsA.federation.Status("b")
	if s.State != berth.PeerReady || s.Capacity == nil || len(s.Capacity.Workers) != 1 || s.LastSync.IsZero() || s.LastError != "" {
		t.Fatalf("a's status of b: %+v", s)
	}
}

// TestFederatedLogsStreamWhileTheJobRuns follows a federated job's logs
// through the origin: its first line arrives while the job, on the peer,
// still waits for the test's go-ahead, so the origin passes the peer's
// output on as it comes rather than once the job has ended; and berth
// cancel on the origin ends it there, and the stream with it.
func TestFederatedLogsStreamWhileTheJobRuns(t *testing.T) {
	t.Parallel()
	f := newFederated(t, 20*time.Millisecond)
	goAhead := filepath.Join(t.TempDir(), "go")
	code, out, errOut := f.a.run("submit", "--cluster", "b", "--", "sh", "-c",
		"echo first; while [ ! -e "+goAhead+" ]; do sleep 0.05; done; echo second")
	if code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	stdout := newWatchedWriter("first\n")
	exit := make(chan int, 1)
	go func() { exit <- f.a.main(stdout).Run(t.Context(), []string{"logs", "-f", id}) }()
	select {
	case <-stdout.seen:
	case code := <-exit:
		t.Fatalf("berth logs -f ended (exit %d, %q) before the job did", code, stdout)
	}
	if err := os.WriteFile(goAhead, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := <-exit; code != 0 || stdout.String() != "first\nsecond\n" {
		t.Fatalf("berth logs -f: exit %d, %q", code, stdout)
	}

	// A second job, cancelled on the origin while it runs on the peer:
	// the cancel reaches the peer, whose job ends, and so does the stream.
	code, out, errOut = f.a.run("submit", "--cluster", "b", "--", "sh", "-c", "echo waiting; sleep 1000")
	if code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	id = strings.TrimSpace(out)
	stdout = newWatchedWriter("waiting\n")
	go func() { exit <- f.a.main(stdout).Run(t.Context(), []string{"logs", "-f", id}) }()
	<-stdout.seen
	if code, _, errOut := f.a.run("cancel", id); code != 0 {
		t.Fatalf("cancel on the origin: exit %d: %s", code, errOut)
	}
	if code := <-exit; code != 0 || stdout.String() != "waiting\n" {
		t.Fatalf("berth logs -f of the cancelled job: exit %d, %q", code, stdout)
	}
	if code, out, _ := f.a.run("wait", id); code == 0 || !strings.Contains(out, "cancelled") {
		t.Fatalf("berth wait on the origin: exit %d, %q; want it cancelled", code, out)
	}
}

// TestFederatedJobRejectedByThePeer hands b a job b refuses for good (it
// references a secret its user has on a, but the user b runs a's jobs as
// has not): a records the handle rejected, once, with b's reason, and the
// job fails with it.
func TestFederatedJobRejectedByThePeer(t *testing.T) {
	t.Parallel()
	f := newFederated(t, 20*time.Millisecond)
	if _, err := client.New(f.a.url, "", nil).SetSecret(t.Context(), "", "HF_TOKEN", "hf-secret"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := f.a.run("submit", "--cluster", "b", "--", "sh", "-c", "echo {{SECRET:HF_TOKEN}}")
	if code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	if code, out, _ := f.a.run("wait", id); code == 0 || !strings.Contains(out, "failed") {
		t.Fatalf("berth wait: exit %d, %q; want the job failed", code, out)
	}
	d := runJSON[berth.JobDetail](f.a, "job", id, "-o", "json")
	if len(d.Handoffs) != 1 || d.Handoffs[0].State != berth.HandoffRejected || !strings.Contains(d.Handoffs[0].LastError, "HF_TOKEN") ||
		!strings.Contains(d.Reason, "rejected by peer b") {
		t.Fatalf("the rejected job: reason %q, handoffs %+v", d.Reason, d.Handoffs)
	}
	if jobs := f.b.listJobs(); len(jobs) != 0 {
		t.Fatalf("b made jobs of a refused handoff: %+v", jobs)
	}
}
