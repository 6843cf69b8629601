package controller

import (
	"bytes"
	"crypto/rand"
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

// testKeys returns fresh secret-encryption keys.
func testKeys(t *testing.T) *auth.Keys {
	t.Helper()
	keys, err := auth.NewKeys([]byte(rand.Text() + rand.Text())[:auth.MasterKeySize])
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// startWithPeers starts a controller on the SQLite store at path that
// seals peer tokens with a vault under keys, and returns the vault too.
func startWithPeers(t *testing.T, path string, now time.Time, keys *auth.Keys) (*Controller, *auth.Vault, func()) {
	t.Helper()
	var vault *auth.Vault
	c, stop := startOnWith(t, path, now, func(cfg *Config, st *sqlite.Store) {
		v, err := auth.NewVault(t.Context(), st, keys, nil)
		if err != nil {
			t.Fatal(err)
		}
		vault, cfg.PeerTokens = v, v
	})
	return c, vault, stop
}

func peers(t *testing.T, c *Controller) []*berth.Peer {
	t.Helper()
	list, err := c.Peers(t.Context())
	if err != nil {
		t.Fatalf("Peers: %v", err)
	}
	return list
}

func TestPutPeerValidatesAndStoresNothingBad(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	c, _, _ := startWithPeers(t, filepath.Join(t.TempDir(), "berth.db"), now, testKeys(t))
	good := func() berth.Peer { return berth.Peer{Name: "b", URL: "https://127.0.0.1:7070", Token: "tok"} }
	for _, tc := range []struct {
		field string
		edit  func(*berth.Peer)
	}{
		{"name", func(p *berth.Peer) { p.Name = "B!" }},
		{"name", func(p *berth.Peer) { p.Name = "" }},
		{"url", func(p *berth.Peer) { p.URL = "" }},
		{"url", func(p *berth.Peer) { p.URL = "ftp://b:7070" }},
		{"url", func(p *berth.Peer) { p.URL = "https://b" }},
		{"url", func(p *berth.Peer) { p.URL = "https://b:7070/api" }},
		{"url", func(p *berth.Peer) { p.URL = "https://b:7070/?x=1" }},
		{"url", func(p *berth.Peer) { p.URL = "https://u:p@b:7070" }},
		{"url", func(p *berth.Peer) { p.URL = "https://b:99999" }},
		{"token", func(p *berth.Peer) { p.Token = "" }},
		{"ca_fingerprint", func(p *berth.Peer) { p.CAFingerprint = "sha256:abc" }},
		{"ca_fingerprint", func(p *berth.Peer) { p.CAFingerprint = "md5:" + string(bytes.Repeat([]byte("a"), 64)) }},
		{"route_timeout", func(p *berth.Peer) { p.RouteTimeout = berth.Duration(-time.Second) }},
		{"lost_timeout", func(p *berth.Peer) { p.LostTimeout = berth.Duration(-time.Second) }},
		{"route_timeout", func(p *berth.Peer) { p.RouteTimeout = berth.Duration(2 * time.Hour) }},
	} {
		p := good()
		tc.edit(&p)
		err := c.PutPeer(t.Context(), &p)
		if e, ok := err.(*berth.Error); !ok || e.Code != berth.ECodeInvalid || e.Field != tc.field {
			t.Errorf("PutPeer(%+v) = %v, want invalid on %s", p, err, tc.field)
		}
	}
	if list := peers(t, c); len(list) != 0 {
		t.Fatalf("bad peers stored: %+v", list)
	}
	if n := c.Bus().Last(); n != 0 {
		t.Fatalf("%d events after bad peers, want none", n)
	}
}

func TestPutPeerSealsTheTokenAndKeepsIt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	c, vault, _ := startWithPeers(t, filepath.Join(t.TempDir(), "berth.db"), now, testKeys(t))
	ctx := berth.WithActor(t.Context(), "root")

	changed := c.PeersChanged()
	p := &berth.Peer{Name: "b", URL: "https://127.0.0.1:7070", Token: "secret-b", CreatedAt: time.Unix(1, 0)}
	if err := c.PutPeer(ctx, p); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Error("PeersChanged not closed by a durable PutPeer")
	}
	want := berth.Peer{Name: "b", URL: "https://127.0.0.1:7070", RouteTimeout: berth.Duration(berth.DefaultRouteTimeout),
		LostTimeout: berth.Duration(berth.DefaultLostTimeout), CreatedAt: now, UpdatedAt: now}
	if !reflect.DeepEqual(*p, want) {
		t.Errorf("PutPeer left %+v, want %+v (no token, sealed or not)", *p, want)
	}
	list := peers(t, c)
	if len(list) != 1 || list[0].Token != "" || bytes.Contains(list[0].SealedToken, []byte("secret-b")) {
		t.Fatalf("Peers = %+v, want b with its token sealed only", list)
	}
	sealed := list[0].SealedToken
	if tok, err := vault.OpenPeerToken("b", sealed); err != nil || tok != "secret-b" {
		t.Errorf("OpenPeerToken = %q, %v; want secret-b", tok, err)
	}
	if _, err := vault.OpenPeerToken("c", sealed); err == nil {
		t.Error("b's token opened as c's")
	}
	if ev := readEvents(t, c, 0); len(ev) != 1 || ev[0].Type != berth.EventPeerSet || ev[0].Peer != "b" || ev[0].Actor != "root" {
		t.Errorf("events = %+v, want one peer.set of b by root", ev)
	}

	// An update without a token keeps the sealed one and created_at.
	if err := c.PutPeer(ctx, &berth.Peer{Name: "b", URL: "http://127.0.0.1:7071", LostTimeout: berth.Duration(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	list = peers(t, c)
	if got := list[0]; !bytes.Equal(got.SealedToken, sealed) || got.URL != "http://127.0.0.1:7071" ||
		got.LostTimeout != berth.Duration(2*time.Hour) || !got.CreatedAt.Equal(now) {
		t.Errorf("after an update without a token: %+v, want the old sealed token, the new URL and timeout", got)
	}
	// One with a token replaces it.
	if err := c.PutPeer(ctx, &berth.Peer{Name: "b", URL: "http://127.0.0.1:7071", Token: "rotated"}); err != nil {
		t.Fatal(err)
	}
	if tok, err := vault.OpenPeerToken("b", peers(t, c)[0].SealedToken); err != nil || tok != "rotated" {
		t.Errorf("token after rotation = %q, %v", tok, err)
	}
}

func TestDeletePeerRefusedWhileItHoldsActiveJobs(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "berth.db")
	// Two jobs handed to b, one ended, and one local, in the store before
	// the controller starts.
	st, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	job := func(id, cluster string, state berth.JobState) *berth.Job {
		j := &berth.Job{ID: id, JobSpec: berth.DefaultJobSpec(), State: state, CreatedAt: now}
		j.Command, j.User, j.Cluster = berth.Argv{"true"}, "alice", cluster
		return j
	}
	if err := st.Write(t.Context(), &store.Batch{Jobs: []*berth.Job{
		job("j1", "b", berth.JobRunning), job("j2", "b", berth.JobSucceeded), job("j3", "", berth.JobPending),
	}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	c, _, _ := startWithPeers(t, path, now, testKeys(t))
	ctx := t.Context()
	if err := c.DeletePeer(ctx, "b", false); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("DeletePeer of an unknown peer = %v, want not found", err)
	}
	for _, name := range []string{"b", "c"} {
		if err := c.PutPeer(ctx, &berth.Peer{Name: name, URL: "https://127.0.0.1:7070", Token: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	err = c.DeletePeer(ctx, "b", false)
	if e, ok := err.(*berth.Error); !ok || e.Code != berth.ECodeConflict || e.Field != "name" || !bytes.Contains([]byte(e.Message), []byte("1 active jobs")) {
		t.Fatalf("DeletePeer(b) = %v, want a conflict naming 1 active job", err)
	}
	if list := peers(t, c); len(list) != 2 {
		t.Fatalf("peers after a refused delete = %+v", list)
	}
	if err := c.DeletePeer(ctx, "c", false); err != nil {
		t.Fatalf("DeletePeer(c), which holds no job: %v", err)
	}
	changed := c.PeersChanged()
	if err := c.DeletePeer(ctx, "b", true); err != nil {
		t.Fatalf("DeletePeer(b, force): %v", err)
	}
	<-changed // closed once the delete is durable
	if list := peers(t, c); len(list) != 0 {
		t.Errorf("peers after deletes = %+v, want none", list)
	}
	ev := readEvents(t, c, 2)
	if len(ev) != 2 || ev[0].Type != berth.EventPeerDeleted || ev[0].Peer != "c" || ev[0].Reason != "" ||
		ev[1].Peer != "b" || ev[1].Reason != "forced with 1 active jobs" {
		t.Errorf("delete events = %+v", ev)
	}
}

func TestPeersSurviveARestart(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "berth.db")
	keys := testKeys(t)
	c, _, stop := startWithPeers(t, path, now, keys)
	fp := "sha256:" + strings.Repeat("0f", 32)
	b := &berth.Peer{Name: "b", URL: "https://127.0.0.1:7443", Token: "secret-b", CAFingerprint: fp, RouteTimeout: berth.Duration(time.Second)}
	for _, p := range []*berth.Peer{b, {Name: "c", URL: "http://127.0.0.1:7444", Token: "secret-c"}} {
		if err := c.PutPeer(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.DeletePeer(t.Context(), "c", false); err != nil {
		t.Fatal(err)
	}
	before := peers(t, c)
	stop()

	c, vault, _ := startWithPeers(t, path, now.Add(time.Hour), keys)
	after := peers(t, c)
	if !reflect.DeepEqual(after, before) || len(after) != 1 {
		t.Fatalf("peers after a restart = %+v, want %+v", after, before)
	}
	if tok, err := vault.OpenPeerToken("b", after[0].SealedToken); err != nil || tok != "secret-b" {
		t.Errorf("b's token after a restart = %q, %v", tok, err)
	}
}
