package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
)

// seedJobs writes jobs into the store of data directory dir, before a
// server starts on it.
func seedJobs(t *testing.T, dir string, jobs ...*berth.Job) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Write(t.Context(), &store.Batch{Jobs: jobs}); err != nil {
		t.Fatal(err)
	}
}

// seedJob is a job of alice's in state, handed to cluster ("" local).
func seedJob(id, cluster string, state berth.JobState) *berth.Job {
	j := &berth.Job{ID: id, JobSpec: berth.DefaultJobSpec(), State: state, CreatedAt: time.Now().UTC()}
	j.Name, j.Command, j.User, j.Cluster = "train", berth.Argv{"true"}, "alice", cluster
	return j
}

// fields returns the lines of out split in fields.
func fields(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

func TestPeerAddListRm(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// 01K…1 was handed to peer b and runs there; 01K…2 is local.
	seedJobs(t, dir, seedJob("01KAAAAAAAAAAAAAAAAAAAAAA1", "b", berth.JobRunning), seedJob("01KAAAAAAAAAAAAAAAAAAAAAA2", "", berth.JobPending))
	c := newCLIIn(t, dir)
	tokenFile := filepath.Join(t.TempDir(), "b.token")
	if err := os.WriteFile(tokenFile, []byte("peer-secret-b\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Bad input: one line naming the flag, nothing stored.
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"peer", "add", "c", "--url", "https://127.0.0.1:7443"}, "--token-file"},
		{[]string{"peer", "add", "c", "--url", "https://127.0.0.1", "--token-file", tokenFile}, "--url"},
		{[]string{"peer", "add", "c", "--url", "https://127.0.0.1:7443", "--token-file", tokenFile, "--ca-fingerprint", "sha256:00"}, "--ca-fingerprint"},
		{[]string{"peer", "add", "c", "--url", "https://127.0.0.1:7443", "--token-file", tokenFile, "--route-timeout", "2h"}, "--route-timeout"},
		{[]string{"peer", "add", "C", "--url", "https://127.0.0.1:7443", "--token-file", tokenFile}, "NAME"},
		{[]string{"peer", "add", "c", "--url", "https://127.0.0.1:7443", "--token-file", filepath.Join(dir, "none")}, "--token-file"},
		{[]string{"--ca-fingerprint", "sha256:" + strings.Repeat("0", 64), "peer", "add", "c", "--url", "https://127.0.0.1:7443", "--token-file", tokenFile}, "--ca-fingerprint"},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "berth: "+tc.flag+": ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("berth %s: exit %d, %q, %q; want 2 and one line naming %s", strings.Join(tc.args, " "), code, out, errOut, tc.flag)
		}
	}
	if list := listJSON[berth.PeerInfo](c, "peers", "-o", "json"); len(list) != 0 {
		t.Fatalf("peers after bad input: %+v", list)
	}

	fp := "sha256:" + strings.Repeat("ab", 32)
	code, out, errOut := c.run("peer", "add", "b", "--url", "https://127.0.0.1:7443", "--token-file", tokenFile, "--ca-fingerprint", fp, "--lost-timeout", "2h")
	if code != 0 || out != "peer b: https://127.0.0.1:7443 (route timeout 1m0s, lost timeout 2h0m0s)\n" || errOut != "" {
		t.Fatalf("peer add: exit %d, %q, %q", code, out, errOut)
	}
	code, out, _ = c.run("peers")
	rows := fields(out)
	if code != 0 || len(rows) != 2 || strings.Join(rows[0], " ") != "NAME URL STATE LAG CAPACITY LAST-SYNC" ||
		strings.Join(rows[1], " ") != "b https://127.0.0.1:7443 new - - -" {
		t.Fatalf("berth peers: exit %d:\n%s", code, out)
	}
	code, out, _ = c.run("peers", "-o", "wide")
	if rows := fields(out); code != 0 || len(rows) != 2 || rows[0][len(rows[0])-1] != "ERROR" || rows[1][9] != "2h0m0s" {
		t.Fatalf("berth peers -o wide: exit %d:\n%s", code, out)
	}
	code, out, _ = c.run("peers", "-o", "json")
	list := listJSON[berth.PeerInfo](c, "peers", "-o", "json")
	if code != 0 || strings.Contains(out, "peer-secret") || strings.Contains(out, `"token"`) || len(list) != 1 ||
		list[0].CAFingerprint != fp || list[0].Status.State != berth.PeerNew {
		t.Fatalf("berth peers -o json: %s", out)
	}

	// berth jobs: CLUSTER when a listed job has one, or in -o wide;
	// -o json always has cluster.
	code, out, _ = c.run("jobs")
	rows = fields(out)
	if code != 0 || len(rows) != 3 || rows[0][5] != "CLUSTER" || rows[1][5] != "-" || rows[2][5] != "b" {
		t.Errorf("berth jobs: exit %d:\n%s", code, out)
	}
	if code, out, _ = c.run("jobs", "--state", "pending"); code != 0 || strings.Contains(out, "CLUSTER") {
		t.Errorf("berth jobs of local jobs only: exit %d:\n%s", code, out)
	}
	if code, out, _ = c.run("jobs", "--state", "pending", "-o", "wide"); code != 0 || !strings.Contains(out, "CLUSTER") {
		t.Errorf("berth jobs -o wide: exit %d:\n%s", code, out)
	}
	raw := listJSON[map[string]any](c, "jobs", "-o", "json")
	if len(raw) != 2 || raw[0]["cluster"] != "" || raw[1]["cluster"] != "b" {
		t.Errorf("berth jobs -o json: cluster = %q, %q; want \"\" and b", raw[0]["cluster"], raw[1]["cluster"])
	}
	code, out, _ = c.run("job", "01KAAAAAAAAAAAAAAAAAAAAAA1")
	if code != 0 || !strings.Contains(out, "Cluster:   b (handed to this federation peer)\n") {
		t.Errorf("berth job of a federated job: exit %d:\n%s", code, out)
	}

	// rm: refused while b holds the running job, then forced.
	code, out, errOut = c.run("peer", "rm", "b")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "1 active jobs") || !strings.Contains(errOut, "(conflict)") {
		t.Fatalf("peer rm of a peer with an active job: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := c.run("peer", "rm", "b", "--force"); code != 0 || out != "peer b removed\n" {
		t.Fatalf("peer rm --force: exit %d, %q, %q", code, out, errOut)
	}
	if list := listJSON[berth.PeerInfo](c, "peers", "-o", "json"); len(list) != 0 {
		t.Errorf("peers after rm: %+v", list)
	}
}

// TestPeersSurviveAServerRestart adds a peer, restarts the server on the
// same data directory, and finds the peer and its token (sealed with the
// server's key file) as they were.
func TestPeersSurviveAServerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func() *runningServer {
		rs, err := startServer(context.Background(), &serverConfig{DataDir: dir, Listen: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	rs := start()
	c := &cli{t: t, url: rs.URL}
	tokenFile := filepath.Join(t.TempDir(), "b.token")
	if err := os.WriteFile(tokenFile, []byte("peer-secret-b"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := c.run("peer", "add", "b", "--url", "https://127.0.0.1:7443", "--token-file", tokenFile, "--route-timeout", "30s"); code != 0 {
		t.Fatalf("peer add: exit %d, %q, %q", code, out, errOut)
	}
	before := listJSON[berth.PeerInfo](c, "peers", "-o", "json")
	if err := rs.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Audited as quota rules are, never with the token.
	log, err := os.ReadFile(rs.sec.auditPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `"action":"peer.set"`) || !strings.Contains(string(log), `"target":"peer/b"`) || strings.Contains(string(log), "peer-secret") {
		t.Errorf("audit log after peer add:\n%s", log)
	}

	rs = start()
	t.Cleanup(func() { rs.Close(context.Background()) })
	c = &cli{t: t, url: rs.URL}
	after := listJSON[berth.PeerInfo](c, "peers", "-o", "json")
	if len(after) != 1 || !reflect.DeepEqual(after[0].Peer, before[0].Peer) || after[0].RouteTimeout != berth.Duration(30*time.Second) {
		t.Fatalf("peers after a restart = %+v, want %+v", after, before)
	}
	peers, err := rs.Ctl.Peers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	vault, err := auth.NewVault(t.Context(), rs.store, rs.sec.keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := vault.OpenPeerToken("b", peers[0].SealedToken); err != nil || tok != "peer-secret-b" {
		t.Errorf("b's token after a restart = %q, %v", tok, err)
	}
}

// TestSubmitCluster checks that --cluster and a job file's cluster reach
// the server, which refuses a peer it does not know naming cluster, and
// stores nothing.
func TestSubmitCluster(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	file := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(file, []byte("cluster: nowhere\ncommand: [\"true\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"submit", "--cluster", "nowhere", "--", "true"}, {"submit", "-f", file}} {
		code, out, errOut := c.run(args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "berth: cluster: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("berth %s: exit %d, %q, %q; want 2 and one line naming cluster", strings.Join(args, " "), code, out, errOut)
		}
	}
	if jobs := c.listJobs(); len(jobs) != 0 {
		t.Errorf("jobs stored: %+v", jobs)
	}
}

// TestPrintHandoffs checks what berth job shows of a federated job's
// handles: the peer, and each incarnation's state, ids, nonce and error.
func TestPrintHandoffs(t *testing.T) {
	t.Parallel()
	j := seedJob("01KAAAAAAAAAAAAAAAAAAAAAA1", "b", berth.JobPending)
	d := &berth.JobDetail{Job: j, Handoffs: []*berth.Handoff{
		{JobID: j.ID, Incarnation: 1, Peer: "b", RemoteID: j.ID, Nonce: "n1", State: berth.HandoffLost, RemoteJobID: "01KBBBBBBBBBBBBBBBBBBBBBB1", LastError: "unheard for 1h"},
		{JobID: j.ID, Incarnation: 2, Peer: "b", RemoteID: j.ID, Nonce: "n2", State: berth.HandoffPending},
	}}
	var out strings.Builder
	printHandoffs(&out, d)
	rows := fields(out.String())
	if len(rows) != 6 || strings.Join(rows[0], " ") != "Cluster: b (handed to this federation peer)" || strings.Join(rows[2], " ") != "Handoffs:" ||
		strings.Join(rows[4], " ") != "1 b lost "+j.ID+" 01KBBBBBBBBBBBBBBBBBBBBBB1 n1 unheard for 1h" ||
		strings.Join(rows[5], " ") != "2 b pending_handoff "+j.ID+" - n2 -" {
		t.Errorf("printHandoffs:\n%s", out.String())
	}
	out.Reset()
	printHandoffs(&out, &berth.JobDetail{Job: j})
	if !strings.Contains(out.String(), "Handoff:   none yet") {
		t.Errorf("printHandoffs of a job not yet handed off:\n%s", out.String())
	}
}
