package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/postgres/pgtest"
)

// healthz returns the /healthz body of the server at url.
func healthz(t *testing.T, url string) map[string]string {
	t.Helper()
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		t.Fatalf("healthz of %s: %v", url, err)
	}
	defer resp.Body.Close()
	var body map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("healthz of %s: %v", url, err)
	}
	return body
}

// TestFailoverRunsEveryJobExactlyOnce runs two servers on one PostgreSQL
// database and kills the leader with SIGKILL in the middle of a 2,000-job
// array. The standby takes over, the agents (given both URLs) reconnect
// with their running attempts, and every job succeeds exactly once: each
// creates its own file with O_EXCL, so a second run of any job fails it.
func TestFailoverRunsEveryJobExactlyOnce(t *testing.T) {
	t.Parallel()
	pair := startHAPair(t)
	a, b, urlA, urlB, token, dir := pair.a, pair.b, pair.urlA, pair.urlB, pair.token, pair.dir
	if h := healthz(t, urlB); h["status"] != "standby" || h["leader"] != urlA {
		t.Fatalf("standby's healthz = %v, want standby naming %s", h, urlA)
	}
	if h := healthz(t, urlA); h["status"] != "ok" || h["leader"] != urlA {
		t.Fatalf("leader's healthz = %v", h)
	}

	// A client that knows only the standby is served through it: reads and
	// writes are forwarded to the leader.
	viaStandby := client.New(urlB, token, nil)
	rule, err := berth.ParseQuotaRule("user:nobody", []string{"jobs<=1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := viaStandby.SetQuota(context.Background(), rule); err != nil {
		t.Fatalf("set a quota through the standby: %v", err)
	}
	if rules, err := client.New(urlA, token, nil).Quotas(context.Background()); err != nil || len(rules) != 1 || rules[0].ID() != "user:nobody" {
		t.Fatalf("quotas on the leader after a write through the standby = %+v, %v", rules, err)
	}

	servers := urlA + "," + urlB
	for _, host := range []string{"ha1", "ha2"} {
		start(t, "agent "+host, "agent", "--server", servers, "--host", host, "--gpus", "0", "--slots", "32",
			"--data-dir", filepath.Join(dir, "agent-"+host))
	}
	c := client.New(servers, token, nil)
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	req := shellJob(`set -C; : > ` + out + `/$BERTH_ARRAY_INDEX; sleep 0.02`)
	req.Array, req.Retries = 2000, 0
	jobs, err := c.Submit(context.Background(), req)
	if err != nil || len(jobs) != 2000 {
		t.Fatalf("submit: %d jobs, %v", len(jobs), err)
	}
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	if d, err := viaStandby.Job(context.Background(), ids[0]); err != nil || d.ID != ids[0] {
		t.Fatalf("read a job on the standby (from the database): %v, %v", d, err)
	}
	done := func() int {
		entries, _ := os.ReadDir(out)
		return len(entries)
	}
	deadline := time.Now().Add(time.Minute)
	for done() < 300 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d jobs ran within a minute", done())
		}
		time.Sleep(10 * time.Millisecond)
	}

	a.kill()
	killed := time.Now()
	if _, ok := b.out.await("listening on", 60*time.Second); !ok {
		t.Fatal("the standby did not take over within a minute of the leader's death")
	}
	t.Logf("standby led %s after the leader was killed, with %d of 2000 jobs run", time.Since(killed).Round(time.Millisecond), done())

	var res *berth.WaitResult
	for res == nil || !res.Done {
		if time.Since(killed) > 3*time.Minute {
			t.Fatalf("jobs not done 3 minutes after the failover: %+v", res)
		}
		if res, err = c.Wait(context.Background(), ids, false, time.Minute); err != nil {
			t.Fatalf("wait: %v", err)
		}
	}
	if res.Counts[berth.JobSucceeded] != 2000 || len(res.Failures) != 0 {
		t.Fatalf("after the failover: %v, failures %v; want all 2000 succeeded", res.Counts, res.Failures[:min(5, len(res.Failures))])
	}
	if n := done(); n != 2000 {
		t.Fatalf("%d jobs ran, want exactly 2000", n)
	}
	if h := healthz(t, urlB); h["status"] != "ok" || h["leader"] != urlB {
		t.Fatalf("new leader's healthz = %v", h)
	}
	// The events of the old leader's time are still there, before the new ones.
	awaitEventAt(t, urlB, 10*time.Second, "the first job's submission, from before the failover", func(e map[string]any) bool {
		return e["type"] == "job.submitted" && e["job_id"] == ids[0]
	})
}

// haPair is two servers on one PostgreSQL database sharing a signing key:
// a leads, b stands by.
type haPair struct {
	a, b              *proc
	urlA, urlB, token string
	dir               string // holds each server's data dir (a, b) and the key
}

// startHAPair starts a, waits for it to listen, then b, and waits for b
// to stand by; token is a's first admin token. Loopback trust is each
// server's own: a request a standby forwards is admitted by the leader by
// its token, signed with the key the servers share.
func startHAPair(t *testing.T) haPair {
	t.Helper()
	db := pgtest.NewDatabase(t)
	p := haPair{dir: t.TempDir(), urlA: "http://" + freeAddr(t), urlB: "http://" + freeAddr(t)}
	server := func(name, url string) *proc {
		return start(t, "server "+name, "server", "--store", db, "--listen", strings.TrimPrefix(url, "http://"),
			"--data-dir", filepath.Join(p.dir, name), "--heartbeat", "1s", "--key-file", filepath.Join(p.dir, "berth.key"))
	}
	p.a = server("a", p.urlA)
	if _, ok := p.a.out.await("listening on", 30*time.Second); !ok {
		t.Fatal("server a did not start")
	}
	admin, err := os.ReadFile(filepath.Join(p.dir, "a", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	p.token = strings.TrimSpace(string(admin))
	p.b = server("b", p.urlB)
	if _, ok := p.b.out.await("standby", 30*time.Second); !ok {
		t.Fatal("server b did not stand by")
	}
	return p
}
