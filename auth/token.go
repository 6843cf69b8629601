package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/berth-dev/berth"
)

// Role is what an identity may do. People climb the ladder
// viewer < user < operator < admin; agent (a worker's credential) and peer
// (a federation peer) stand outside it.
type Role string

// The roles.
const (
	RoleViewer   Role = "viewer"   // reads everything
	RoleUser     Role = "user"     // submits and manages own jobs
	RoleOperator Role = "operator" // manages workers and everyone's jobs
	RoleAdmin    Role = "admin"    // everything, tokens and secrets included
	RoleAgent    Role = "agent"    // a worker agent
	RolePeer     Role = "peer"     // a federation peer
)

var ladder = map[Role]int{RoleViewer: 1, RoleUser: 2, RoleOperator: 3, RoleAdmin: 4}

const roleList = "viewer, user, operator, admin, agent, peer"

// ParseRole returns the Role named s (exact, lower case). It returns a
// berth.Invalidf("role", ...) error listing the valid roles for anything else.
func ParseRole(s string) (Role, error) {
	r := Role(s)
	if !r.valid() {
		return "", berth.Invalidf("role", "unknown role %q: want one of %s", s, roleList)
	}
	return r, nil
}

func (r Role) valid() bool {
	_, ok := ladder[r]
	return ok || r == RoleAgent || r == RolePeer
}

// AtLeast reports whether r grants everything min grants: on the people
// ladder, whether r is min or above it; for agent and peer, whether r is
// exactly min. An unknown role is at least nothing. It never fails.
func (r Role) AtLeast(min Role) bool {
	ri, rok := ladder[r]
	mi, mok := ladder[min]
	if rok && mok {
		return ri >= mi
	}
	return r == min && r.valid()
}

// TokenIssuer is the iss claim of every Berth token.
const TokenIssuer = "berth"

// MaxTokenLen is the longest token Parse decodes; longer ones are rejected
// unread.
const MaxTokenLen = 8 << 10

// Leeway for clocks that disagree.
const (
	expiryLeeway  = 30 * time.Second
	issuedAtSkew  = 5 * time.Minute
	tokenHeader   = `{"alg":"HS256","typ":"JWT"}`
	unauthorizedP = "invalid token: "
)

// Claims is the payload of a Berth token.
type Claims struct {
	ID       string `json:"jti"`           // token id, the registry's key
	Subject  string `json:"sub"`           // who: a user name, a worker, a peer
	Role     Role   `json:"role"`          // what it may do
	Worker   string `json:"wrk,omitempty"` // worker host an agent credential is bound to; empty for a join token
	IssuedAt int64  `json:"iat"`           // Unix seconds
	Expires  int64  `json:"exp,omitempty"` // Unix seconds; 0: never
	Issuer   string `json:"iss"`           // always TokenIssuer
}

var encodedHeader = base64.RawURLEncoding.EncodeToString([]byte(tokenHeader))

// Sign returns c as a compact JWS (HS256): base64url(header) "."
// base64url(payload) "." base64url(HMAC-SHA256). An empty Issuer becomes
// TokenIssuer. It returns a berth.Invalidf error, and no token, when c lacks
// an ID or Subject, has an unknown Role or another Issuer, or would make a
// token longer than MaxTokenLen, so every token it returns can Parse.
func (k *Keys) Sign(c Claims) (string, error) {
	if c.Issuer == "" {
		c.Issuer = TokenIssuer
	}
	switch {
	case c.Issuer != TokenIssuer:
		return "", berth.Invalidf("iss", "issuer must be %q", TokenIssuer)
	case c.ID == "":
		return "", berth.Invalidf("jti", "token id is required")
	case c.Subject == "":
		return "", berth.Invalidf("sub", "subject is required")
	case !c.Role.valid():
		return "", berth.Invalidf("role", "unknown role %q: want one of %s", c.Role, roleList)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		return "", fmt.Errorf("encode claims: %w", err)
	}
	payload := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	input := encodedHeader + "." + base64.RawURLEncoding.EncodeToString(payload)
	tok := input + "." + base64.RawURLEncoding.EncodeToString(k.mac(input))
	if len(tok) > MaxTokenLen {
		return "", berth.Invalidf("sub", "claims too long: the token would be %d bytes, the limit is %d", len(tok), MaxTokenLen)
	}
	return tok, nil
}

func (k *Keys) mac(input string) []byte {
	m := hmac.New(sha256.New, k.sign)
	m.Write([]byte(input))
	return m.Sum(nil)
}

func unauthorized(format string, args ...any) *berth.Error {
	return berth.Errorf(berth.ECodeUnauthorized, unauthorizedP+format, args...)
}

// Parse verifies token against k at time now and returns its claims. It is
// strict: any deviation from what Sign produces, a bad signature, an
// algorithm other than HS256, an expiry more than 30 s past or an issue time
// more than 5 min ahead is rejected with a *berth.Error of code
// ECodeUnauthorized whose message says why and never contains the token.
func (k *Keys) Parse(token string, now time.Time) (Claims, error) {
	if len(token) > MaxTokenLen {
		return Claims{}, unauthorized("longer than %d bytes", MaxTokenLen)
	}
	segs := strings.Split(token, ".")
	if len(segs) != 3 {
		return Claims{}, unauthorized("want three dot-separated segments, got %d", len(segs))
	}
	var raw [3][]byte
	for i, name := range [3]string{"header", "payload", "signature"} {
		b, err := decodeSegment(segs[i])
		if err != nil {
			return Claims{}, unauthorized("%s is not unpadded base64url", name)
		}
		raw[i] = b
	}

	hdr, err := decodeObject(raw[0])
	if err != nil {
		return Claims{}, unauthorized("header: %v", err)
	}
	if _, ok := hdr["crit"]; ok {
		return Claims{}, unauthorized("header has a crit parameter; none is supported")
	}
	var alg string
	if err := strictString(hdr["alg"], &alg); err != nil || alg != "HS256" {
		return Claims{}, unauthorized("algorithm must be HS256")
	}
	if t, ok := hdr["typ"]; ok {
		var typ string
		if err := strictString(t, &typ); err != nil || typ != "JWT" {
			return Claims{}, unauthorized("header typ must be JWT")
		}
	}
	for name := range hdr {
		if name != "alg" && name != "typ" {
			return Claims{}, unauthorized("header has an unsupported parameter")
		}
	}

	if !hmac.Equal(raw[2], k.mac(segs[0]+"."+segs[1])) {
		return Claims{}, unauthorized("bad signature")
	}

	c, err := decodeClaims(raw[1])
	if err != nil {
		return Claims{}, unauthorized("payload: %v", err)
	}
	if c.Expires != 0 && now.Add(-expiryLeeway).Unix() > c.Expires {
		return Claims{}, unauthorized("expired at %s", time.Unix(c.Expires, 0).UTC().Format(time.RFC3339))
	}
	if c.IssuedAt > now.Add(issuedAtSkew).Unix() {
		return Claims{}, unauthorized("issued in the future (check the clocks)")
	}
	return c, nil
}

// decodeSegment decodes unpadded base64url, refusing anything the standard
// decoder would silently skip (newlines) or accept loosely (padding, stray
// bits).
// Peek returns the claims of token without checking its signature or
// expiry, for a client to see whom its own token names; ok is false when
// token is not a well-formed Berth token. Never trust what it returns.
func Peek(token string) (c Claims, ok bool) {
	parts := strings.Split(token, ".")
	if len(token) > MaxTokenLen || len(parts) != 3 {
		return Claims{}, false
	}
	payload, err := decodeSegment(parts[1])
	if err != nil {
		return Claims{}, false
	}
	c, err = decodeClaims(payload)
	return c, err == nil
}

func decodeSegment(s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return nil, errors.New("bad character")
		}
	}
	return base64.RawURLEncoding.Strict().DecodeString(s)
}

var (
	errNotObject = errors.New("not a JSON object")
	errDuplicate = errors.New("duplicate member")
	errWrongType = errors.New("wrong type")
)

// decodeObject decodes one JSON object of valid UTF-8, keeping each member's
// raw value and refusing duplicate members and trailing data.
func decodeObject(b []byte) (map[string]json.RawMessage, error) {
	if !utf8.Valid(b) {
		return nil, errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, errNotObject
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errNotObject
	}
	m := make(map[string]json.RawMessage)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, errNotObject
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errNotObject
		}
		if _, dup := m[key]; dup {
			return nil, errDuplicate
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, errNotObject
		}
		m[key] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, errNotObject
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	return m, nil
}

func strictString(raw json.RawMessage, dst *string) error {
	if len(raw) == 0 || raw[0] != '"' {
		return errWrongType
	}
	return json.Unmarshal(raw, dst)
}

func strictInt(raw json.RawMessage, dst *int64) error {
	if len(raw) == 0 || !(raw[0] == '-' || '0' <= raw[0] && raw[0] <= '9') {
		return errWrongType
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return errWrongType
	}
	return nil
}

// decodeClaims decodes a payload member by member with exact names and types.
func decodeClaims(b []byte) (Claims, error) {
	m, err := decodeObject(b)
	if err != nil {
		return Claims{}, err
	}
	var c Claims
	var role string
	strs := []struct {
		name     string
		dst      *string
		required bool
	}{
		{"jti", &c.ID, true},
		{"sub", &c.Subject, true},
		{"role", &role, true},
		{"wrk", &c.Worker, false},
		{"iss", &c.Issuer, true},
	}
	for _, f := range strs {
		raw, ok := m[f.name]
		if !ok {
			if f.required {
				return Claims{}, fmt.Errorf("%s is missing", f.name)
			}
			continue
		}
		if err := strictString(raw, f.dst); err != nil {
			return Claims{}, fmt.Errorf("%s must be a string", f.name)
		}
		if f.required && *f.dst == "" {
			return Claims{}, fmt.Errorf("%s is empty", f.name)
		}
		delete(m, f.name)
	}
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"iat", &c.IssuedAt}, {"exp", &c.Expires}} {
		raw, ok := m[f.name]
		if !ok {
			continue
		}
		if err := strictInt(raw, f.dst); err != nil {
			return Claims{}, fmt.Errorf("%s must be an integer", f.name)
		}
		delete(m, f.name)
	}
	if len(m) != 0 {
		return Claims{}, errors.New("unknown claim")
	}
	if c.Issuer != TokenIssuer {
		return Claims{}, fmt.Errorf("issuer must be %q", TokenIssuer)
	}
	c.Role = Role(role)
	if !c.Role.valid() {
		return Claims{}, errors.New("unknown role")
	}
	return c, nil
}
