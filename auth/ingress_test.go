package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/fakeclock"
)

// fakeRegistry knows every token except the revoked ones.
type fakeRegistry struct {
	revoked map[string]bool
	err     error
}

func (f fakeRegistry) Check(c Claims) error {
	if f.err != nil {
		return f.err
	}
	if f.revoked[c.ID] {
		return berth.Errorf(berth.ECodeUnauthorized, "token %s was revoked", c.ID)
	}
	return nil
}

func mustRule(t *testing.T, s string) CIDRRule {
	t.Helper()
	r, err := ParseCIDRRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseCIDRRule(t *testing.T) {
	t.Parallel()
	r, err := ParseCIDRRule("10.0.0.0/8=viewer")
	if err != nil {
		t.Fatal(err)
	}
	if r.Net != netip.MustParsePrefix("10.0.0.0/8") || r.Role != RoleViewer {
		t.Errorf("got %+v", r)
	}
	r, err = ParseCIDRRule("fd00::1=operator")
	if err != nil {
		t.Fatal(err)
	}
	if r.Net != netip.MustParsePrefix("fd00::1/128") || r.Role != RoleOperator {
		t.Errorf("bare address: got %+v", r)
	}
	for _, bad := range []string{
		"10.0.0.0/8", "10.0.0.0/8=", "=viewer", "10.0.0.0/33=viewer", "10.1.2.3/8=viewer",
		"10.0.0.0/8=root", "10.0.0.0/8=agent", "10.0.0.0/8=peer", "example.com=viewer", "::ffff:10.0.0.0/104=viewer",
	} {
		_, err := ParseCIDRRule(bad)
		var be *berth.Error
		if !errors.As(err, &be) || be.Code != berth.ECodeInvalid || be.Field != "--allow" {
			t.Errorf("ParseCIDRRule(%q) = %v, want invalid --allow", bad, err)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	k := testKeys(t, 1)
	sign := func(c Claims) string {
		t.Helper()
		tok, err := k.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	now := testNow.Unix()
	userTok := sign(Claims{ID: "tok-u", Subject: "alice", Role: RoleUser, IssuedAt: now, Expires: now + 3600})
	agentTok := sign(Claims{ID: "tok-a", Subject: "gpu-7", Role: RoleAgent, Worker: "gpu-7", IssuedAt: now})
	expiredTok := sign(Claims{ID: "tok-e", Subject: "alice", Role: RoleUser, IssuedAt: now - 7200, Expires: now - 3600})
	revokedTok := sign(Claims{ID: "tok-r", Subject: "bob", Role: RoleAdmin, IssuedAt: now})
	foreignTok, err := testKeys(t, 2).Sign(Claims{ID: "tok-u", Subject: "alice", Role: RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}

	in := &Ingress{
		TrustLoopback: RoleAdmin,
		Allow:         []CIDRRule{mustRule(t, "10.1.0.0/16=operator"), mustRule(t, "10.0.0.0/8=viewer"), mustRule(t, "fd00::/8=user")},
		Keys:          k,
		Tokens:        fakeRegistry{revoked: map[string]bool{"tok-r": true}},
		Now:           func() time.Time { return testNow },
	}
	noLoopback := *in
	noLoopback.TrustLoopback = ""

	tests := []struct {
		name    string
		in      *Ingress
		remote  string
		headers map[string]string
		want    Identity // zero: refused
		wantMsg string
	}{
		{name: "no token, remote", in: in, remote: "203.0.113.9:5000", wantMsg: "authentication required"},
		{name: "loopback, no headers", in: in, remote: "127.0.0.1:5000", want: Identity{Name: "local", Role: RoleAdmin, Via: "loopback"}},
		{name: "loopback 127.0.0.2", in: in, remote: "127.0.0.2:5000", want: Identity{Name: "local", Role: RoleAdmin, Via: "loopback"}},
		{name: "loopback ::1", in: in, remote: "[::1]:5000", want: Identity{Name: "local", Role: RoleAdmin, Via: "loopback"}},
		{name: "loopback v4-mapped", in: in, remote: "[::ffff:127.0.0.1]:5000", want: Identity{Name: "local", Role: RoleAdmin, Via: "loopback"}},
		{name: "loopback but layer off", in: &noLoopback, remote: "127.0.0.1:5000", wantMsg: "authentication required"},
		{name: "loopback with X-Forwarded-For", in: in, remote: "127.0.0.1:5000", headers: map[string]string{"X-Forwarded-For": "203.0.113.9"}, wantMsg: "authentication required"},
		{name: "loopback with X-Real-IP", in: in, remote: "127.0.0.1:5000", headers: map[string]string{"X-Real-IP": "203.0.113.9"}, wantMsg: "authentication required"},
		{name: "loopback with Forwarded", in: in, remote: "[::1]:5000", headers: map[string]string{"Forwarded": "for=203.0.113.9"}, wantMsg: "authentication required"},
		{name: "loopback with empty X-Forwarded-For", in: in, remote: "127.0.0.1:5000", headers: map[string]string{"X-Forwarded-For": ""}, wantMsg: "authentication required"},
		{name: "forged X-Forwarded-For 127.0.0.1 from remote", in: in, remote: "192.0.2.3:5000", headers: map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Real-IP": "127.0.0.1"}, wantMsg: "authentication required"},
		{name: "forged X-Forwarded-For 10.1.2.3 from remote", in: in, remote: "192.0.2.3:5000", headers: map[string]string{"X-Forwarded-For": "10.1.2.3"}, wantMsg: "authentication required"},
		{name: "CIDR in, first rule wins", in: in, remote: "10.1.2.3:5000", want: Identity{Name: "cidr:10.1.0.0/16", Role: RoleOperator, Via: "cidr"}},
		{name: "CIDR in, second rule", in: in, remote: "10.200.2.3:5000", want: Identity{Name: "cidr:10.0.0.0/8", Role: RoleViewer, Via: "cidr"}},
		{name: "CIDR in, v4-mapped peer", in: in, remote: "[::ffff:10.9.9.9]:5000", want: Identity{Name: "cidr:10.0.0.0/8", Role: RoleViewer, Via: "cidr"}},
		{name: "CIDR in, IPv6 with zone", in: in, remote: "[fd00::5%eth0]:5000", want: Identity{Name: "cidr:fd00::/8", Role: RoleUser, Via: "cidr"}},
		{name: "CIDR in despite forwarding header", in: in, remote: "10.1.2.3:5000", headers: map[string]string{"X-Forwarded-For": "203.0.113.9"}, want: Identity{Name: "cidr:10.1.0.0/16", Role: RoleOperator, Via: "cidr"}},
		{name: "CIDR out", in: in, remote: "11.0.0.1:5000", wantMsg: "authentication required"},
		{name: "unparsable remote", in: in, remote: "@", wantMsg: "authentication required"},
		{name: "token", in: in, remote: "203.0.113.9:5000", headers: map[string]string{"Authorization": "Bearer " + userTok}, want: Identity{Name: "alice", Role: RoleUser, TokenID: "tok-u", Via: "token"}},
		{name: "agent token", in: in, remote: "203.0.113.9:5000", headers: map[string]string{"Authorization": "Bearer " + agentTok}, want: Identity{Name: "gpu-7", Role: RoleAgent, Worker: "gpu-7", TokenID: "tok-a", Via: "token"}},
		{name: "token + loopback: the token wins", in: in, remote: "127.0.0.1:5000", headers: map[string]string{"Authorization": "Bearer " + userTok}, want: Identity{Name: "alice", Role: RoleUser, TokenID: "tok-u", Via: "token"}},
		{name: "token + CIDR: the token wins", in: in, remote: "10.1.2.3:5000", headers: map[string]string{"Authorization": "bearer " + userTok}, want: Identity{Name: "alice", Role: RoleUser, TokenID: "tok-u", Via: "token"}},
		{name: "expired token", in: in, remote: "203.0.113.9:5000", headers: map[string]string{"Authorization": "Bearer " + expiredTok}, wantMsg: "expired"},
		{name: "expired token from loopback: no fallback", in: in, remote: "127.0.0.1:5000", headers: map[string]string{"Authorization": "Bearer " + expiredTok}, wantMsg: "expired"},
		{name: "revoked token", in: in, remote: "203.0.113.9:5000", headers: map[string]string{"Authorization": "Bearer " + revokedTok}, wantMsg: "revoked"},
		{name: "revoked token from loopback: no fallback", in: in, remote: "127.0.0.1:5000", headers: map[string]string{"Authorization": "Bearer " + revokedTok}, wantMsg: "revoked"},
		{name: "token signed by another key", in: in, remote: "10.1.2.3:5000", headers: map[string]string{"Authorization": "Bearer " + foreignTok}, wantMsg: "bad signature"},
		{name: "Basic credentials", in: in, remote: "127.0.0.1:5000", headers: map[string]string{"Authorization": "Basic YWxpY2U6cHc="}, wantMsg: "Bearer TOKEN"},
		{name: "Bearer without token", in: in, remote: "127.0.0.1:5000", headers: map[string]string{"Authorization": "Bearer "}, wantMsg: "Bearer TOKEN"},
		{name: "empty Authorization", in: in, remote: "127.0.0.1:5000", headers: map[string]string{"Authorization": ""}, wantMsg: "Bearer TOKEN"},
		{name: "raw token without scheme", in: in, remote: "127.0.0.1:5000", headers: map[string]string{"Authorization": userTok}, wantMsg: "Bearer TOKEN"},
		{name: "no registry: tokens refused", in: &Ingress{Keys: k, Now: in.Now}, remote: "127.0.0.1:5000", headers: map[string]string{"Authorization": "Bearer " + userTok}, wantMsg: "does not accept tokens"},
		{name: "nothing configured", in: &Ingress{}, remote: "127.0.0.1:5000", wantMsg: "authentication required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodGet, "/api/v1/jobs", nil)
			r.RemoteAddr = tt.remote
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			id, err := tt.in.Authenticate(r)
			if tt.want != (Identity{}) {
				if err != nil {
					t.Fatalf("want %+v, got %v", tt.want, err)
				}
				if id != tt.want {
					t.Fatalf("identity = %+v, want %+v", id, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("want refused, got %+v", id)
			}
			if id != (Identity{}) {
				t.Errorf("a refusal must return no identity, got %+v", id)
			}
			if berth.ErrorCode(err) != berth.ECodeUnauthorized {
				t.Errorf("code %s, want %s (%v)", berth.ErrorCode(err), berth.ECodeUnauthorized, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q should say %q", err, tt.wantMsg)
			}
		})
	}
}

func TestAuthenticateRegistryFailure(t *testing.T) {
	t.Parallel()
	k := testKeys(t, 1)
	tok, err := k.Sign(Claims{ID: "t", Subject: "alice", Role: RoleUser, IssuedAt: testNow.Unix()})
	if err != nil {
		t.Fatal(err)
	}
	down := errors.New("database is locked")
	in := &Ingress{TrustLoopback: RoleAdmin, Keys: k, Tokens: fakeRegistry{err: down}, Now: func() time.Time { return testNow }}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "127.0.0.1:1"
	r.Header.Set("Authorization", "Bearer "+tok)
	id, err := in.Authenticate(r)
	if !errors.Is(err, down) || id != (Identity{}) {
		t.Fatalf("Authenticate = %+v, %v; want the registry's error, wrapped", id, err)
	}
}

func TestSameOrigin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		method  string
		headers map[string]string
		refused bool
	}{
		{"GET cross-site", http.MethodGet, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, false},
		{"HEAD cross-site", http.MethodHead, map[string]string{"Sec-Fetch-Site": "cross-site"}, false},
		{"OPTIONS cross-site", http.MethodOptions, map[string]string{"Sec-Fetch-Site": "cross-site"}, false},
		{"POST non-browser", http.MethodPost, nil, false},
		{"POST same-origin", http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://berth.local:7070"}, false},
		{"POST typed URL", http.MethodPost, map[string]string{"Sec-Fetch-Site": "none"}, false},
		{"POST Origin equals Host", http.MethodPost, map[string]string{"Origin": "http://berth.local:7070"}, false},
		{"POST cross-site", http.MethodPost, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, true},
		{"POST same-site", http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://other.berth.local"}, true},
		{"DELETE Origin differs from Host", http.MethodDelete, map[string]string{"Origin": "https://evil.example"}, true},
		{"PUT Origin other port", http.MethodPut, map[string]string{"Origin": "http://berth.local:8080"}, true},
		{"POST cross-site with token", http.MethodPost, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example", "Authorization": "Bearer x"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(tt.method, "http://berth.local:7070/api/v1/jobs", nil)
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			err := SameOrigin(r)
			if !tt.refused {
				if err != nil {
					t.Fatalf("want passed, got %v", err)
				}
				return
			}
			var be *berth.Error
			if !errors.As(err, &be) || be.Code != berth.ECodeForbidden {
				t.Fatalf("want forbidden *berth.Error, got %v", err)
			}
			if !strings.Contains(be.Message, "cross-origin request refused") {
				t.Errorf("message %q", be.Message)
			}
		})
	}
}

func TestLimiter(t *testing.T) {
	t.Parallel()
	clock := fakeclock.New(testNow)
	l := NewLimiter(2, 3, clock.Now) // 2 per second, bursts of 3

	for i := range 3 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("request %d within the burst was denied", i)
		}
	}
	ok, retry := l.Allow("a")
	if ok {
		t.Fatal("burst exhausted: want denied")
	}
	if retry != 500*time.Millisecond {
		t.Errorf("retryAfter = %v, want 1/rate = 500ms", retry)
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Error("key b must not be limited by key a")
	}

	clock.Advance(250 * time.Millisecond)
	if ok, retry := l.Allow("a"); ok || retry != 250*time.Millisecond {
		t.Errorf("half refilled: Allow = %v, %v; want false, 250ms", ok, retry)
	}
	clock.Advance(250 * time.Millisecond)
	if ok, _ := l.Allow("a"); !ok {
		t.Error("after retryAfter: want allowed")
	}
	if ok, _ := l.Allow("a"); ok {
		t.Error("one token refilled, one spent: want denied")
	}

	clock.Advance(time.Hour)
	for i := range 3 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("after a long idle, request %d of the burst was denied", i)
		}
	}
	if ok, _ := l.Allow("a"); ok {
		t.Error("refill must not exceed the burst")
	}
}

func TestLimiterDropsIdleBuckets(t *testing.T) {
	t.Parallel()
	clock := fakeclock.New(testNow)
	l := NewLimiter(1, 5, clock.Now)
	for i := range 100 {
		l.Allow(string(rune('a'+i%26)) + string(rune('A'+i/26)))
	}
	if n := len(l.buckets); n != 100 {
		t.Fatalf("%d buckets, want 100", n)
	}
	clock.Advance(2 * time.Minute) // everything refilled, a sweep is due
	l.Allow("fresh")
	if n := len(l.buckets); n != 1 {
		t.Errorf("after the sweep %d buckets remain, want only the fresh one", n)
	}
}

func TestLimiterUnlimitedAndConcurrent(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{0, -1} {
		l := NewLimiter(rate, 1, nil)
		for range 100 {
			if ok, retry := l.Allow("k"); !ok || retry != 0 {
				t.Fatalf("rate %v: denied", rate)
			}
		}
	}
	var nilLimiter *Limiter
	if ok, _ := nilLimiter.Allow("k"); !ok {
		t.Error("nil Limiter must allow")
	}

	clock := fakeclock.New(testNow)
	l := NewLimiter(1, 10, clock.Now)
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if ok, _ := l.Allow("shared"); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if allowed != 10 {
		t.Errorf("%d of 160 concurrent requests allowed with a frozen clock, want exactly the burst 10", allowed)
	}
}
