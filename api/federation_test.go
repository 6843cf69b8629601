package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/federation"
	"github.com/berth-dev/berth/postgres"
	"github.com/berth-dev/berth/postgres/pgtest"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/wire"
)

// gatedStore is a controller's store that can hold the next batch that
// receives a job before writing it (not yet durable), and reports each
// handoff lookup that misses.
type gatedStore struct {
	controller.Store
	hold    atomic.Bool
	held    chan struct{} // closed once the batch is held
	release chan struct{} // closed to write it
	misses  chan struct{} // one per ReceivedJobID that found nothing (the first 64)
}

func newGatedStore() *gatedStore {
	return &gatedStore{held: make(chan struct{}), release: make(chan struct{}), misses: make(chan struct{}, 64)}
}

func (g *gatedStore) Write(ctx context.Context, b *store.Batch) error {
	if b.Federation != nil && len(b.Federation.Received) > 0 && g.hold.CompareAndSwap(true, false) {
		close(g.held)
		<-g.release
	}
	return g.Store.Write(ctx, b)
}

func (g *gatedStore) ReceivedJobID(ctx context.Context, origin, remoteID, nonce string) (string, error) {
	id, err := g.Store.ReceivedJobID(ctx, origin, remoteID, nonce)
	if berth.ErrorCode(err) == berth.ECodeNotFound {
		select {
		case g.misses <- struct{}{}:
		default: // a test that does not count them
		}
	}
	return id, err
}

// peerServer is a cluster that receives handoffs: it trusts loopback
// clients as admins (agents register so), maps origin a to user alice
// (--peer-user a=alice), and holds peer tokens for origins a and b and a
// user token.
type peerServer struct {
	*server
	gate       *gatedStore
	a, b, user string
}

func startPeerServer(t *testing.T, edit func(*controller.Config)) *peerServer {
	t.Helper()
	gate := newGatedStore()
	st, ctl, sec := startController(t, t.TempDir(), peerSecurity(t), gate.edit(edit))
	return newPeerServer(t, st, ctl, sec, gate)
}

// startPeerServerOn is startPeerServer on the store st.
func startPeerServerOn(t *testing.T, st store.Store, edit func(*controller.Config)) *peerServer {
	t.Helper()
	gate := newGatedStore()
	ctl, sec := startControllerOn(t, st, peerSecurity(t), gate.edit(edit))
	return newPeerServer(t, st, ctl, sec, gate)
}

// peerSecurity trusts loopback clients as admins.
func peerSecurity(t *testing.T) func(store.Store) *api.Security {
	return func(st store.Store) *api.Security { return apitest.Security(t, st, auth.RoleAdmin) }
}

// edit returns the config edit of a peer server: origin a mapped to
// alice, the store behind g, then edit's.
func (g *gatedStore) edit(edit func(*controller.Config)) func(*controller.Config) {
	return func(cfg *controller.Config) {
		cfg.PeerUsers = map[string]string{"a": "alice"}
		g.Store, cfg.Store = cfg.Store, g
		if edit != nil {
			edit(cfg)
		}
	}
}

// newPeerServer serves ctl and makes the tokens of a peerServer.
func newPeerServer(t *testing.T, st store.Store, ctl *controller.Controller, sec *api.Security, gate *gatedStore) *peerServer {
	t.Helper()
	hs := httptest.NewServer(api.New(ctl, st, sec, nil))
	t.Cleanup(hs.Close)
	p := &peerServer{server: &server{t: t, url: hs.URL, ctl: ctl, st: st, sec: sec}, gate: gate}
	p.a = apitest.Token(t, sec, "a", auth.RolePeer, "")
	p.b = apitest.Token(t, sec, "b", auth.RolePeer, "")
	p.user = apitest.Token(t, sec, "alice", auth.RoleUser, "")
	return p
}

// handoff posts a handoff of job (a JSON spec) as token and returns the
// status, the answer and the body.
func (p *peerServer) handoff(token, remoteID, nonce, job string) (int, berth.HandoffResponse, []byte) {
	p.t.Helper()
	body := `{"remote_id":"` + remoteID + `","nonce":"` + nonce + `","job":` + job + `}`
	status, _, data := p.doAuth("POST", "/api/v1/federation/handoffs", body, token)
	var resp berth.HandoffResponse
	if status < 300 {
		if err := json.Unmarshal(data, &resp); err != nil {
			p.t.Fatalf("handoff answer %s: %v", data, err)
		}
	}
	return status, resp, data
}

// job reads job id as token, requiring 200.
func (p *peerServer) job(id, token string) *berth.JobDetail {
	p.t.Helper()
	status, _, data := p.doAuth("GET", "/api/v1/jobs/"+id, "", token)
	var d berth.JobDetail
	if status != http.StatusOK || json.Unmarshal(data, &d) != nil {
		p.t.Fatalf("GET job %s: %d %s", id, status, data)
	}
	return &d
}

const handedJob = `{"command":["sleep","100"],"user":"mallory","cluster":"elsewhere","resources":{"gpus":64}}`

// TestFederationHandoffCreatesOneJob: a handoff creates one job, running
// as the user the peer maps the origin to (not the one the spec names),
// marked with its origin, held though nothing fits it now; a repeat of
// (origin, remote id, nonce) returns it and creates nothing; a new nonce,
// or another origin, creates a new job (an unmapped origin's runs as the
// origin). A peer reads the jobs it handed over, logs included, and no
// other.
func TestFederationHandoffCreatesOneJob(t *testing.T) {
	t.Parallel()
	checkHandoffs(t, startPeerServer(t, nil))
}

// checkHandoffs is TestFederationHandoffCreatesOneJob on p.
func checkHandoffs(t *testing.T, p *peerServer) {
	status, first, data := p.handoff(p.a, "a-1", "n1", handedJob)
	if status != http.StatusCreated || first.JobID == "" || first.State != berth.JobPending || first.Duplicate {
		t.Fatalf("handoff: %d %s, want 201 with a pending job", status, data)
	}
	d := p.job(first.JobID, p.a)
	if d.User != "alice" || d.Cluster != "" || d.Origin == nil || *d.Origin != (berth.JobOrigin{Cluster: "a", RemoteID: "a-1", Nonce: "n1"}) {
		t.Errorf("received job runs as %q on cluster %q with origin %+v; want alice, local, origin a/a-1/n1", d.User, d.Cluster, d.Origin)
	}
	status, again, data := p.handoff(p.a, "a-1", "n1", handedJob)
	if status != http.StatusOK || again.JobID != first.JobID || !again.Duplicate {
		t.Errorf("repeat: %d %s, want 200 duplicate of %s", status, data, first.JobID)
	}
	status, renewed, _ := p.handoff(p.a, "a-1", "n2", handedJob)
	if status != http.StatusCreated || renewed.JobID == first.JobID || renewed.Duplicate {
		t.Errorf("new nonce: %d %+v, want 201 and a new job", status, renewed)
	}
	status, fromB, _ := p.handoff(p.b, "a-1", "n1", handedJob)
	if status != http.StatusCreated || fromB.JobID == first.JobID {
		t.Fatalf("same ids from origin b: %d %+v, want 201 and a new job", status, fromB)
	}
	if d := p.job(fromB.JobID, p.b); d.User != "b" {
		t.Errorf("origin b's job runs as %q, want b (no mapping: the origin's name)", d.User)
	}
	if n := len(p.list("?limit=0").Jobs); n != 3 {
		t.Errorf("%d jobs stored, want 3", n)
	}
	if status, _, _ := p.doAuth("GET", "/api/v1/jobs/"+first.JobID+"/logs", "", p.a); status != http.StatusOK {
		t.Errorf("origin a reads its job's logs: %d, want 200", status)
	}
	for _, path := range []string{"/api/v1/jobs/" + first.JobID, "/api/v1/jobs/" + first.JobID + "/logs"} {
		status, ctype, data := p.doAuth("GET", path, "", p.b)
		checkError(t, status, ctype, data, http.StatusForbidden, berth.ECodeForbidden, "")
	}
	// alice's own job is hers, not origin a's.
	own := p.submit(`{"command":["true"],"user":"alice"}`, http.StatusCreated)[0]
	status, ctype, data := p.doAuth("GET", "/api/v1/jobs/"+own.ID, "", p.a)
	checkError(t, status, ctype, data, http.StatusForbidden, berth.ECodeForbidden, "")
}

// TestFederationHandoffRepeatBeforeDurable: a repeat that arrives while
// the first delivery's job is written but not yet durable (the store
// does not have it yet) gets that job, once durable, and creates none.
func TestFederationHandoffRepeatBeforeDurable(t *testing.T) {
	t.Parallel()
	// No housekeeping tick: the first reception stays in memory however
	// long the repeat takes to reach the loop.
	p := startPeerServer(t, func(cfg *controller.Config) { cfg.Housekeeping = time.Hour })
	p.gate.hold.Store(true)
	type answer struct {
		status int
		resp   berth.HandoffResponse
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() {
		status, resp, _ := p.handoff(p.a, "a-1", "n1", handedJob)
		first <- answer{status, resp}
	}()
	<-p.gate.misses // the first delivery's lookup
	<-p.gate.held   // its job written, not yet durable
	go func() {
		status, resp, _ := p.handoff(p.a, "a-1", "n1", handedJob)
		second <- answer{status, resp}
	}()
	<-p.gate.misses // the repeat's lookup missed: not in the store yet
	close(p.gate.release)
	a, b := <-first, <-second
	if a.status != http.StatusCreated || b.status != http.StatusOK || !b.resp.Duplicate || b.resp.JobID != a.resp.JobID {
		t.Errorf("first %d %+v, repeat %d %+v; want 201, then 200 duplicate of the same job", a.status, a.resp, b.status, b.resp)
	}
	if len(p.gate.misses) != 0 {
		t.Errorf("the repeat looked the store up again: it was not found in memory")
	}
	if n := len(p.list("?limit=0").Jobs); n != 1 {
		t.Errorf("%d jobs stored, want 1", n)
	}
}

// TestFederationEndpointsArePeersOnly: every federation endpoint refuses
// a user's token and an admin's (loopback) with 403, and nothing is
// created.
func TestFederationEndpointsArePeersOnly(t *testing.T) {
	t.Parallel()
	p := startPeerServer(t, nil)
	handoff := `{"remote_id":"r","nonce":"n","job":{"command":["true"]}}`
	for _, who := range []struct{ name, token string }{{"user", p.user}, {"admin", ""}} {
		for _, ep := range []struct{ method, path, body string }{
			{"POST", "/api/v1/federation/handoffs", handoff},
			{"GET", "/api/v1/federation/changes", ""},
			{"POST", "/api/v1/federation/cancels", `{"remote_id":"r","nonce":"n","version":1}`},
			{"GET", "/api/v1/federation/capacity", ""},
		} {
			status, ctype, data := p.doAuth(ep.method, ep.path, ep.body, who.token)
			if status != http.StatusForbidden || !strings.Contains(string(data), "peer") {
				t.Errorf("%s %s as %s: %d %s, want 403 naming peer", ep.method, ep.path, who.name, status, data)
				continue
			}
			checkError(t, status, ctype, data, http.StatusForbidden, berth.ECodeForbidden, "")
		}
	}
	if n := len(p.list("?limit=0").Jobs); n != 0 {
		t.Errorf("%d jobs stored, want none", n)
	}
}

// TestFederationRefusesBadInput: a submission that carries origin is
// refused on origin, a handoff without a nonce or with an invalid spec
// on the field (job.…), and nothing is stored.
func TestFederationRefusesBadInput(t *testing.T) {
	t.Parallel()
	p := startPeerServer(t, nil)
	status, ctype, data := p.doAuth("POST", "/api/v1/jobs",
		`{"command":["true"],"origin":{"cluster":"a","remote_id":"r","nonce":"n"}}`, p.user)
	checkError(t, status, ctype, data, http.StatusBadRequest, berth.ECodeInvalid, "origin")
	for _, tt := range []struct{ remoteID, nonce, job, field string }{
		{"r", "", `{"command":["true"]}`, "nonce"},
		{"", "n", `{"command":["true"]}`, "remote_id"},
		{"r", "n", `{"command":["true"],"resources":{"gpus":-1}}`, "job.resources.gpus"},
		{"r", "n", `{"command":["true"],"backend":"nowhere"}`, "job.backend"},
	} {
		status, _, data := p.handoff(p.a, tt.remoteID, tt.nonce, tt.job)
		checkError(t, status, "application/json", data, http.StatusBadRequest, berth.ECodeInvalid, tt.field)
	}
	if n := len(p.list("?limit=0").Jobs); n != 0 {
		t.Errorf("%d jobs stored, want none", n)
	}
}

// TestFederationReceivedJobsHaveTheirCreationRow: every received job in
// the store has its creation row in the changelog (written in its
// batch), its first, pending, the one its handoff answered.
func TestFederationReceivedJobsHaveTheirCreationRow(t *testing.T) {
	t.Parallel()
	p := startPeerServer(t, nil)
	created := map[string]berth.ChangeCursor{} // by job: the creation row its handoff answered
	for _, nonce := range []string{"n1", "n2", "n3"} {
		status, h, data := p.handoff(p.a, "a-"+nonce, nonce, handedJob)
		if status != http.StatusCreated {
			t.Fatalf("handoff: %d %s", status, data)
		}
		created[h.JobID] = h.CreateRow
	}
	p.submit(`{"command":["true"]}`, http.StatusCreated) // local: no row
	ctx := context.Background()
	rows, err := p.st.Changelog(ctx, "a", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]berth.RemoteJob{}
	for _, r := range rows {
		if _, ok := first[r.Job.JobID]; !ok {
			first[r.Job.JobID] = r.Job
			if c := created[r.Job.JobID]; c.Seq != r.Seq || c.Tag != r.Tag || c.Epoch == "" {
				t.Errorf("job %s: handoff answered creation row %+v, its first row is %d/%s", r.Job.JobID, c, r.Seq, r.Tag)
			}
		}
	}
	received := 0
	for _, j := range p.list("?limit=0").Jobs {
		if j.Origin == nil {
			continue
		}
		received++
		if r, ok := first[j.ID]; !ok || r.State != berth.JobPending || r.RemoteID != j.Origin.RemoteID || r.Tombstone {
			t.Errorf("job %s: first changelog row %+v (found %v), want its creation, pending", j.ID, r, ok)
		}
	}
	if received != 3 || len(first) != 3 {
		t.Errorf("%d received jobs, rows of %d; want 3 each", received, len(first))
	}
}

// TestFederationCancel: a cancel of a received job ends it and echoes
// its version; again, once ended, it answers the end; a cancel of a job
// the peer does not know (or another origin's) is 404, which satisfies
// the origin.
func TestFederationCancel(t *testing.T) {
	t.Parallel()
	p := startPeerServer(t, nil)
	_, h, _ := p.handoff(p.a, "a-1", "n1", handedJob)
	cancel := func(token, remoteID string, version int) (int, string, []byte) {
		body := `{"remote_id":"` + remoteID + `","nonce":"n1","version":` + string(rune('0'+version)) + `}`
		return p.doAuth("POST", "/api/v1/federation/cancels", body, token)
	}
	for v := 1; v <= 2; v++ {
		status, _, data := cancel(p.a, "a-1", v)
		var resp berth.FederationCancelResponse
		if status != http.StatusOK || json.Unmarshal(data, &resp) != nil || resp.Version != v || resp.State != berth.JobCancelled {
			t.Errorf("cancel version %d: %d %s, want 200 cancelled echoing the version", v, status, data)
		}
	}
	if d := p.job(h.JobID, p.a); d.State != berth.JobCancelled {
		t.Errorf("job %s, want cancelled", d.State)
	}
	for _, tt := range []struct{ who, token, remoteID string }{{"a", p.a, "unknown"}, {"b", p.b, "a-1"}} {
		status, ctype, data := cancel(tt.token, tt.remoteID, 1)
		checkError(t, status, ctype, data, http.StatusNotFound, berth.ECodeNotFound, "remote_id")
	}
	rows, err := p.st.Changelog(context.Background(), "a", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if last := rows[len(rows)-1].Job; !last.Tombstone || last.State != berth.JobCancelled {
		t.Errorf("last changelog row %+v, want the tombstone of its cancel", last)
	}
}

// TestFederationCapacity: the capability heartbeat lists each worker's
// shape and free GPUs.
func TestFederationCapacity(t *testing.T) {
	t.Parallel()
	p := startPeerServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	gpus := []berth.GPU{{Index: 0, Model: "H100", Memory: 80 << 30}, {Index: 1, Model: "H100", Memory: 80 << 30}}
	p.registerAgent(ctx, &wire.Register{Version: wire.Version, WorkerID: "w1", Host: "h1", Queues: []string{"gpu"},
		CPUs: 32, Memory: 256 << 30, Slots: 4, GPUs: gpus, Labels: map[string]string{"zone": "z1"}})
	status, _, data := p.doAuth("GET", "/api/v1/federation/capacity", "", p.a)
	var c berth.PeerCapacity
	if status != http.StatusOK || json.Unmarshal(data, &c) != nil {
		t.Fatalf("capacity: %d %s", status, data)
	}
	if len(c.Workers) != 1 || c.At.IsZero() {
		t.Fatalf("capacity %s, want one worker and its time", data)
	}
	w := c.Workers[0]
	if w.FreeGPUs != 2 || len(w.GPUs) != 2 || w.GPUs[0].Model != "H100" || w.CPUs != 32 || w.Memory != 256<<30 ||
		w.Labels["zone"] != "z1" || len(w.Queues) != 1 || w.Queues[0] != "gpu" || w.Off {
		t.Errorf("worker %+v, want 2 free H100s of 2, 32 CPUs, 256GiB, zone z1, queue gpu, on", w)
	}
}

// pull pulls origin's changes as token with cursor and query, requiring
// 200.
func (p *peerServer) pull(token string, cursor berth.ChangeCursor, query string) *berth.FederationChanges {
	p.t.Helper()
	path := "/api/v1/federation/changes?cursor=" + federation.FormatCursor(cursor) + query
	status, _, data := p.doAuth("GET", path, "", token)
	var ch berth.FederationChanges
	if status != http.StatusOK || json.Unmarshal(data, &ch) != nil {
		p.t.Fatalf("GET %s: %d %s", path, status, data)
	}
	return &ch
}

// summary is what a test compares of an answer's jobs: remote id, state
// and tombstone, in order.
func summary(jobs []berth.RemoteJob) string {
	var b strings.Builder
	for _, j := range jobs {
		b.WriteString(j.RemoteID + ":" + string(j.State))
		if j.Tombstone {
			b.WriteString("†")
		}
		b.WriteString(" ")
	}
	return strings.TrimSpace(b.String())
}

// TestFederationChanges: a pull without a cursor is answered in full
// (the origin's active jobs, not another origin's); with the cursor it
// got, incrementally (the changes since, oldest first, a tombstone for a
// job's end, More past the limit), which acknowledges it; a cursor whose
// tag differs is stale: in full again, with the tombstones; once
// acknowledged rows are pruned, an old cursor is stale, and the full
// answer still holds the tombstone (kept for the retention, acknowledged
// or not). A malformed cursor is refused on cursor.
func TestFederationChanges(t *testing.T) {
	t.Parallel()
	checkChanges(t, startPeerServer(t, noTick))
}

// noTick sets no housekeeping tick: no reason rows, no pruning but a
// test's.
func noTick(cfg *controller.Config) { cfg.Housekeeping = time.Hour }

// checkChanges is TestFederationChanges on p, whose config is noTick's.
func checkChanges(t *testing.T, p *peerServer) {
	ctx := context.Background()
	for _, id := range []string{"r1", "r2"} {
		p.handoff(p.a, id, "n", handedJob)
	}
	p.handoff(p.b, "b1", "n", handedJob)
	full := p.pull(p.a, berth.ChangeCursor{}, "")
	if !full.Full || summary(full.Jobs) != "r1:pending r2:pending" || full.Cursor.Epoch == "" || full.Cursor.Tag == "" {
		t.Fatalf("first pull %+v, want full: r1, r2 pending, and a cursor", full)
	}
	cancel := `{"remote_id":"r1","nonce":"n","version":1}`
	if status, _, data := p.doAuth("POST", "/api/v1/federation/cancels", cancel, p.a); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, data)
	}
	p.handoff(p.a, "r3", "n", handedJob)
	p.handoff(p.b, "b2", "n", handedJob)
	inc := p.pull(p.a, full.Cursor, "")
	if inc.Full || inc.From != full.Cursor || summary(inc.Jobs) != "r1:cancelled† r3:pending" || inc.More {
		t.Fatalf("incremental pull %+v, want from the first cursor: r1 cancelled (tombstone), r3 pending", inc)
	}
	if ack, err := p.st.OriginAck(ctx, "a"); err != nil || ack.Seq != full.Cursor.Seq || ack.Tag != full.Cursor.Tag {
		t.Errorf("ack stored %+v, %v; want the cursor pulled with, %+v", ack, err, full.Cursor)
	}
	if page := p.pull(p.a, full.Cursor, "&limit=1"); summary(page.Jobs) != "r1:cancelled†" || !page.More {
		t.Errorf("pull of 1 row: %+v, want r1's tombstone and more", page)
	}
	stale := inc.Cursor
	stale.Tag = "00000000"
	if again := p.pull(p.a, stale, ""); !again.Full || summary(again.Jobs) != "r2:pending r3:pending r1:cancelled†" {
		t.Errorf("pull with a cursor of another tag: %+v, want full: r2, r3 and r1's tombstone (not acknowledged)", again)
	}
	p.pull(p.a, inc.Cursor, "") // acknowledges the tombstone
	if n, err := p.ctl.PruneChangelog(ctx); err != nil || n == 0 {
		t.Fatalf("prune: %d rows, %v; want the acknowledged ones", n, err)
	}
	if old := p.pull(p.a, full.Cursor, ""); !old.Full || summary(old.Jobs) != "r2:pending r3:pending r1:cancelled†" {
		t.Errorf("pull with a cursor since pruned: %+v, want full: r2, r3 and r1's tombstone (kept for the retention)", old)
	}
	if fromB := p.pull(p.b, berth.ChangeCursor{}, ""); summary(fromB.Jobs) != "b1:pending b2:pending" {
		t.Errorf("origin b's pull: %+v, want b1 and b2 only", fromB)
	}
	status, ctype, data := p.doAuth("GET", "/api/v1/federation/changes?cursor=nonsense", "", p.a)
	checkError(t, status, ctype, data, http.StatusBadRequest, berth.ECodeInvalid, "cursor")
}

// TestFederationOnPostgres: handoffs and changes pulls on PostgreSQL, as
// on SQLite.
func TestFederationOnPostgres(t *testing.T) {
	t.Parallel()
	for name, check := range map[string]func(*testing.T, *peerServer){"handoffs": checkHandoffs, "changes": checkChanges} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, err := postgres.Open(context.Background(), pgtest.NewDatabase(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			check(t, startPeerServerOn(t, st, noTick))
		})
	}
}
