package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
)

// peers GETs /api/v1/peers and requires 200 and {"peers":[...]}.
func (s *server) peers() []*berth.PeerInfo {
	s.t.Helper()
	status, _, data := s.do("GET", "/api/v1/peers", "")
	var l berth.PeerList
	if err := json.Unmarshal(data, &l); status != http.StatusOK || err != nil || l.Peers == nil {
		s.t.Fatalf(`GET /api/v1/peers: status %d: %s, want {"peers":[...]}`, status, data)
	}
	return l.Peers
}

// putPeer PUTs body to the peer name, requires 200 and an answer without
// a token, and returns it.
func (s *server) putPeer(name, body string) *berth.PeerInfo {
	s.t.Helper()
	status, _, data := s.do("PUT", "/api/v1/peers/"+name, body)
	var p berth.PeerInfo
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); status != http.StatusOK || err != nil {
		s.t.Fatalf("PUT /api/v1/peers/%s %s: status %d: %s (%v)", name, body, status, data, err)
	}
	if bytes.Contains(data, []byte(`"token"`)) {
		s.t.Errorf("PUT answer holds a token: %s", data)
	}
	return &p
}

func TestPeersPutListGetDelete(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	if p := s.peers(); len(p) != 0 {
		t.Fatalf("peers of a new server = %+v", p)
	}
	start := time.Now().Add(-time.Second)
	fp := "sha256:" + strings.Repeat("ab", 32)
	b := s.putPeer("b", `{"url":"https://127.0.0.1:7443","token":"peer-secret-b","ca_fingerprint":"`+fp+`","route_timeout":"30s"}`)
	if b.Name != "b" || b.URL != "https://127.0.0.1:7443" || b.CAFingerprint != fp || b.RouteTimeout != berth.Duration(30*time.Second) ||
		b.LostTimeout != berth.Duration(berth.DefaultLostTimeout) || b.CreatedAt.Before(start) || b.Status.State != berth.PeerNew {
		t.Errorf("PUT b = %+v / %+v", b.Peer, b.Status)
	}
	// A change without a token keeps it; the name may be repeated.
	s.putPeer("b", `{"name":"b","url":"http://127.0.0.1:7444"}`)
	s.putPeer("a", `{"url":"http://127.0.0.1:7445","token":"peer-secret-a"}`)

	status, _, data := s.do("GET", "/api/v1/peers", "")
	if status != http.StatusOK || bytes.Contains(data, []byte("peer-secret")) || bytes.Contains(data, []byte(`"token"`)) {
		t.Fatalf("GET /api/v1/peers: %d %s, want no token", status, data)
	}
	list := s.peers()
	if len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" || list[1].URL != "http://127.0.0.1:7444" ||
		list[1].CAFingerprint != "" || list[1].Status.State != berth.PeerNew {
		t.Fatalf("peers = %+v, want a, then b changed", list)
	}
	stored, err := s.ctl.Peers(t.Context())
	if err != nil || len(stored) != 2 {
		t.Fatalf("controller's peers = %+v, %v", stored, err)
	}
	if tok, err := s.sec.Secrets.OpenPeerToken("b", stored[1].SealedToken); err != nil || tok != "peer-secret-b" {
		t.Errorf("b's token after a change without one = %q, %v; want it kept", tok, err)
	}

	status, _, data = s.do("GET", "/api/v1/peers/a", "")
	var one berth.PeerInfo
	if err := json.Unmarshal(data, &one); status != http.StatusOK || err != nil || one.Name != "a" || bytes.Contains(data, []byte("peer-secret")) {
		t.Errorf("GET /api/v1/peers/a: %d %s", status, data)
	}
	status, ctype, data := s.do("GET", "/api/v1/peers/zz", "")
	checkError(t, status, ctype, data, http.StatusNotFound, berth.ECodeNotFound, "name")

	status, ctype, data = s.do("DELETE", "/api/v1/peers/a?force=maybe", "")
	checkError(t, status, ctype, data, http.StatusBadRequest, berth.ECodeInvalid, "force")
	if status, _, data := s.do("DELETE", "/api/v1/peers/a", ""); status != http.StatusNoContent || len(data) != 0 {
		t.Fatalf("DELETE a: %d %q, want 204", status, data)
	}
	status, ctype, data = s.do("DELETE", "/api/v1/peers/a", "")
	checkError(t, status, ctype, data, http.StatusNotFound, berth.ECodeNotFound, "name")
	if list := s.peers(); len(list) != 1 || list[0].Name != "b" {
		t.Errorf("peers after delete = %+v", list)
	}
}

func TestPeersRejectBadInputAndStoreNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	fp := "sha256:" + strings.Repeat("0", 64)
	for _, tc := range []struct {
		name, body, field string
	}{
		{"B", `{"url":"https://b:7070","token":"t"}`, "name"},
		{"b", `{"name":"c","url":"https://b:7070","token":"t"}`, "name"},
		{"b", `{"token":"t"}`, "url"},
		{"b", `{"url":"b:7070","token":"t"}`, "url"},
		{"b", `{"url":"https://b","token":"t"}`, "url"},
		{"b", `{"url":"https://b:7070/v1","token":"t"}`, "url"},
		{"b", `{"url":"https://b:7070"}`, "token"},
		{"b", `{"url":"https://b:7070","token":"t","ca_fingerprint":"sha1:00"}`, "ca_fingerprint"},
		{"b", `{"url":"https://b:7070","token":"t","ca_fingerprint":"` + fp + `0"}`, "ca_fingerprint"},
		{"b", `{"url":"https://b:7070","token":"t","route_timeout":"-1s"}`, "route_timeout"},
		{"b", `{"url":"https://b:7070","token":"t","lost_timeout":"-1s"}`, "lost_timeout"},
		{"b", `{"url":"https://b:7070","token":"t","route_timeout":"2h"}`, "route_timeout"},
		{"b", `{"url":"https://b:7070","token":"t","route_timeout":"soon"}`, "route_timeout"},
		{"b", `{"url":"https://b:7070","token":"t","sealed_token":"x"}`, "sealed_token"},
	} {
		status, ctype, data := s.do("PUT", "/api/v1/peers/"+tc.name, tc.body)
		t.Run(tc.field, func(t *testing.T) {
			checkError(t, status, ctype, data, http.StatusBadRequest, berth.ECodeInvalid, tc.field)
		})
	}
	if list := s.peers(); len(list) != 0 {
		t.Fatalf("bad peers stored: %+v", list)
	}
	if n := s.ctl.Bus().Last(); n != 0 {
		t.Errorf("%d events after bad peers, want none", n)
	}
}

func TestPeersAreForAdminsOnly(t *testing.T) {
	t.Parallel()
	s := newSecuredServer(t)
	s.putPeer("b", `{"url":"https://127.0.0.1:7443","token":"peer-secret"}`)
	for _, role := range []auth.Role{auth.RoleUser, auth.RoleOperator, auth.RoleViewer, auth.RolePeer} {
		tok := apitest.Token(t, s.sec, "someone", role, "")
		for _, req := range [][3]string{
			{"GET", "/api/v1/peers", ""},
			{"GET", "/api/v1/peers/b", ""},
			{"PUT", "/api/v1/peers/b", `{"url":"https://127.0.0.1:9","token":"mine"}`},
			{"DELETE", "/api/v1/peers/b?force=true", ""},
		} {
			status, ctype, data := s.doAuth(req[0], req[1], req[2], tok)
			t.Run(string(role)+" "+req[0]+" "+req[1], func(t *testing.T) {
				checkError(t, status, ctype, data, http.StatusForbidden, berth.ECodeForbidden, "")
			})
		}
	}
	if list := s.peers(); len(list) != 1 || list[0].URL != "https://127.0.0.1:7443" {
		t.Errorf("peers after refused changes = %+v", list)
	}
}
