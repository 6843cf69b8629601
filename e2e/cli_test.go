package e2e

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// TestCLIJobsHostsAndArrays runs real jobs on two agents and lists them
// as berth jobs does: an array as one row with its states counted, each
// job's HOST (a gang's first host and +1), and, with --expand, a row per
// job; the job events on the stream carry the job's name. The client
// flags come before the command.
func TestCLIJobsHostsAndArrays(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("h1")
	cl.addAgent("h2")
	sweep := strings.Fields(mustCLI(t, "", "", "--server", cl.url, "submit", "--name", "sweep", "--array", "3", "--", "true"))
	pair := strings.TrimSpace(mustCLI(t, "", "", "--server", cl.url, "submit", "--name", "pair", "--nodes", "2", "--", "true"))
	if len(sweep) != 3 || pair == "" {
		t.Fatalf("submit: %q, %q", sweep, pair)
	}
	mustCLI(t, "", "", append([]string{"--server", cl.url, "wait"}, append(sweep, pair)...)...)

	table := mustCLI(t, "", "", "--server", cl.url, "jobs")
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(table), "\n")[1:] {
		rows[strings.Fields(line)[0]] = line
	}
	array, gang := rows[sweep[0]+"_[0-2]"], rows[pair]
	if len(rows) != 2 || !regexp.MustCompile(`3 succeeded\s+h[12] \+2\s`).MatchString(array) ||
		!regexp.MustCompile(`succeeded\s+h[12] \+1\s`).MatchString(gang) {
		t.Fatalf("berth jobs:\n%s\nwant the array as one row (3 succeeded, a host +2) and the gang's first host +1", table)
	}
	var jobs []berth.Job
	out := mustCLI(t, "", "", "-o", "json", "--server", cl.url, "jobs", "--name", "sweep", "--expand")
	if err := json.Unmarshal([]byte(out), &jobs); err != nil || len(jobs) != 3 {
		t.Fatalf("jobs -o json --name sweep: %v\n%s", err, out)
	}
	for _, j := range jobs {
		if j.Host != "h1" && j.Host != "h2" {
			t.Errorf("job %s: host %q, want h1 or h2", j.ID, j.Host)
		}
	}
	expanded := mustCLI(t, "", "", "--server", cl.url, "jobs", "--name", "sweep", "--expand")
	if n := strings.Count(expanded, " succeeded "); n != 3 || strings.Contains(expanded, "_[") {
		t.Errorf("jobs --expand:\n%s\nwant a row per job of the array", expanded)
	}
	for _, id := range []string{sweep[1], pair} {
		cl.awaitEvent(30*time.Second, "job.succeeded of "+id+" with its name", func(e map[string]any) bool {
			return e["type"] == berth.EventJobSucceeded && e["job_id"] == id && (e["name"] == "sweep" || e["name"] == "pair")
		})
	}
}

// TestCLIUnknownAuthorityHint: a client that does not trust an https://
// server's certificate is told the flag that makes it trust it.
func TestCLIUnknownAuthorityHint(t *testing.T) {
	t.Parallel()
	_, url := startTLSServer(t, filepath.Join(t.TempDir(), "server"))
	_, errOut, err := runCLI(t, "", "", "--server", url, "workers")
	if err == nil || !strings.Contains(errOut, "certificate signed by unknown authority") ||
		!strings.Contains(errOut, "give --ca-fingerprint sha256:HEX") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("berth workers against an untrusted server: %v, %q; want one line naming --ca-fingerprint", err, errOut)
	}
}
