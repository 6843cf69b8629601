package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// TestFederationRoutesByCapacityAndPin submits through berth submit on A
// (a CPU-only agent) with peers B (H100s) and C (A100s): an H100 job goes
// to B, an A100 job to C, a CPU job stays on A's own agent, a job pinned
// with --cluster c goes to C although A could run it, and a GPU type no
// cluster has waits on A saying what each peer lacks. An unknown pin is
// refused naming cluster. Every federated job is mirrored to its end, and
// berth jobs shows where each ran (CLUSTER; "cluster" in -o json).
func TestFederationRoutesByCapacityAndPin(t *testing.T) {
	t.Parallel()
	f := newFederation(t, fedOptions{})
	submit := func(args ...string) string {
		t.Helper()
		return strings.TrimSpace(f.a.cli(append(append([]string{"submit"}, args...), "--", "true")...))
	}
	h100 := submit("--gpus", "1", "--gpu-type", "H100")
	a100 := submit("--gpus", "1", "--gpu-type", "A100")
	cpu := submit()
	pinned := submit("--cluster", "c")
	want := map[string]*cluster{h100: f.b, a100: f.c, pinned: f.c}
	names := map[*cluster]string{f.b: "b", f.c: "c"}
	for id, peer := range want {
		d, r := f.awaitMirror(peer, id)
		if d.State != berth.JobSucceeded || d.Cluster != names[peer] || len(d.Handoffs) != 1 {
			t.Fatalf("job %s on A: %s, cluster %q, %d handles; want succeeded on %s with one", id, d.State, d.Cluster, len(d.Handoffs), names[peer])
		}
		if h := d.Handoffs[0]; h.State != berth.HandoffDone || h.Peer != names[peer] || h.RemoteJobID != r.ID || h.RemoteID != id {
			t.Errorf("job %s's handle: %+v; want handed_off to %s as %s (the peer's %s)", id, h, names[peer], id, r.ID)
		}
		if r.User != "a" || len(d.AttemptList) != 0 {
			t.Errorf("job %s ran on %s as user %q with %d attempts on A; want user a (the peer token's name) and none on A",
				id, names[peer], r.User, len(d.AttemptList))
		}
	}
	d := f.a.awaitState(cpu, time.Minute, berth.JobSucceeded, berth.JobFailed)
	if d.State != berth.JobSucceeded || d.Cluster != "" || len(d.Handoffs) != 0 || len(d.AttemptList) != 1 || d.AttemptList[0].Host != "a1" {
		t.Fatalf("CPU job %s: %s, cluster %q, %d handles; want it run on A's own a1", cpu, d.State, d.Cluster, len(d.Handoffs))
	}
	for _, peer := range []*cluster{f.b, f.c} {
		if got := peer.received("a", cpu); len(got) != 0 {
			t.Errorf("the CPU job was also handed to %s: %v", names[peer], got[0].ID)
		}
	}

	// No cluster has a V100: the job waits on A, saying what each peer lacks.
	v100 := submit("--gpus", "1", "--gpu-type", "V100")
	d = f.a.job(v100)
	if d.State != berth.JobPending || d.Cluster != "" || len(d.Handoffs) != 0 ||
		!strings.Contains(d.Reason, "V100") || !regexp.MustCompile(`\bb\b`).MatchString(d.Reason) || !regexp.MustCompile(`\bc\b`).MatchString(d.Reason) {
		t.Errorf("V100 job: %s, cluster %q, %d handles, reason %q; want pending on A with a reason naming b and c", d.State, d.Cluster, len(d.Handoffs), d.Reason)
	}
	_, errOut, err := runCLI(t, "", "", "--server", f.a.url, "submit", "--cluster", "nowhere", "--", "true")
	if exitCode(err) == 0 || !strings.Contains(errOut, "cluster") {
		t.Errorf("submit --cluster nowhere: %v, %q; want refused naming cluster", err, errOut)
	}

	var jobs []berth.Job
	out := f.a.cli("-o", "json", "jobs", "--expand")
	if err := json.Unmarshal([]byte(out), &jobs); err != nil {
		t.Fatalf("jobs -o json: %v\n%s", err, out)
	}
	clusters := map[string]string{}
	for _, j := range jobs {
		clusters[j.ID] = j.Cluster
	}
	if clusters[h100] != "b" || clusters[a100] != "c" || clusters[pinned] != "c" || clusters[cpu] != "" {
		t.Errorf("berth jobs -o json clusters: %v; want %s b, %s c, %s c, %s local", clusters, h100, a100, pinned, cpu)
	}
	if !regexp.MustCompile(`"cluster": "b"`).MatchString(out) {
		t.Errorf("berth jobs -o json has no \"cluster\": \"b\":\n%s", out)
	}
	table := f.a.cli("jobs")
	if !strings.Contains(strings.SplitN(table, "\n", 2)[0], "CLUSTER") ||
		!regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(h100)+`\s.*\bb\b`).MatchString(table) {
		t.Errorf("berth jobs:\n%s\nwant a CLUSTER column with b on %s's row", table, h100)
	}
}

// killedOrigin runs a job pinned to B whose delivery the proxy holds as
// hold says, kills A with SIGKILL once the proxy caught it, restarts A,
// then releases the held delivery: B must run the job exactly once, and A
// mirror it to its end.
func killedOrigin(t *testing.T, response bool) {
	f := newFederation(t, fedOptions{noC: true})
	marks := filepath.Join(t.TempDir(), "marks")
	h := f.proxy.Hold(response, isHandoff)
	req := markedJob(marks, "")
	req.Cluster = "b"
	j := f.a.submit(req)[0]
	h.Await(t, time.Minute, "delivery")
	// The handle is durable before it is sent.
	if d := f.a.job(j.ID); len(d.Handoffs) != 1 || d.Handoffs[0].State != berth.HandoffPending {
		t.Fatalf("job %s while its delivery is held: handles %+v; want one pending_handoff", j.ID, d.Handoffs)
	}
	if response && len(f.b.received("a", j.ID)) != 1 {
		t.Fatalf("B answered the delivery of %s but holds no job for it", j.ID)
	}
	f.a.server.kill()
	f.a.startServer()
	if !response {
		// A's own re-delivery, after its restart, goes through; the held
		// one reaches B late.
		f.a.awaitHandoff(j.ID, berth.HandoffDone)
	}
	late := h.Release(t)
	if late.Status != http.StatusCreated && late.Status != http.StatusOK {
		t.Fatalf("B answered the held delivery %d %s", late.Status, late.Body)
	}
	d, r := f.awaitMirror(f.b, j.ID)
	if d.State != berth.JobSucceeded || len(d.Handoffs) != 1 || d.Handoffs[0].State != berth.HandoffDone || d.Handoffs[0].RemoteJobID != r.ID {
		t.Fatalf("job %s on A: %s, handles %+v; want succeeded with one handed_off to %s", j.ID, d.State, d.Handoffs, r.ID)
	}
	if got := f.b.received("a", j.ID); len(got) != 1 {
		t.Fatalf("B holds %d jobs for %s, want 1", len(got), j.ID)
	}
	if n := runs(t, marks); n != 1 {
		t.Fatalf("the job ran %d times, want once", n)
	}
	created, dups := f.proxy.handoffAnswers(t)
	if created != 1 || dups < 1 {
		t.Errorf("deliveries: %d created a job, %d were repeats; want 1 and at least 1", created, dups)
	}
}

// TestFederationOriginKilledBeforePeerAck kills A between persisting a
// handle and B's acknowledgement: the proxy holds the delivery, A dies
// and restarts and delivers again, then the first delivery reaches B.
func TestFederationOriginKilledBeforePeerAck(t *testing.T) {
	t.Parallel()
	killedOrigin(t, false)
}

// TestFederationOriginKilledBeforeAckRecorded kills A between B's
// acknowledgement and A recording it: B created the job, its answer is
// held, A dies and restarts and delivers again.
func TestFederationOriginKilledBeforeAckRecorded(t *testing.T) {
	t.Parallel()
	killedOrigin(t, true)
}

// TestFederationPeerDownPastRouteTimeout stops B, running a job of A's,
// for longer than its route timeout: A marks it unreachable and routes
// nothing to it (an H100 job waits on A), B's agent finishes the job
// meanwhile; B restarts, A mirrors the job's end and hands the waiting
// job to B. Each ran once.
func TestFederationPeerDownPastRouteTimeout(t *testing.T) {
	t.Parallel()
	f := newFederation(t, fedOptions{noC: true, bServer: []string{"--lease", "2m"}, bPeer: []string{"--route-timeout", "2s"}})
	dir := t.TempDir()
	gate, marks1, marks2 := filepath.Join(dir, "gate"), filepath.Join(dir, "marks1"), filepath.Join(dir, "marks2")
	h100 := func(req *berth.SubmitRequest) *berth.SubmitRequest {
		req.Resources.GPUs, req.Resources.GPUType = 1, "H100"
		return req
	}
	j1 := f.a.submit(h100(markedJob(marks1, gate)))[0]
	d := f.a.awaitHandoff(j1.ID, berth.HandoffDone)
	f.b.awaitState(d.Handoffs[0].RemoteJobID, time.Minute, berth.JobRunning)

	f.b.server.stop()
	down := time.Now()
	f.a.awaitPeer("b", berth.PeerUnreachable)
	j2 := f.a.submit(h100(markedJob(marks2, "")))[0]
	if d := f.a.job(j2.ID); d.State != berth.JobPending || d.Cluster != "" || len(d.Handoffs) != 0 {
		t.Fatalf("H100 job submitted while b is unreachable: %s, cluster %q, handles %+v; want it waiting on A", d.State, d.Cluster, d.Handoffs)
	}
	touch(t, gate) // j1 ends on B's agent while B is down
	f.b.startServer()
	up := time.Now()

	d, _ = f.awaitMirror(f.b, j1.ID)
	if d.State != berth.JobSucceeded {
		t.Fatalf("job %s: %s, want succeeded", j1.ID, d.State)
	}
	d, _ = f.awaitMirror(f.b, j2.ID)
	if d.State != berth.JobSucceeded || d.Cluster != "b" || len(d.Handoffs) != 1 {
		t.Fatalf("job %s: %s on %q, handles %+v; want succeeded on b once it came back", j2.ID, d.State, d.Cluster, d.Handoffs)
	}
	for _, m := range []string{marks1, marks2} {
		if n := runs(t, m); n != 1 {
			t.Errorf("%s: the job ran %d times, want once", filepath.Base(m), n)
		}
	}
	for _, e := range f.proxy.Answers(http.MethodPost, handoffsPath) {
		if e.At.After(down) && e.At.Before(up) {
			t.Errorf("a delivery went to b while it was down (answered %d at %s)", e.Status, e.At.Format(time.StampMilli))
		}
	}
	f.a.awaitIdlePeer("b")
}

// TestFederationPrunedChangelogResyncs keeps A from pulling B's changes
// (the proxy holds every pull, which carries A's cursor) while jobs on B
// end and new ones are handed to it and start, and B, with a tiny
// changelog retention, prunes the rows A never saw: A's cursor is stale
// when it pulls again, B answers with a full resync, and A's mirror
// converges — the ended jobs ended, the running ones running, then ended.
// Each job ran once.
func TestFederationPrunedChangelogResyncs(t *testing.T) {
	t.Parallel()
	f := newFederation(t, fedOptions{noC: true, bServer: []string{"--federation-changelog-retention", "200ms"}})
	dir := t.TempDir()
	quickGate, slowGate := filepath.Join(dir, "quick"), filepath.Join(dir, "slow")
	var quick, slow []string
	marks := func(id string) string { return filepath.Join(dir, "marks-"+id) }
	handOff := func(gate string) string {
		t.Helper()
		name := "job" + string(rune('a'+len(quick)+len(slow)))
		req := markedJob(marks(name), gate)
		req.Cluster, req.Name = "b", name
		j := f.a.submit(req)[0]
		d := f.a.awaitHandoff(j.ID, berth.HandoffDone)
		f.b.awaitState(d.Handoffs[0].RemoteJobID, time.Minute, berth.JobRunning)
		if gate == quickGate {
			quick = append(quick, j.ID)
		} else {
			slow = append(slow, j.ID)
		}
		return j.ID
	}
	for range 2 {
		handOff(quickGate)
		handOff(slowGate)
	}
	for _, id := range append(quick, slow...) {
		f.a.awaitState(id, time.Minute, berth.JobRunning) // A's cursor is past their starts
	}
	pulls := f.proxy.HoldAll(func(r *http.Request) bool { return r.URL.Path == changesPath })
	if u := pulls.Await(t, time.Minute, "changes pull"); u.Query().Get("cursor") == "" {
		t.Fatalf("A pulled %s with no cursor after mirroring four jobs", u)
	}
	touch(t, quickGate)
	for _, id := range quick {
		f.b.awaitState(f.b.received("a", id)[0].ID, time.Minute, berth.JobSucceeded)
	}
	for range 2 {
		handOff(slowGate) // rows above A's cursor that are no tombstones: pruned by age
	}
	awaitStale(t, f.proxy, pulls)
	fullBefore := fullAnswers(f.proxy)
	pulls.Release(t)
	f.a.eventually(time.Minute, "a full resync of b", func() bool { return fullAnswers(f.proxy) > fullBefore })
	for _, id := range quick {
		if d, _ := f.awaitMirror(f.b, id); d.State != berth.JobSucceeded {
			t.Fatalf("job %s after the resync: %s, want succeeded", id, d.State)
		}
	}
	for _, id := range slow {
		f.a.awaitState(id, time.Minute, berth.JobRunning)
	}
	touch(t, slowGate)
	for _, id := range slow {
		if d, _ := f.awaitMirror(f.b, id); d.State != berth.JobSucceeded || len(d.Handoffs) != 1 {
			t.Fatalf("job %s: %s with handles %+v, want succeeded with one", id, d.State, d.Handoffs)
		}
	}
	for _, id := range append(quick, slow...) {
		if n := runs(t, marks(f.a.job(id).Name)); n != 1 {
			t.Errorf("job %s ran %d times, want once", id, n)
		}
	}
}

// awaitStale waits until B, given again the changes pull pulls holds
// (as when its answer was lost: the same cursor, acknowledged already),
// answers with a full resync: it pruned rows above that cursor.
func awaitStale(t *testing.T, p *peerProxy, pulls *hold) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute) // B prunes once a minute
	for {
		e := p.Replay(pulls)
		var ch berth.FederationChanges
		if e.Status == http.StatusOK && json.Unmarshal(e.Body, &ch) == nil && ch.Full {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("B still answers A's stale cursor incrementally after 3 minutes: %d %s", e.Status, e.Body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fullAnswers counts the full resyncs the proxy carried.
func fullAnswers(p *peerProxy) int {
	n := 0
	for _, e := range p.Answers(http.MethodGet, changesPath) {
		var ch berth.FederationChanges
		if e.Status == http.StatusOK && json.Unmarshal(e.Body, &ch) == nil && ch.Full {
			n++
		}
	}
	return n
}

// TestFederationCancelRacesCompletion cancels jobs on A just as they exit
// on B: two are let go before their cancel is made; the proxy holds the
// cancels on their way to B, and two more are let go as the cancels are
// released. Whichever wins, A's mirror ends in B's state, each job ran
// once, and no cancel is left unacknowledged. A fifth, never let go, ends
// cancelled on both.
func TestFederationCancelRacesCompletion(t *testing.T) {
	t.Parallel()
	f := newFederation(t, fedOptions{noC: true})
	dir := t.TempDir()
	file := func(kind string, i int) string { return filepath.Join(dir, kind+string(rune('0'+i))) }
	var ids []string
	for i := range 5 {
		req := markedJob(file("marks", i), file("gate", i))
		req.Cluster = "b"
		ids = append(ids, f.a.submit(req)[0].ID)
	}
	for _, id := range ids {
		d := f.a.awaitHandoff(id, berth.HandoffDone)
		f.b.awaitState(d.Handoffs[0].RemoteJobID, time.Minute, berth.JobRunning)
		f.a.awaitState(id, time.Minute, berth.JobRunning)
	}
	cancels := f.proxy.HoldAll(func(r *http.Request) bool { return r.Method == http.MethodPost && r.URL.Path == cancelsPath })
	touch(t, file("gate", 0))
	touch(t, file("gate", 1))
	for _, id := range ids {
		if _, err := f.a.c.Cancel(context.Background(), id); err != nil && berth.ErrorCode(err) != berth.ECodeConflict {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	cancels.Await(t, time.Minute, "cancel")
	touch(t, file("gate", 2))
	touch(t, file("gate", 3))
	cancels.Release(t)
	outcomes := map[berth.JobState]int{}
	for i, id := range ids {
		d, r := f.awaitMirror(f.b, id)
		if d.State != berth.JobSucceeded && d.State != berth.JobCancelled || i == 4 && d.State != berth.JobCancelled {
			t.Errorf("job %d, %s: %s on A and B, want succeeded or cancelled (the last: cancelled)", i, id, d.State)
		}
		outcomes[d.State]++
		if got := f.b.received("a", id); len(got) != 1 || r.Attempts != 1 {
			t.Errorf("job %s: B holds %d jobs for it, %d attempts; want 1 and 1", id, len(got), r.Attempts)
		}
		if n := runs(t, file("marks", i)); n != 1 {
			t.Errorf("job %s ran %d times, want once", id, n)
		}
		f.a.eventually(time.Minute, "the cancel of "+id+" settled", func() bool {
			h := f.a.job(id).Handoffs[0]
			return h.CancelVersion >= 1 && h.CancelAcked >= h.CancelVersion || d.State == berth.JobSucceeded && h.CancelVersion == 0
		})
	}
	t.Logf("outcomes: %v", outcomes)
}

// TestFederationHandoffNeedsPeerToken sends B a handoff with a user token
// and with an admin token: both are 403 and create nothing; the same
// request with a peer token creates the job, run as the peer's user (the
// token's name), not the user the request names.
func TestFederationHandoffNeedsPeerToken(t *testing.T) {
	t.Parallel()
	b := newCluster(t, "--trust-loopback", "none")
	admin := readToken(t, filepath.Join(b.dir, "server", "admin.token"))
	b.c = client.New(b.url, admin, nil)
	spec := berth.DefaultJobSpec()
	spec.Command, spec.User = berth.Argv{"true"}, "root"
	body := berth.HandoffRequest{RemoteID: "J1", Nonce: "n1", Job: spec}
	for _, tok := range []*berth.IssuedToken{b.issue("mallory", "user"), b.issue("boss", "admin")} {
		c := caller{t: t, name: tok.Role + " token", url: b.url, token: tok.Secret}
		c.expect(http.StatusForbidden, http.MethodPost, handoffsPath, body)
		c.expect(http.StatusForbidden, http.MethodGet, changesPath, nil)
	}
	if n := b.jobCount(); n != 0 {
		t.Fatalf("B holds %d jobs after refused handoffs, want none", n)
	}
	peer := caller{t: t, name: "peer token", url: b.url, token: b.issue("a", "peer").Secret}
	var resp berth.HandoffResponse
	if err := json.Unmarshal(peer.expect(http.StatusCreated, http.MethodPost, handoffsPath, body), &resp); err != nil {
		t.Fatal(err)
	}
	j := b.job(resp.JobID)
	if j.User != "a" || j.Origin == nil || j.Origin.Cluster != "a" || j.Origin.RemoteID != "J1" {
		t.Fatalf("received job: user %q, origin %+v; want user a, origin a/J1", j.User, j.Origin)
	}
}

// TestFederationPeerRestoredFromOlderDatabase restores B from a copy of
// its data dir taken before A handed it more jobs: A's cursor no longer
// matches B's changelog, B answers with a full resync, and A declares the
// jobs B no longer knows lost and, their retries left, hands them again.
// The job B still knows is untouched; nothing is left waiting.
func TestFederationPeerRestoredFromOlderDatabase(t *testing.T) {
	t.Parallel()
	f := newFederation(t, fedOptions{noC: true})
	dir := t.TempDir()
	old := markedJob(filepath.Join(dir, "marks-old"), "")
	old.Cluster = "b"
	j0 := f.a.submit(old)[0]
	if d, _ := f.awaitMirror(f.b, j0.ID); d.State != berth.JobSucceeded {
		t.Fatalf("job %s: %s", j0.ID, d.State)
	}
	serverDir := filepath.Join(f.b.dir, "server")
	backup := filepath.Join(dir, "backup")
	f.b.server.stop()
	copyDir(t, serverDir, backup)
	f.b.startServer()

	gate := filepath.Join(dir, "gate")
	var ids []string
	for i := range 3 {
		req := markedJob(filepath.Join(dir, "marks"+string(rune('0'+i))), gate)
		req.Cluster, req.Retries = "b", 1
		j := f.a.submit(req)[0]
		d := f.a.awaitHandoff(j.ID, berth.HandoffDone)
		f.b.awaitState(d.Handoffs[0].RemoteJobID, time.Minute, berth.JobRunning)
		ids = append(ids, j.ID)
	}
	f.b.server.stop()
	if err := os.RemoveAll(serverDir); err != nil {
		t.Fatal(err)
	}
	copyDir(t, backup, serverDir)
	f.b.startServer()

	for _, id := range ids {
		var d *berth.JobDetail
		f.a.eventually(2*time.Minute, "job "+id+" handed to b again", func() bool {
			d = f.a.job(id)
			return len(d.Handoffs) == 2 && d.Handoffs[1].State == berth.HandoffDone
		})
		if h := d.Handoffs[0]; h.State != berth.HandoffLost || d.Handoffs[1].Nonce == h.Nonce || d.Handoffs[1].Incarnation != 2 {
			t.Errorf("job %s's handles: %+v, %+v; want the first lost and a second with a new nonce", id, h, d.Handoffs[1])
		}
	}
	touch(t, gate)
	for i, id := range ids {
		d, _ := f.awaitMirror(f.b, id)
		if d.State != berth.JobSucceeded {
			t.Errorf("job %s: %s, want succeeded on its second handoff", id, d.State)
		}
		if got := f.b.received("a", id); len(got) != 1 {
			t.Errorf("restored B holds %d jobs for %s, want 1", len(got), id)
		}
		if n := runs(t, filepath.Join(dir, "marks"+string(rune('0'+i)))); n > 2 {
			t.Errorf("job %s ran %d times, want at most twice (once per handoff)", id, n)
		}
	}
	if d := f.a.job(j0.ID); d.State != berth.JobSucceeded || len(d.Handoffs) != 1 || runs(t, filepath.Join(dir, "marks-old")) != 1 {
		t.Errorf("job %s B still knows: %s with handles %+v; want succeeded, handed off once, run once", j0.ID, d.State, d.Handoffs)
	}
	f.a.awaitIdlePeer("b")
}

// TestFederationLogsFollowThroughOrigin runs berth logs -f on A for a job
// running on B: its output streams through A (and A's link to B) while
// the job runs, and the command ends when the job does.
func TestFederationLogsFollowThroughOrigin(t *testing.T) {
	t.Parallel()
	f := newFederation(t, fedOptions{noC: true})
	gate := filepath.Join(t.TempDir(), "gate")
	req := shellJob(`echo first line; while [ ! -e ` + gate + ` ]; do sleep 0.05; done; echo second line`)
	req.Cluster = "b"
	j := f.a.submit(req)[0]
	d := f.a.awaitHandoff(j.ID, berth.HandoffDone)
	logs := start(t, "logs -f", "--server", f.a.url, "logs", "-f", j.ID)
	if _, ok := logs.out.await("first line", time.Minute); !ok {
		t.Fatalf("berth logs -f on A printed no first line while the job runs on B:\n%s", logs.out)
	}
	if !f.proxy.Saw(http.MethodGet, "/api/v1/jobs/"+d.Handoffs[0].RemoteJobID+"/logs") {
		t.Errorf("A did not read the logs from B through its link to B")
	}
	touch(t, gate)
	select {
	case <-logs.done:
	case <-time.After(time.Minute):
		t.Fatalf("berth logs -f did not end with the job:\n%s", logs.out)
	}
	if code := logs.cmd.ProcessState.ExitCode(); code != 0 || logs.out.String() != "first line\nsecond line" {
		t.Fatalf("berth logs -f: exit %d, output %q; want 0 and both lines", code, logs.out.String())
	}
}

// TestFederationPeerRemoveRefusedWhileActive: berth peer rm b is refused
// while b runs a job of A's, and b stays; once the job ended it is
// removed.
func TestFederationPeerRemoveRefusedWhileActive(t *testing.T) {
	t.Parallel()
	f := newFederation(t, fedOptions{noC: true})
	gate := filepath.Join(t.TempDir(), "gate")
	req := markedJob(filepath.Join(t.TempDir(), "marks"), gate)
	req.Cluster = "b"
	j := f.a.submit(req)[0]
	f.a.awaitHandoff(j.ID, berth.HandoffDone)
	_, errOut, err := runCLI(t, "", "", "--server", f.a.url, "peer", "rm", "b")
	if exitCode(err) == 0 || !strings.Contains(errOut, "active") || !strings.Contains(errOut, "--force") {
		t.Fatalf("peer rm b with a job on b: %v, %q; want refused, saying it has active jobs and naming --force", err, errOut)
	}
	if _, ok := f.a.peers()["b"]; !ok {
		t.Fatal("peer b is gone after a refused peer rm")
	}
	touch(t, gate)
	if d, _ := f.awaitMirror(f.b, j.ID); d.State != berth.JobSucceeded {
		t.Fatalf("job %s: %s", j.ID, d.State)
	}
	f.a.eventually(time.Minute, "peer rm b once its job ended", func() bool {
		_, _, err := runCLI(t, "", "", "--server", f.a.url, "peer", "rm", "b")
		return err == nil
	})
	if _, ok := f.a.peers()["b"]; ok {
		t.Fatal("peer b is still listed after peer rm")
	}
}
