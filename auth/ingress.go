package auth

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
)

// Ways an Identity was established (Identity.Via).
const (
	ViaLoopback = "loopback"
	ViaCIDR     = "cidr"
	ViaToken    = "token"
)

// Identity is who a request comes from, as Ingress established it.
type Identity struct {
	Name    string // token subject, "local", or "cidr:" + prefix
	Role    Role
	Worker  string // the worker an agent token is bound to
	TokenID string // the token's jti; empty unless Via is "token"
	Via     string // ViaLoopback, ViaCIDR or ViaToken
}

// TokenChecker is the server's token registry. Check returns nil when the
// token c.ID is known and not revoked, a *berth.Error of code
// ECodeUnauthorized when it is unknown or revoked, and any other error when
// the registry cannot answer.
type TokenChecker interface {
	Check(c Claims) error
}

// CIDRRule grants Role to requests whose peer address lies in Net.
type CIDRRule struct {
	Net  netip.Prefix
	Role Role
}

// ParseCIDRRule parses "PREFIX=ROLE", for example "10.0.0.0/8=viewer"; a
// bare address stands for itself alone. It returns a
// berth.Invalidf("--allow", ...) error when the form, the prefix (host bits
// set included) or the role is wrong, or the role is agent or peer (address
// rules grant people roles only).
func ParseCIDRRule(s string) (CIDRRule, error) {
	pfx, roleStr, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return CIDRRule{}, berth.Invalidf("--allow", "%q: want PREFIX=ROLE, for example 10.0.0.0/8=viewer", s)
	}
	var p netip.Prefix
	if strings.Contains(pfx, "/") {
		var err error
		p, err = netip.ParsePrefix(pfx)
		if err != nil {
			return CIDRRule{}, berth.Invalidf("--allow", "%q: bad prefix", s).WithCause(err)
		}
	} else {
		a, err := netip.ParseAddr(pfx)
		if err != nil {
			return CIDRRule{}, berth.Invalidf("--allow", "%q: bad address", s).WithCause(err)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Zone() != "" {
		return CIDRRule{}, berth.Invalidf("--allow", "%q: zones are not supported", s)
	}
	if p.Addr().Is4In6() {
		return CIDRRule{}, berth.Invalidf("--allow", "%q: write IPv4 prefixes in dotted form", s)
	}
	if m := p.Masked(); m != p {
		return CIDRRule{}, berth.Invalidf("--allow", "%q: host bits are set; did you mean %s?", s, m)
	}
	role, err := ParseRole(roleStr)
	if err != nil {
		return CIDRRule{}, berth.Invalidf("--allow", "%q: unknown role %q: want one of viewer, user, operator, admin", s, roleStr)
	}
	if _, ok := ladder[role]; !ok {
		return CIDRRule{}, berth.Invalidf("--allow", "%q: address rules grant viewer, user, operator or admin only", s)
	}
	return CIDRRule{Net: p, Role: role}, nil
}

// Ingress turns requests into identities through an ordered stack of layers;
// what no layer admits is refused. Configure it before use; it is then safe
// for concurrent use.
type Ingress struct {
	// TrustLoopback is the role given to requests from a loopback address
	// that carry no forwarding header; "" turns the layer off.
	TrustLoopback Role
	// Allow grants roles by peer address; the first matching rule wins.
	Allow []CIDRRule
	// Keys verifies tokens; nil refuses every token.
	Keys *Keys
	// Tokens decides whether a verified token is still valid; nil refuses
	// every token (fail closed).
	Tokens TokenChecker
	// Now is the clock for token expiry; nil means time.Now.
	Now func() time.Time
}

// forwardingHeaders mark a request relayed by a proxy: its peer address is
// the proxy's, not the client's.
var forwardingHeaders = []string{"X-Forwarded-For", "X-Real-Ip", "Forwarded", "X-Forwarded-Host"}

// MsgAuthRequired is the message of the error Authenticate returns when no
// layer admits a request.
const MsgAuthRequired = "authentication required: send Authorization: Bearer TOKEN (berth token create)"

// Authenticate returns who r comes from. The layers, in order: a bearer token
// in the Authorization header (when the header is present it decides alone: a
// bad token is refused even from loopback); the loopback address when
// TrustLoopback is set and no forwarding header (X-Forwarded-For, X-Real-IP,
// Forwarded, X-Forwarded-Host) is present; the first Allow rule containing
// the peer address (r.RemoteAddr only, forwarding headers are never
// believed). It returns a *berth.Error of code ECodeUnauthorized when the
// header is malformed, the token fails Parse or Tokens.Check, or no layer
// admits r; an error of another code from Tokens.Check is returned wrapped.
func (in *Ingress) Authenticate(r *http.Request) (Identity, error) {
	if vals, ok := r.Header["Authorization"]; ok {
		return in.token(vals)
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		return in.CheckToken(c.Value) // the dashboard's sign-in: checked as a bearer token
	}
	addr, ok := peerAddr(r.RemoteAddr)
	if !ok {
		return Identity{}, berth.Errorf(berth.ECodeUnauthorized, MsgAuthRequired)
	}
	if in.TrustLoopback != "" && addr.IsLoopback() && !forwarded(r) {
		return Identity{Name: "local", Role: in.TrustLoopback, Via: ViaLoopback}, nil
	}
	for _, rule := range in.Allow {
		if rule.Net.Contains(addr) {
			return Identity{Name: "cidr:" + rule.Net.String(), Role: rule.Role, Via: ViaCIDR}, nil
		}
	}
	return Identity{}, berth.Errorf(berth.ECodeUnauthorized, MsgAuthRequired)
}

// SessionCookie is the cookie the dashboard keeps a signed-in browser's
// token in (HttpOnly, SameSite=Strict); Authenticate takes it as a bearer
// token when a request has no Authorization header.
const SessionCookie = "berth_token"

func (in *Ingress) token(vals []string) (Identity, error) {
	if len(vals) != 1 {
		return Identity{}, berth.Errorf(berth.ECodeUnauthorized, "send exactly one Authorization header")
	}
	scheme, tok, _ := strings.Cut(vals[0], " ")
	tok = strings.TrimLeft(tok, " ")
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return Identity{}, berth.Errorf(berth.ECodeUnauthorized, "the Authorization header must be \"Bearer TOKEN\"")
	}
	return in.CheckToken(tok)
}

// CheckToken returns the identity of a bearer token: its signature,
// claims and registry record checked as for an Authorization header, with
// the same errors.
func (in *Ingress) CheckToken(tok string) (Identity, error) {
	if in.Keys == nil || in.Tokens == nil {
		return Identity{}, berth.Errorf(berth.ECodeUnauthorized, "this server does not accept tokens")
	}
	now := time.Now
	if in.Now != nil {
		now = in.Now
	}
	c, err := in.Keys.Parse(tok, now())
	if err != nil {
		return Identity{}, err
	}
	if err := in.Tokens.Check(c); err != nil {
		var be *berth.Error
		if errors.As(err, &be) {
			return Identity{}, err
		}
		return Identity{}, fmt.Errorf("check token: %w", err)
	}
	return Identity{Name: c.Subject, Role: c.Role, Worker: c.Worker, TokenID: c.ID, Via: ViaToken}, nil
}

// peerAddr returns the IP of a RemoteAddr ("host:port" or a bare address),
// with IPv4-mapped IPv6 unmapped and any zone dropped.
func peerAddr(remote string) (netip.Addr, bool) {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

func forwarded(r *http.Request) bool {
	for _, h := range forwardingHeaders {
		if _, ok := r.Header[h]; ok {
			return true
		}
	}
	return false
}

var crossOrigin = http.NewCrossOriginProtection()

// SameOrigin refuses state-changing requests a browser sent from another
// origin. GET, HEAD and OPTIONS pass, as does any request carrying an
// Authorization header (browsers cannot add one cross-origin without a CORS
// preflight, which Berth never grants) and any request without Origin and
// Sec-Fetch-Site (not from a browser). It returns a *berth.Error of code
// ECodeForbidden when net/http's CrossOriginProtection rejects r.
func SameOrigin(r *http.Request) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if r.Header.Get("Authorization") != "" {
		return nil
	}
	if err := crossOrigin.Check(r); err != nil {
		return berth.Errorf(berth.ECodeForbidden, "cross-origin request refused (%v): a page from another site may not change state here; API clients send Authorization: Bearer TOKEN", err)
	}
	return nil
}

// Limiter is a token-bucket rate limiter keyed by string (a client address,
// a token id). Buckets idle long enough to be full again are dropped, at most
// once a minute, and the number of buckets is capped, so memory stays
// bounded. It is safe for concurrent use.
type Limiter struct {
	rate  float64 // tokens per second
	burst float64
	now   func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets caps the Limiter's memory; past it an arbitrary bucket is
// dropped (its key starts afresh, with a full bucket).
const maxBuckets = 1 << 16

// NewLimiter returns a Limiter allowing perSecond requests per second per key
// on average and bursts of up to burst (at least 1); perSecond <= 0 allows
// everything. now is the clock; nil means time.Now. It never fails.
func NewLimiter(perSecond float64, burst int, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{
		rate:    perSecond,
		burst:   float64(max(burst, 1)),
		now:     now,
		buckets: make(map[string]*bucket),
	}
}

// Allow takes one token from key's bucket. It returns true when there was
// one, else false and how long until there will be. A nil Limiter, or one
// with a non-positive rate, always allows.
func (l *Limiter) Allow(key string) (ok bool, retryAfter time.Duration) {
	if l == nil || !(l.rate > 0) {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b, found := l.buckets[key]
	if !found {
		if len(l.buckets) >= maxBuckets {
			for k := range l.buckets {
				delete(l.buckets, k)
				break
			}
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	} else if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(l.burst, b.tokens+elapsed.Seconds()*l.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := math.Ceil((1 - b.tokens) / l.rate * float64(time.Second))
	if wait >= math.MaxInt64 {
		return false, time.Duration(math.MaxInt64)
	}
	return false, time.Duration(wait)
}

// sweep drops buckets idle long enough to have refilled, at most once a
// minute. l.mu is held.
func (l *Limiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Minute {
		return
	}
	l.lastSweep = now
	for k, b := range l.buckets {
		if now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// The rights of an identity's role (api and web enforce them; see
// docs/security.md). People are viewers, users, operators and admins.

// IsPerson reports whether id is a person: viewer, user, operator or
// admin.
func (id Identity) IsPerson() bool {
	switch id.Role {
	case RoleViewer, RoleUser, RoleOperator, RoleAdmin:
		return true
	}
	return false
}

// SeesAllJobs reports whether id reads every user's jobs (viewers,
// operators, admins), not only its own.
func (id Identity) SeesAllJobs() bool { return id.Role == RoleViewer || id.Role.AtLeast(RoleOperator) }

// ActsOnAllJobs reports whether id acts on every job, worker and quota
// (operators, admins).
func (id Identity) ActsOnAllJobs() bool { return id.Role.AtLeast(RoleOperator) }

// CanSubmit reports whether id submits jobs (users, operators, admins).
// A peer does not: the jobs it hands over come through the federation's
// handoff endpoint only.
func (id Identity) CanSubmit() bool {
	return id.Role == RoleUser || id.Role.AtLeast(RoleOperator)
}

// HoldsSecrets reports whether id manages secrets of its own (users,
// operators, admins). A peer, another cluster's credential, holds none:
// its jobs run here as the peer, and their secrets stay in its own
// cluster.
func (id Identity) HoldsSecrets() bool { return id.Role == RoleUser || id.Role.AtLeast(RoleOperator) }

// IsAdmin reports whether id is an admin.
func (id Identity) IsAdmin() bool { return id.Role == RoleAdmin }
