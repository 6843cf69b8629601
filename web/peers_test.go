package web_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/web"
)

// peerStatuses is a federation manager's view of its peers, as the test
// sets it.
type peerStatuses map[string]berth.PeerStatus

func (p peerStatuses) Status(name string) berth.PeerStatus { return p[name] }

func TestPeersAndFederatedJobs(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	h100 := []berth.GPU{{Model: "H100"}, {Model: "H100", Index: 1}}
	statuses := peerStatuses{"b": {State: berth.PeerReady, LastContact: now, LastSync: now.Add(-time.Minute), Lag: berth.Duration(3 * time.Second),
		ActiveJobs: 1, Capacity: &berth.PeerCapacity{Workers: []berth.PeerWorker{{GPUs: h100, FreeGPUs: 1}}}}}
	fed := &berth.Job{ID: "01KAAAAAAAAAAAAAAAAAAAAAA1", JobSpec: berth.DefaultJobSpec(), State: berth.JobPending, CreatedAt: now,
		Reason: "on b: no worker serves queue \"default\""}
	fed.Name, fed.User, fed.Command, fed.Cluster = "handed", "alice", berth.Argv{"true"}, "b"
	d := newSeededDash(t, "", web.Config{PeerStatuses: statuses, Now: func() time.Time { return now }}, func(st *sqlite.Store) {
		if err := st.Write(context.Background(), &store.Batch{Jobs: []*berth.Job{fed}}); err != nil {
			t.Fatal(err)
		}
	})
	admin := d.tokens[auth.RoleAdmin]
	local := d.submit("bob", "local", "cpu", 0)

	body := d.page("/peers", admin)
	wantIn(t, "peers without any", body, "<h1>Peers</h1>", "No peer. Add one with", `<a href="/peers" aria-current="page">Peers</a>`)
	for _, p := range []*berth.Peer{{Name: "b", URL: "https://127.0.0.1:7443", Token: "peer-secret"}, {Name: "c", URL: "http://127.0.0.1:7444", Token: "peer-secret"}} {
		if err := d.ctl.PutPeer(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	body = d.page("/peers", admin)
	wantNotIn(t, "peers", body, "peer-secret")
	if got := cells(row(t, body, `data-peer="b"`)); got[0] != "b" || got[1] != "https://127.0.0.1:7443" || got[2] != "ready" || got[3] != "3s" ||
		got[4] != "H100 1/2" || got[5] != "1m ago" || got[6] != "1" || got[8] != "1m, 1h" {
		t.Errorf("peer b's row = %q", got)
	}
	if got := cells(row(t, body, `data-peer="c"`)); got[2] != "new" || got[3] != "—" || got[4] != "—" || got[5] != "never" {
		t.Errorf("peer c, never heard from = %q", got)
	}
	for _, role := range []auth.Role{auth.RoleViewer, auth.RoleOperator} {
		if status, _ := d.get("/peers", d.tokens[role]); status != http.StatusForbidden {
			t.Errorf("%s GET /peers: %d, want 403", role, status)
		}
		wantNotIn(t, string(role)+"'s nav", d.page("/", d.tokens[role]), `<a href="/peers">`)
	}

	// The jobs page: a Cluster column once a listed job has one.
	body = d.page("/jobs", admin)
	wantIn(t, "jobs", body, `<th scope="col">Cluster</th>`)
	if got := cells(row(t, body, `data-job="`+fed.ID+`"`)); got[5] != "b" {
		t.Errorf("federated job's row = %q, want cluster b", got)
	}
	if got := cells(row(t, body, `data-job="`+local.ID+`"`)); got[5] != "local" {
		t.Errorf("local job's row = %q, want local", got)
	}
	wantNotIn(t, "local jobs only", d.page("/jobs?queue=cpu", admin), `<th scope="col">Cluster</th>`)

	// The job page: the peer, its reason while it waits, the handoffs.
	body = d.page("/jobs/"+fed.ID, admin)
	wantIn(t, "federated job", body, `<dd id="job-cluster">b `, "waiting: <span id=\"job-reason\">", "on b: no worker serves queue", `<table id="handoffs">`)
	wantNotIn(t, "local job", d.page("/jobs/"+local.ID, admin), "job-cluster", `id="handoffs"`)
}
