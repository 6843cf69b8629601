package api_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/store"
)

// secured is a server whose handler, database file and audit log the
// test can reach.
type secured struct {
	*server
	h         http.Handler
	dir       string // holds the database
	auditPath string
}

// startSecured starts a server like startServer, trusting direct loopback
// clients as trustLoopback ("" for no one) and peer addresses as allow;
// either way its token is the admin root's.
func startSecured(t *testing.T, trustLoopback auth.Role, allow ...auth.CIDRRule) *secured {
	t.Helper()
	dir := t.TempDir()
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	st, ctl, sec := startController(t, dir, func(st store.Store) *api.Security {
		return apitest.SecurityWithAudit(t, st, trustLoopback, auditPath)
	})
	sec.Ingress.Allow = allow
	h := api.New(ctl, st, sec, nil)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	s := &server{t: t, url: hs.URL, ctl: ctl, st: st, sec: sec}
	s.token = apitest.Token(t, sec, "root", auth.RoleAdmin, "")
	return &secured{server: s, h: h, dir: dir, auditPath: auditPath}
}

// as returns s for use in test t, which its helpers then fail.
func (s *secured) as(t *testing.T) *secured {
	srv := *s.server
	srv.t = t
	c := *s
	c.server = &srv
	return &c
}

// doHeader sends a request with the headers hdr only (not the server's
// token) and returns the status, the Content-Type and the body.
func (s *server) doHeader(method, path, body string, hdr http.Header) (int, string, []byte) {
	s.t.Helper()
	resp, data := s.send(method, path, body, hdr)
	return resp.StatusCode, resp.Header.Get("Content-Type"), data
}

// peek is doAuth for a stream: an event stream's body is not read.
func (s *server) peek(method, path, token string) (int, string, []byte) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, nil)
	if err != nil {
		s.t.Fatalf("new request: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	ctype := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ctype, "text/event-stream") {
		return resp.StatusCode, ctype, nil
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, ctype, data
}

// dialAgentAs opens the agent WebSocket with token and closes it again; it
// returns 101 when the session opened, else the refusal's status.
func (s *server) dialAgentAs(token string) (int, string, []byte) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.url, "http")+"/api/v1/agent",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err == nil {
		_ = c.Close(websocket.StatusNormalClosure, "done")
		return http.StatusSwitchingProtocols, "", nil
	}
	if resp == nil {
		s.t.Fatalf("dial agent: %v", err)
	}
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), data
}

// issue issues a token straight from the registry, returning its row too.
func issue(t *testing.T, sec *api.Security, g auth.Grant) *berth.IssuedToken {
	t.Helper()
	g.By = "test"
	tok, err := sec.Tokens.Issue(t.Context(), g, func(*berth.Token) error { return nil })
	if err != nil {
		t.Fatalf("issue %+v: %v", g, err)
	}
	return tok
}

// sign signs c with keys, failing the test on error.
func sign(t *testing.T, keys *auth.Keys, c auth.Claims) string {
	t.Helper()
	tok, err := keys.Sign(c)
	if err != nil {
		t.Fatalf("sign %+v: %v", c, err)
	}
	return tok
}

// b64 is a JWS segment.
func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// payloadOf returns the payload segment of the signed token tok.
func payloadOf(t *testing.T, tok string) string {
	t.Helper()
	segs := strings.Split(tok, ".")
	if len(segs) != 3 {
		t.Fatalf("token has %d segments", len(segs))
	}
	return segs[1]
}

// randomSegment is n random bytes as a JWS segment.
func randomSegment(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// state is everything a refused request could have changed, read as the
// root admin: jobs and their states, tokens, every user's secrets,
// quotas, worker controls of the hosts named, and the audit log.
func (s *secured) state(hosts ...string) string {
	s.t.Helper()
	var b strings.Builder
	for _, j := range s.list("?limit=0").Jobs {
		fmt.Fprintf(&b, "job %s %s %s\n", j.ID, j.User, j.State)
	}
	for _, tok := range s.sec.Tokens.List() {
		fmt.Fprintf(&b, "token %s %s %s %s revoked=%v\n", tok.ID, tok.Name, tok.Role, tok.Worker, !tok.RevokedAt.IsZero())
	}
	for _, sec := range s.sec.Secrets.List("") {
		fmt.Fprintf(&b, "secret %s/%s %s\n", sec.Owner, sec.Name, sec.UpdatedAt)
	}
	quotas, _ := json.Marshal(s.quotas())
	fmt.Fprintf(&b, "quotas %s\n", quotas)
	for _, h := range hosts {
		controls, _ := json.Marshal(s.controls(h))
		fmt.Fprintf(&b, "controls %s %s\n", h, controls)
	}
	log, err := os.ReadFile(s.auditPath)
	if err != nil {
		s.t.Fatalf("read audit log: %v", err)
	}
	fmt.Fprintf(&b, "audit\n%s", log)
	return b.String()
}

// jobState returns job id's state, read as the root admin.
func (s *server) jobState(id string) berth.JobState {
	s.t.Helper()
	status, _, data := s.do("GET", "/api/v1/jobs/"+id, "")
	var j berth.JobDetail
	if status != http.StatusOK || json.Unmarshal(data, &j) != nil || j.Job == nil {
		s.t.Fatalf("GET job %s: %d %s", id, status, data)
	}
	return j.State
}

// TestAuthTokens sends every change (and a few reads) with tokens that
// must not authenticate, to a server that trusts no one without a token,
// and requires 401 and nothing changed.
func TestAuthTokens(t *testing.T) {
	t.Parallel()
	s := startSecured(t, "")
	keys := s.sec.Ingress.Keys
	other, err := auth.NewKeys([]byte(rand.Text() + rand.Text())[:auth.MasterKeySize])
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var rootID string
	for _, tok := range s.sec.Tokens.List() {
		if tok.Name == "root" {
			rootID = tok.ID
		}
	}
	if rootID == "" {
		t.Fatal("no root token in the registry")
	}
	rootClaims := auth.Claims{ID: rootID, Subject: "root", Role: auth.RoleAdmin, IssuedAt: now.Unix(), Issuer: auth.TokenIssuer}
	rootPayload := payloadOf(t, s.token)
	alice := issue(t, s.sec, auth.Grant{Name: "alice", Role: auth.RoleUser})
	agent := issue(t, s.sec, auth.Grant{Name: "host-1", Role: auth.RoleAgent, Worker: "host-1"})
	join := issue(t, s.sec, auth.Grant{Name: "joiner", Role: auth.RoleAgent})
	late := issue(t, s.sec, auth.Grant{Name: "late", Role: auth.RoleAdmin, TTL: time.Hour})
	gone := issue(t, s.sec, auth.Grant{Name: "gone", Role: auth.RoleAdmin})
	if _, err := s.sec.Tokens.Revoke(t.Context(), gone.ID, func(*berth.Token) error { return nil }); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	victim := s.submit(`{"command":["sleep","100"],"user":"bob"}`, http.StatusCreated)[0]

	// Controls: the forging below is right, so each row fails for its
	// reason alone. A self-signed copy of alice's claims and a token of
	// the same key as late's, not yet expired, authenticate.
	for name, tok := range map[string]string{
		"alice's claims signed again": sign(t, keys, auth.Claims{ID: alice.ID, Subject: "alice", Role: auth.RoleUser, IssuedAt: now.Unix()}),
		"late's claims, unexpired": sign(t, keys, auth.Claims{ID: late.ID, Subject: "late", Role: auth.RoleAdmin,
			IssuedAt: now.Unix(), Expires: now.Add(time.Hour).Unix()}),
		"root": s.token,
	} {
		if status, _, data := s.doAuth("GET", "/api/v1/jobs", "", tok); status != http.StatusOK {
			t.Fatalf("control %s: GET /api/v1/jobs: %d %s, want 200", name, status, data)
		}
	}

	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	tests := []struct {
		name  string
		hdr   http.Header
		query string
	}{
		{"no token", nil, ""},
		{"token in the query string", nil, "?access_token=" + s.token},
		{"expired", bearer(sign(t, keys, auth.Claims{ID: late.ID, Subject: "late", Role: auth.RoleAdmin,
			IssuedAt: now.Add(-2 * time.Hour).Unix(), Expires: now.Add(-time.Hour).Unix()})), ""},
		{"expired a minute ago, past the leeway", bearer(sign(t, keys, auth.Claims{ID: late.ID, Subject: "late", Role: auth.RoleAdmin,
			IssuedAt: now.Add(-time.Hour).Unix(), Expires: now.Add(-time.Minute).Unix()})), ""},
		{"revoked", bearer(gone.Secret), ""},
		{"signed with another key", bearer(sign(t, other, rootClaims)), ""},
		{"payload edited, signature kept", bearer(strings.Join([]string{
			strings.Split(alice.Secret, ".")[0],
			b64(`{"jti":"` + alice.ID + `","sub":"alice","role":"admin","iat":` + fmt.Sprint(now.Unix()) + `,"iss":"berth"}`),
			strings.Split(alice.Secret, ".")[2]}, ".")), ""},
		{"alg none, empty signature, root's claims", bearer(b64(`{"alg":"none","typ":"JWT"}`) + "." + rootPayload + "."), ""},
		{"alg none, no typ", bearer(b64(`{"alg":"none"}`) + "." + rootPayload + "."), ""},
		{"alg none, root's signature kept", bearer(b64(`{"alg":"none","typ":"JWT"}`) + "." + rootPayload + "." + strings.Split(s.token, ".")[2]), ""},
		{"alg RS256", bearer(b64(`{"alg":"RS256","typ":"JWT"}`) + "." + rootPayload + "." + randomSegment(256)), ""},
		{"alg HS512", bearer(b64(`{"alg":"HS512","typ":"JWT"}`) + "." + rootPayload + "." + randomSegment(64)), ""},
		{"alg HS256 with a kid", bearer(b64(`{"alg":"HS256","typ":"JWT","kid":"0"}`) + "." + rootPayload + "." + randomSegment(32)), ""},
		{"role raised above the registry's", bearer(sign(t, keys, auth.Claims{ID: alice.ID, Subject: "alice", Role: auth.RoleAdmin, IssuedAt: now.Unix()})), ""},
		{"subject changed from the registry's", bearer(sign(t, keys, auth.Claims{ID: alice.ID, Subject: "root", Role: auth.RoleUser, IssuedAt: now.Unix()})), ""},
		{"agent bound to another worker", bearer(sign(t, keys, auth.Claims{ID: agent.ID, Subject: "host-1", Role: auth.RoleAgent, Worker: "host-2", IssuedAt: now.Unix()})), ""},
		{"join token made a credential", bearer(sign(t, keys, auth.Claims{ID: join.ID, Subject: "joiner", Role: auth.RoleAgent, Worker: "host-1", IssuedAt: now.Unix()})), ""},
		{"id not in the registry", bearer(sign(t, keys, auth.Claims{ID: "01NOSUCHTOKEN0000000000000", Subject: "root", Role: auth.RoleAdmin, IssuedAt: now.Unix()})), ""},
		{"issued in the future", bearer(sign(t, keys, auth.Claims{ID: rootID, Subject: "root", Role: auth.RoleAdmin, IssuedAt: now.Add(time.Hour).Unix()})), ""},
		{"Authorization: Basic", http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("root:"+s.token))}}, ""},
		{"valid token, scheme Token", http.Header{"Authorization": {"Token " + s.token}}, ""},
		{"valid token, no scheme", http.Header{"Authorization": {s.token}}, ""},
		{"Bearer without a token", http.Header{"Authorization": {"Bearer"}}, ""},
		{"Bearer and a space", http.Header{"Authorization": {"Bearer "}}, ""},
		{"Bearer not a JWT", bearer("not-a-jwt"), ""},
		{"Bearer two segments", bearer("a.b"), ""},
		{"Bearer four segments", bearer(s.token + ".x"), ""},
		{"Bearer token and more", bearer(s.token + " extra"), ""},
		{"Bearer padded base64", bearer(strings.Replace(s.token, ".", "=.", 1)), ""},
		{"two Authorization headers, the first valid", http.Header{"Authorization": {"Bearer " + s.token, "Bearer junk"}}, ""},
		{"empty Authorization header", http.Header{"Authorization": {""}}, ""},
	}
	mutations := []struct{ method, path, body string }{
		{"POST", "/api/v1/jobs", `{"command":["true"]}`},
		{"POST", "/api/v1/jobs/" + victim.ID + "/cancel", ""},
		{"POST", "/api/v1/tokens", `{"name":"mallory","role":"admin"}`},
		{"DELETE", "/api/v1/tokens/" + rootID, ""},
		{"PUT", "/api/v1/secrets/STOLEN", `{"value":"x","owner":"bob"}`},
		{"PUT", "/api/v1/quotas/user:mallory", `{"max_gpus":64}`},
		{"PUT", "/api/v1/workers/spark/control", `{"desired_state":"off"}`},
		{"POST", "/api/v1/agents/join", `{"host":"evil"}`},
		{"GET", "/api/v1/jobs", ""},
		{"GET", "/api/v1/tokens", ""},
		{"GET", "/api/v1/secrets?owner=*", ""},
		{"GET", "/metrics", ""},
	}
	before := s.state("spark")
	t.Run("rows", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				s := s.as(t)
				for _, m := range mutations {
					path := m.path + tt.query
					if tt.query != "" && strings.Contains(m.path, "?") {
						path = m.path + "&" + tt.query[1:]
					}
					status, ctype, data := s.doHeader(m.method, path, m.body, tt.hdr)
					t.Run(m.method+" "+m.path, func(t *testing.T) {
						checkError(t, status, ctype, data, http.StatusUnauthorized, berth.ECodeUnauthorized, "")
						if strings.Contains(string(data), strings.Split(s.token, ".")[2]) {
							t.Errorf("the refusal echoes the token: %s", data)
						}
					})
				}
				if after := s.state("spark"); after != before {
					t.Errorf("state changed:\nbefore:\n%s\nafter:\n%s", before, after)
				}
			})
		}
	})
	if st := s.jobState(victim.ID); st != berth.JobPending {
		t.Errorf("victim job is %s, want pending", st)
	}
	// The state seen above does change when a request is admitted.
	s.submit(`{"command":["true"]}`, http.StatusCreated)
	if status, _, data := s.do("PUT", "/api/v1/workers/spark/control", `{"desired_state":"off"}`); status != http.StatusOK {
		t.Fatalf("PUT control as root: %d %s", status, data)
	}
	if after := s.state("spark"); after == before {
		t.Errorf("state did not change after admitted changes:\n%s", after)
	}
}

// TestAuthIngress calls the handler with the peer address set: loopback
// trust is for a direct loopback peer without forwarding headers only;
// address rules go by the peer address only.
func TestAuthIngress(t *testing.T) {
	t.Parallel()
	loop := startSecured(t, auth.RoleAdmin)
	cidr := startSecured(t, "", auth.CIDRRule{Net: netip.MustParsePrefix("10.0.0.0/8"), Role: auth.RoleViewer})
	const submit = `{"command":["true"]}`
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h[http.CanonicalHeaderKey(kv[i])] = append(h[http.CanonicalHeaderKey(kv[i])], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name         string
		srv          *secured
		remote       string
		hdr          http.Header
		method, path string
		body         string
		status       int
		code         string // "" when admitted
		stores       int    // jobs an admitted request stores
	}{
		{"loopback without headers reads", loop, "127.0.0.1:5555", nil, "GET", "/api/v1/jobs", "", 200, "", 0},
		{"IPv6 loopback without headers reads", loop, "[::1]:5555", nil, "GET", "/api/v1/jobs", "", 200, "", 0},
		{"loopback without headers submits as its trusted role", loop, "127.0.0.1:5555", nil, "POST", "/api/v1/jobs", submit, 201, "", 1},
		{"forged X-Forwarded-For: 127.0.0.1", loop, "10.1.2.3:5555", hdr("X-Forwarded-For", "127.0.0.1"), "POST", "/api/v1/jobs", submit, 401, berth.ECodeUnauthorized, 0},
		{"forged X-Real-IP: 127.0.0.1", loop, "10.1.2.3:5555", hdr("X-Real-IP", "127.0.0.1"), "POST", "/api/v1/jobs", submit, 401, berth.ECodeUnauthorized, 0},
		{"forged Forwarded: for=127.0.0.1", loop, "10.1.2.3:5555", hdr("Forwarded", "for=127.0.0.1"), "POST", "/api/v1/tokens", `{"name":"mallory","role":"admin"}`, 401, berth.ECodeUnauthorized, 0},
		{"loopback with X-Forwarded-For (a local proxy)", loop, "127.0.0.1:5555", hdr("X-Forwarded-For", "203.0.113.7"), "POST", "/api/v1/jobs", submit, 401, berth.ECodeUnauthorized, 0},
		{"loopback with X-Forwarded-For naming loopback", loop, "127.0.0.1:5555", hdr("X-Forwarded-For", "127.0.0.1"), "GET", "/api/v1/jobs", "", 401, berth.ECodeUnauthorized, 0},
		{"loopback with an empty X-Forwarded-For", loop, "127.0.0.1:5555", hdr("X-Forwarded-For", ""), "POST", "/api/v1/jobs", submit, 401, berth.ECodeUnauthorized, 0},
		{"loopback with X-Real-IP", loop, "127.0.0.1:5555", hdr("X-Real-IP", "203.0.113.7"), "PUT", "/api/v1/quotas/user:x", `{"max_gpus":1}`, 401, berth.ECodeUnauthorized, 0},
		{"loopback with Forwarded", loop, "127.0.0.1:5555", hdr("Forwarded", "for=203.0.113.7"), "PUT", "/api/v1/secrets/X", `{"value":"v"}`, 401, berth.ECodeUnauthorized, 0},
		{"loopback with X-Forwarded-Host", loop, "127.0.0.1:5555", hdr("X-Forwarded-Host", "berth.example"), "PUT", "/api/v1/workers/spark/control", `{"desired_state":"off"}`, 401, berth.ECodeUnauthorized, 0},
		{"loopback with a bad token", loop, "127.0.0.1:5555", hdr("Authorization", "Bearer junk"), "POST", "/api/v1/jobs", submit, 401, berth.ECodeUnauthorized, 0},
		{"loopback with Basic credentials", loop, "127.0.0.1:5555", hdr("Authorization", "Basic cm9vdDpyb290"), "GET", "/api/v1/jobs", "", 401, berth.ECodeUnauthorized, 0},
		{"a remote peer without headers", loop, "203.0.113.7:5555", nil, "GET", "/api/v1/jobs", "", 401, berth.ECodeUnauthorized, 0},
		{"a RemoteAddr that is no address", loop, "localhost:5555", nil, "GET", "/api/v1/jobs", "", 401, berth.ECodeUnauthorized, 0},
		{"loopback, cross-site browser request", loop, "127.0.0.1:5555", hdr("Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"), "POST", "/api/v1/jobs", submit, 403, berth.ECodeForbidden, 0},
		{"CIDR in: viewer reads", cidr, "10.1.2.3:5555", nil, "GET", "/api/v1/jobs", "", 200, "", 0},
		{"CIDR in, IPv4-mapped IPv6: viewer reads", cidr, "[::ffff:10.1.2.3]:5555", nil, "GET", "/api/v1/jobs", "", 200, "", 0},
		{"CIDR in: viewer may not submit", cidr, "10.1.2.3:5555", nil, "POST", "/api/v1/jobs", submit, 403, berth.ECodeForbidden, 0},
		{"CIDR in: viewer may not set a quota", cidr, "10.1.2.3:5555", nil, "PUT", "/api/v1/quotas/user:x", `{"max_gpus":1}`, 403, berth.ECodeForbidden, 0},
		{"CIDR in: viewer may not create a token", cidr, "10.1.2.3:5555", nil, "POST", "/api/v1/tokens", `{"name":"mallory","role":"admin"}`, 403, berth.ECodeForbidden, 0},
		{"CIDR in with a bad token", cidr, "10.1.2.3:5555", hdr("Authorization", "Bearer junk"), "GET", "/api/v1/jobs", "", 401, berth.ECodeUnauthorized, 0},
		{"CIDR out", cidr, "192.168.1.1:5555", nil, "GET", "/api/v1/jobs", "", 401, berth.ECodeUnauthorized, 0},
		{"CIDR out, X-Forwarded-For inside", cidr, "192.168.1.1:5555", hdr("X-Forwarded-For", "10.1.2.3"), "GET", "/api/v1/jobs", "", 401, berth.ECodeUnauthorized, 0},
		{"CIDR out, X-Real-IP inside", cidr, "192.168.1.1:5555", hdr("X-Real-IP", "10.1.2.3"), "POST", "/api/v1/jobs", submit, 401, berth.ECodeUnauthorized, 0},
		{"loopback, not trusted and not in a rule", cidr, "127.0.0.1:5555", nil, "GET", "/api/v1/jobs", "", 401, berth.ECodeUnauthorized, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: rows share two servers, and each compares
			// their state before and after.
			srv := tt.srv.as(t)
			before, jobs := srv.state("spark"), srv.count()
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			req := httptest.NewRequest(tt.method, tt.path, body)
			req.RemoteAddr = tt.remote
			if tt.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			for k, vs := range tt.hdr {
				req.Header[k] = vs
			}
			rec := httptest.NewRecorder()
			srv.h.ServeHTTP(rec, req)
			if tt.code == "" {
				if rec.Code != tt.status {
					t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
				}
				if got := srv.count(); got != jobs+tt.stores {
					t.Errorf("store holds %d jobs, want %d", got, jobs+tt.stores)
				}
				return
			}
			checkError(t, rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes(), tt.status, tt.code, "")
			if after := srv.state("spark"); after != before {
				t.Errorf("state changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// identityCase is one kind of caller of TestRoles.
type identityCase struct {
	key    string // the row's name: a role, or agent and join for the agent role's two kinds
	name   string
	role   auth.Role
	worker string
	token  string
}

// TestRoles tries each endpoint as each role and requires the rights
// api/security.go's comment grants: 2xx and the change made, or 403 and
// nothing changed.
func TestRoles(t *testing.T) {
	t.Parallel()
	s := startSecured(t, "")
	ids := []*identityCase{
		{key: "viewer", name: "vera", role: auth.RoleViewer},
		{key: "user", name: "alice", role: auth.RoleUser},
		{key: "operator", name: "oscar", role: auth.RoleOperator},
		{key: "admin", name: "ada", role: auth.RoleAdmin},
		{key: "agent", name: "host-1", role: auth.RoleAgent, worker: "host-1"},
		{key: "join", name: "joiner", role: auth.RoleAgent},
		{key: "peer", name: "peer-1", role: auth.RolePeer},
	}
	for _, id := range ids {
		id.token = apitest.Token(t, s.sec, id.name, id.role, id.worker)
	}
	// The rules, from the comment in api/security.go.
	var (
		people     = []string{"viewer", "user", "operator", "admin"}
		allJobs    = []string{"viewer", "operator", "admin"} // read every job
		submitters = []string{"user", "operator", "admin"}   // a peer hands jobs over, it does not submit
		operators  = []string{"operator", "admin"}           // act on every job, worker and quota
		admins     = []string{"admin"}                       // tokens, every user's secrets
		holders    = []string{"user", "operator", "admin"}   // their own secrets; not peers
		// Jobs are listed by those who read every job and, their own, by
		// those who submit; a peer reads only the jobs it handed over
		// (TestFederationPeerReadsOnlyItsJobs).
		jobReaders = []string{"viewer", "user", "operator", "admin"}
		// The cluster (workers, quotas) is read by people; peers too (see
		// the report: readsCluster).
		clusterReaders = []string{"viewer", "user", "operator", "admin", "peer"}
	)
	bobs := s.submit(`{"command":["sleep","100"],"user":"bob"}`, http.StatusCreated)[0]
	newJob := func(t *testing.T, s *secured, user, queue string) string {
		t.Helper()
		status, _, data := s.do("POST", "/api/v1/jobs", `{"command":["sleep","100"],"queue":"`+queue+`","user":"`+user+`"}`)
		var resp berth.SubmitResponse
		if status != http.StatusCreated || json.Unmarshal(data, &resp) != nil || len(resp.Jobs) != 1 {
			t.Fatalf("submit as %s: %d %s", user, status, data)
		}
		return resp.Jobs[0].ID
	}
	hasToken := func(name string) bool {
		return slices.ContainsFunc(s.sec.Tokens.List(), func(tok *berth.Token) bool { return tok.Name == name })
	}
	hasSecret := func(owner, name string) bool {
		return slices.ContainsFunc(s.sec.Secrets.List(owner), func(sec *berth.Secret) bool { return sec.Name == name })
	}
	type result struct {
		status int
		ctype  string
		body   []byte
	}
	endpoints := []struct {
		name  string
		allow []string
		// do makes the request as id; changed, for a change, reports
		// whether it was made.
		do func(t *testing.T, s *secured, id *identityCase) (result, func() bool)
	}{
		{"submit", submitters, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			st, ct, b := s.doAuth("POST", "/api/v1/jobs", `{"command":["true"],"queue":"matrix"}`, id.token)
			return result{st, ct, b}, func() bool {
				return len(s.list("?limit=0&queue=matrix&user="+id.name).Jobs) > 0
			}
		}},
		{"list jobs", jobReaders, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			st, ct, b := s.doAuth("GET", "/api/v1/jobs", "", id.token)
			return result{st, ct, b}, nil
		}},
		{"get another user's job", allJobs, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			st, ct, b := s.doAuth("GET", "/api/v1/jobs/"+bobs.ID, "", id.token)
			return result{st, ct, b}, nil
		}},
		{"cancel another user's job", operators, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			job := newJob(t, s, "bob", "other")
			st, ct, b := s.doAuth("POST", "/api/v1/jobs/"+job+"/cancel", "", id.token)
			return result{st, ct, b}, func() bool { return s.jobState(job) != berth.JobPending }
		}},
		{"cancel own job", submitters, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			job := newJob(t, s, id.name, "own")
			st, ct, b := s.doAuth("POST", "/api/v1/jobs/"+job+"/cancel", "", id.token)
			return result{st, ct, b}, func() bool { return s.jobState(job) != berth.JobPending }
		}},
		{"list workers", clusterReaders, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			st, ct, b := s.doAuth("GET", "/api/v1/workers", "", id.token)
			return result{st, ct, b}, nil
		}},
		{"put worker control", operators, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			host := "ctl-" + id.key
			st, ct, b := s.doAuth("PUT", "/api/v1/workers/"+host+"/control", `{"desired_state":"off"}`, id.token)
			return result{st, ct, b}, func() bool { return len(s.controls(host)) > 0 }
		}},
		{"list quotas", clusterReaders, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			st, ct, b := s.doAuth("GET", "/api/v1/quotas", "", id.token)
			return result{st, ct, b}, nil
		}},
		{"put quota", operators, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			name := "quota-" + id.key
			st, ct, b := s.doAuth("PUT", "/api/v1/quotas/user:"+name, `{"max_jobs":1}`, id.token)
			return result{st, ct, b}, func() bool {
				return slices.ContainsFunc(s.quotas(), func(q *berth.QuotaRule) bool { return q.Name == name })
			}
		}},
		{"create token", admins, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			name := "made-by-" + id.key
			st, ct, b := s.doAuth("POST", "/api/v1/tokens", `{"name":"`+name+`","role":"admin"}`, id.token)
			return result{st, ct, b}, func() bool { return hasToken(name) }
		}},
		{"list tokens", admins, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			st, ct, b := s.doAuth("GET", "/api/v1/tokens", "", id.token)
			return result{st, ct, b}, nil
		}},
		{"revoke token", admins, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			victim := issue(t, s.sec, auth.Grant{Name: "victim-of-" + id.key, Role: auth.RoleViewer})
			st, ct, b := s.doAuth("DELETE", "/api/v1/tokens/"+victim.ID, "", id.token)
			return result{st, ct, b}, func() bool {
				return slices.ContainsFunc(s.sec.Tokens.List(), func(tok *berth.Token) bool {
					return tok.ID == victim.ID && !tok.RevokedAt.IsZero()
				})
			}
		}},
		{"set own secret", holders, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			st, ct, b := s.doAuth("PUT", "/api/v1/secrets/OWN", `{"value":"v"}`, id.token)
			return result{st, ct, b}, func() bool { return hasSecret(id.name, "OWN") }
		}},
		{"list own secrets", holders, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			st, ct, b := s.doAuth("GET", "/api/v1/secrets", "", id.token)
			return result{st, ct, b}, nil
		}},
		{"delete own secret", holders, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			// The root admin sets the secret the identity then deletes.
			if st, _, b := s.do("PUT", "/api/v1/secrets/GONE", `{"value":"v","owner":"`+id.name+`"}`); st != http.StatusOK {
				t.Fatalf("set %s's secret as root: status %d: %s", id.name, st, b)
			}
			st, ct, b := s.doAuth("DELETE", "/api/v1/secrets/GONE", "", id.token)
			return result{st, ct, b}, func() bool { return !hasSecret(id.name, "GONE") }
		}},
		{"set another user's secret via owner", admins, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			name := "FROM_" + strings.ToUpper(id.key)
			st, ct, b := s.doAuth("PUT", "/api/v1/secrets/"+name, `{"value":"v","owner":"bob"}`, id.token)
			return result{st, ct, b}, func() bool { return hasSecret("bob", name) }
		}},
		{"list another user's secrets", admins, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			st, ct, b := s.doAuth("GET", "/api/v1/secrets?owner=bob", "", id.token)
			return result{st, ct, b}, nil
		}},
		{"join", []string{"join"}, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			host := "joined-" + id.key
			st, ct, b := s.doAuth("POST", "/api/v1/agents/join", `{"host":"`+host+`"}`, id.token)
			return result{st, ct, b}, func() bool { return hasToken(host) }
		}},
		// Metrics are every job's figures: for those who read every job
		// (see the report: people read the cluster, but users only their
		// own jobs).
		{"metrics", allJobs, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			st, ct, b := s.doAuth("GET", "/metrics", "", id.token)
			return result{st, ct, b}, nil
		}},
		{"events", people, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			st, ct, b := s.peek("GET", "/api/v1/events", id.token)
			return result{st, ct, b}, nil
		}},
		// The federation's endpoints: a peer only (default-deny).
		{"federation capacity", []string{"peer"}, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			st, ct, b := s.doAuth("GET", "/api/v1/federation/capacity", "", id.token)
			return result{st, ct, b}, nil
		}},
		// The agent protocol: agent credentials; admins too (see the
		// report: speaksAgent).
		{"agent protocol", []string{"agent", "admin"}, func(t *testing.T, s *secured, id *identityCase) (result, func() bool) {
			st, ct, b := s.dialAgentAs(id.token)
			return result{st, ct, b}, nil
		}},
	}
	for _, ep := range endpoints {
		for _, id := range ids {
			t.Run(ep.name+"/"+id.key, func(t *testing.T) {
				t.Parallel()
				r, changed := ep.do(t, s.as(t), id)
				if slices.Contains(ep.allow, id.key) {
					if (r.status < 200 || r.status > 299) && r.status != http.StatusSwitchingProtocols {
						t.Fatalf("%s as %s: status %d, want 2xx: %s", ep.name, id.key, r.status, r.body)
					}
					if changed != nil && !changed() {
						t.Errorf("%s as %s answered %d but changed nothing", ep.name, id.key, r.status)
					}
					return
				}
				checkError(t, r.status, r.ctype, r.body, http.StatusForbidden, berth.ECodeForbidden, "")
				if changed != nil && changed() {
					t.Errorf("%s as %s was refused but made its change", ep.name, id.key)
				}
			})
		}
	}
}

// TestRolesOwnership: a user neither cancels nor reads another user's job,
// nor lists another user's jobs; users submit as themselves only, and a
// peer neither submits nor reads a job it did not hand over.
func TestRolesOwnership(t *testing.T) {
	t.Parallel()
	s := startSecured(t, "")
	alice := apitest.Token(t, s.sec, "alice", auth.RoleUser, "")
	peer := apitest.Token(t, s.sec, "peer-1", auth.RolePeer, "")
	viewer := apitest.Token(t, s.sec, "vera", auth.RoleViewer, "")
	operator := apitest.Token(t, s.sec, "oscar", auth.RoleOperator, "")
	bobs := s.submit(`{"command":["sleep","100"],"user":"bob"}`, http.StatusCreated)[0]
	mine := func(user string) int { return len(s.list("?limit=0&user=" + user).Jobs) }

	tests := []struct {
		name         string
		token        string
		method, path string
		body         string
		status       int
		field        string // of a refusal
		bobJobs      int    // bob's jobs after
	}{
		{"user cancels another user's job", alice, "POST", "/api/v1/jobs/" + bobs.ID + "/cancel", "", 403, "", 1},
		{"user reads another user's job", alice, "GET", "/api/v1/jobs/" + bobs.ID, "", 403, "", 1},
		{"user reads another user's logs", alice, "GET", "/api/v1/jobs/" + bobs.ID + "/logs", "", 403, "", 1},
		{"user lists another user's jobs", alice, "GET", "/api/v1/jobs?user=bob", "", 403, "", 1},
		{"user cancels another user's jobs by filter", alice, "POST", "/api/v1/jobs/cancel", `{"user":"bob"}`, 403, "", 1},
		{"user cancels by a filter: its own jobs only", alice, "POST", "/api/v1/jobs/cancel", `{"queue":"default"}`, 200, "", 1},
		{"user waits for another user's job", alice, "POST", "/api/v1/wait", `{"ids":["` + bobs.ID + `"],"timeout":"1s"}`, 403, "", 1},
		{"user waits for all its jobs", alice, "POST", "/api/v1/wait", `{"all":true,"timeout":"1s"}`, 200, "", 1},
		{"user submits as someone else", alice, "POST", "/api/v1/jobs", `{"command":["true"],"user":"bob"}`, 403, "user", 1},
		{"peer submits", peer, "POST", "/api/v1/jobs", `{"command":["true"]}`, 403, "", 1},
		{"peer reads a job it did not hand over", peer, "GET", "/api/v1/jobs/" + bobs.ID, "", 403, "", 1},
		{"peer reads the logs of a job it did not hand over", peer, "GET", "/api/v1/jobs/" + bobs.ID + "/logs", "", 403, "", 1},
		{"viewer submits as someone else", viewer, "POST", "/api/v1/jobs", `{"command":["true"],"user":"bob"}`, 403, "", 1},
		{"user submits naming itself", alice, "POST", "/api/v1/jobs", `{"command":["true"],"user":"alice"}`, 201, "", 1},
		{"operator submits as someone else", operator, "POST", "/api/v1/jobs", `{"command":["true"],"user":"bob"}`, 201, "", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: bob's job count is compared row by row.
			status, ctype, data := s.doAuth(tt.method, tt.path, tt.body, tt.token)
			if tt.status < 300 {
				if status != tt.status {
					t.Errorf("status %d, want %d: %s", status, tt.status, data)
				}
			} else {
				checkError(t, status, ctype, data, tt.status, berth.ECodeForbidden, tt.field)
			}
			if n := mine("bob"); n != tt.bobJobs {
				t.Errorf("bob has %d jobs, want %d", n, tt.bobJobs)
			}
			if st := s.jobState(bobs.ID); st != berth.JobPending {
				t.Errorf("bob's job is %s, want pending", st)
			}
		})
	}
	if n := mine("peer-1") + mine("vera"); n != 0 {
		t.Errorf("refused submissions stored %d jobs", n)
	}
	if n := mine("alice"); n != 1 {
		t.Errorf("alice has %d jobs, want the 1 she submitted as herself", n)
	}
}

// TestAuthSecretReferences: a job referencing a secret its user lacks is
// refused (400 naming the field), stores nothing, and the message shows
// no secret's value.
func TestAuthSecretReferences(t *testing.T) {
	t.Parallel()
	s := startSecured(t, "")
	alice := apitest.Token(t, s.sec, "alice", auth.RoleUser, "")
	bob := apitest.Token(t, s.sec, "bob", auth.RoleUser, "")
	aliceValue, bobValue := "alice-value-"+rand.Text(), "bob-value-"+rand.Text()
	for _, set := range []struct{ token, name, value string }{
		{alice, "API_KEY", aliceValue},
		{bob, "BOB_ONLY", bobValue},
	} {
		if status, _, data := s.doAuth("PUT", "/api/v1/secrets/"+set.name, `{"value":"`+set.value+`"}`, set.token); status != http.StatusOK {
			t.Fatalf("set %s: %d %s", set.name, status, data)
		}
	}
	tests := []struct {
		name  string
		token string
		body  string
		field string // "" when admitted
	}{
		{"command references a missing secret", alice, `{"command":["echo","{{SECRET:NOPE}}"]}`, "command"},
		{"command references one present, one missing", alice, `{"command":["echo","{{SECRET:API_KEY}}","{{SECRET:NOPE}}"]}`, "command"},
		{"shell command references a missing secret", alice, `{"command":"echo {{SECRET:API_KEY}} {{SECRET:NOPE}}"}`, "command"},
		{"command references another user's secret", alice, `{"command":["echo","{{SECRET:BOB_ONLY}}"]}`, "command"},
		{"env references a missing secret", alice, `{"command":["true"],"env":{"X":"{{SECRET:NOPE}}","Y":"{{SECRET:API_KEY}}"}}`, "env.X"},
		{"workdir references a missing secret", alice, `{"command":["true"],"workdir":"/data/{{SECRET:NOPE}}"}`, "workdir"},
		{"admin submits for alice referencing bob's secret", s.token, `{"command":["echo","{{SECRET:BOB_ONLY}}"],"user":"alice"}`, "command"},
		{"command references the user's own secret", alice, `{"command":["echo","{{SECRET:API_KEY}}"],"env":{"Y":"{{SECRET:API_KEY}}"}}`, ""},
		{"admin submits for alice referencing hers", s.token, `{"command":["echo","{{SECRET:API_KEY}}"],"user":"alice"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: the job count is compared row by row.
			jobs := s.count()
			status, ctype, data := s.doAuth("POST", "/api/v1/jobs", tt.body, tt.token)
			for _, v := range []string{aliceValue, bobValue} {
				if strings.Contains(string(data), v) {
					t.Errorf("the answer shows a secret's value: %s", data)
				}
			}
			if tt.field == "" {
				var resp berth.SubmitResponse
				if status != http.StatusCreated || json.Unmarshal(data, &resp) != nil || len(resp.Jobs) != 1 {
					t.Fatalf("status %d, want 201: %s", status, data)
				}
				if n := s.count(); n != jobs+1 {
					t.Errorf("store holds %d jobs, want %d", n, jobs+1)
				}
				// The job keeps the reference, never the value.
				_, _, detail := s.do("GET", "/api/v1/jobs/"+resp.Jobs[0].ID, "")
				if !strings.Contains(string(detail), "{{SECRET:API_KEY}}") || strings.Contains(string(detail), aliceValue) {
					t.Errorf("job detail = %s, want the reference and not the value", detail)
				}
				return
			}
			checkError(t, status, ctype, data, http.StatusBadRequest, berth.ECodeInvalid, tt.field)
			if n := s.count(); n != jobs {
				t.Errorf("store holds %d jobs after a refused submission, want %d", n, jobs)
			}
		})
	}
}

// TestAuthSecretValueNeverShown: a secret's value, once set, is in no
// answer, listing, audit record or database file.
func TestAuthSecretValueNeverShown(t *testing.T) {
	t.Parallel()
	s := startSecured(t, "")
	alice := apitest.Token(t, s.sec, "alice", auth.RoleUser, "")
	value, bobValue := "alice-value-"+rand.Text(), "bob-value-"+rand.Text()
	var answers []string
	for _, set := range []struct{ token, path, body, target string }{
		{alice, "/api/v1/secrets/API_KEY", `{"value":"` + value + `"}`, "secret/alice/API_KEY"},
		{s.token, "/api/v1/secrets/BOB_KEY", `{"value":"` + bobValue + `","owner":"bob"}`, "secret/bob/BOB_KEY"},
	} {
		status, _, data := s.doAuth("PUT", set.path, set.body, set.token)
		if status != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", set.path, status, data)
		}
		answers = append(answers, "PUT "+set.path+": "+string(data))
	}
	// A refused attempt on bob's secret answers without echoing it.
	status, ctype, data := s.doAuth("PUT", "/api/v1/secrets/BOB_KEY", `{"value":"`+value+`","owner":"bob"}`, alice)
	checkError(t, status, ctype, data, http.StatusForbidden, berth.ECodeForbidden, "")
	answers = append(answers, "refused PUT: "+string(data))
	job := s.submit(`{"command":["echo","{{SECRET:BOB_KEY}}"],"user":"bob"}`, http.StatusCreated)[0]

	for _, r := range []struct {
		token, path string
		want        []string // names the listing must show
	}{
		{alice, "/api/v1/secrets", []string{"API_KEY"}},
		{s.token, "/api/v1/secrets?owner=*", []string{"API_KEY", "BOB_KEY"}},
		{s.token, "/api/v1/secrets?owner=bob", []string{"BOB_KEY"}},
		{s.token, "/api/v1/jobs/" + job.ID, []string{"{{SECRET:BOB_KEY}}"}},
		{s.token, "/api/v1/jobs?limit=0", []string{"{{SECRET:BOB_KEY}}"}},
	} {
		status, _, data := s.doAuth("GET", r.path, "", r.token)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", r.path, status, data)
		}
		for _, w := range r.want {
			if !strings.Contains(string(data), w) {
				t.Errorf("GET %s = %s, want %s in it", r.path, data, w)
			}
		}
		answers = append(answers, "GET "+r.path+": "+string(data))
	}
	log, err := os.ReadFile(s.auditPath)
	if err != nil {
		t.Fatalf("read audit log: %v", err)
	}
	for _, target := range []string{"secret/alice/API_KEY", "secret/bob/BOB_KEY"} {
		if !strings.Contains(string(log), `"target":"`+target+`"`) {
			t.Errorf("audit log lacks a record of %s:\n%s", target, log)
		}
	}
	if n := strings.Count(string(log), `"action":"secret.set"`); n != 2 {
		t.Errorf("audit log has %d secret.set records, want 2 (the refused one is not one):\n%s", n, log)
	}
	answers = append(answers, "audit log: "+string(log))
	files, err := filepath.Glob(filepath.Join(s.dir, "berth.db*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("database files: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("read %s: %v", f, err)
		}
		answers = append(answers, "file "+filepath.Base(f)+": "+string(b))
	}
	for _, a := range answers {
		for _, v := range []string{value, bobValue} {
			if strings.Contains(a, v) {
				where, _, _ := strings.Cut(a, ":")
				t.Errorf("%s shows a secret's value", where)
			}
		}
	}
}
