package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

var testNow = time.Unix(1_700_000_000, 0)

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// forge builds a token by hand: any header, any payload, signed with h keyed
// by key.
func forge(key []byte, h func() hash.Hash, header, payload string) string {
	input := b64(header) + "." + b64(payload)
	m := hmac.New(h, key)
	m.Write([]byte(input))
	return input + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

const hs256 = `{"alg":"HS256","typ":"JWT"}`

func payload(role string, exp int64, extra string) string {
	return fmt.Sprintf(`{"jti":"tok1","sub":"alice","role":%q,"iat":%d,"exp":%d,"iss":"berth"%s}`,
		role, testNow.Unix(), exp, extra)
}

// strayBits sets the unused low bit of the last character of an unpadded
// base64url segment: a lax decoder reads the same bytes, a strict one refuses.
func strayBits(seg string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, seg[len(seg)-1])
	return seg[:len(seg)-1] + string(alphabet[last^1])
}

func TestRoleAtLeast(t *testing.T) {
	t.Parallel()
	people := []Role{RoleViewer, RoleUser, RoleOperator, RoleAdmin}
	for i, r := range people {
		for j, min := range people {
			if got := r.AtLeast(min); got != (i >= j) {
				t.Errorf("%s.AtLeast(%s) = %v", r, min, got)
			}
		}
		for _, other := range []Role{RoleAgent, RolePeer} {
			if r.AtLeast(other) || other.AtLeast(r) {
				t.Errorf("%s and %s must not be comparable", r, other)
			}
		}
	}
	if !RoleAgent.AtLeast(RoleAgent) || !RolePeer.AtLeast(RolePeer) {
		t.Error("agent and peer must be at least themselves")
	}
	if RoleAgent.AtLeast(RolePeer) || RolePeer.AtLeast(RoleAgent) {
		t.Error("agent and peer must not be comparable")
	}
	if Role("root").AtLeast(Role("root")) || Role("").AtLeast("") {
		t.Error("unknown roles are at least nothing")
	}
}

func TestParseRole(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"viewer", "user", "operator", "admin", "agent", "peer"} {
		r, err := ParseRole(s)
		if err != nil || string(r) != s {
			t.Errorf("ParseRole(%q) = %q, %v", s, r, err)
		}
	}
	for _, s := range []string{"", "root", "Admin", " user"} {
		_, err := ParseRole(s)
		var be *berth.Error
		if !errors.As(err, &be) || be.Code != berth.ECodeInvalid || be.Field != "role" {
			t.Errorf("ParseRole(%q): want invalid role error, got %v", s, err)
			continue
		}
		if !strings.Contains(be.Message, "viewer, user, operator, admin, agent, peer") {
			t.Errorf("ParseRole(%q): message %q should list the roles", s, be.Message)
		}
	}
}

func TestSignFormat(t *testing.T) {
	t.Parallel()
	k := testKeys(t, 1)
	tok, err := k.Sign(Claims{ID: "t1", Subject: "alice", Role: RoleUser, IssuedAt: 5})
	if err != nil {
		t.Fatal(err)
	}
	segs := strings.Split(tok, ".")
	if len(segs) != 3 {
		t.Fatalf("token has %d segments", len(segs))
	}
	if h, _ := base64.RawURLEncoding.DecodeString(segs[0]); string(h) != `{"alg":"HS256","typ":"JWT"}` {
		t.Errorf("header = %s", h)
	}
	p, _ := base64.RawURLEncoding.DecodeString(segs[1])
	if want := `{"jti":"t1","sub":"alice","role":"user","iat":5,"iss":"berth"}`; string(p) != want {
		t.Errorf("payload = %s, want %s", p, want)
	}
	m := hmac.New(sha256.New, k.sign)
	m.Write([]byte(segs[0] + "." + segs[1]))
	if segs[2] != base64.RawURLEncoding.EncodeToString(m.Sum(nil)) {
		t.Error("signature is not HMAC-SHA256 of header.payload with the signing key")
	}
	if strings.Contains(tok, "=") {
		t.Error("token must not be padded")
	}

	for _, c := range []Claims{
		{Subject: "a", Role: RoleUser},
		{ID: "t", Role: RoleUser},
		{ID: "t", Subject: "a", Role: "root"},
		{ID: "t", Subject: "a", Role: RoleUser, Issuer: "other"},
		{ID: "t", Subject: strings.Repeat("a", MaxTokenLen), Role: RoleUser},
	} {
		if tok, err := k.Sign(c); err == nil {
			t.Errorf("Sign(%+v) = %q, want error", c, tok)
		}
	}
}

func TestSignParseRoundTrip(t *testing.T) {
	t.Parallel()
	k := testKeys(t, 1)
	c := Claims{ID: "t1", Subject: "gpu-7 <&>", Role: RoleAgent, Worker: "gpu-7", IssuedAt: testNow.Unix(), Expires: testNow.Add(time.Hour).Unix()}
	tok, err := k.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := k.Parse(tok, testNow)
	if err != nil {
		t.Fatal(err)
	}
	c.Issuer = TokenIssuer
	if got != c {
		t.Errorf("Parse = %+v, want %+v", got, c)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	k := testKeys(t, 1)
	other := testKeys(t, 2)
	now := testNow.Unix()
	valid := forge(k.sign, sha256.New, hs256, payload("user", now+3600, ""))
	vsegs := strings.Split(valid, ".")
	tampered := vsegs[0] + "." + b64(payload("admin", now+3600, "")) + "." + vsegs[2]
	otherSigned, err := other.Sign(Claims{ID: "tok1", Subject: "alice", Role: RoleUser, IssuedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	noneHeader := b64(`{"alg":"none","typ":"JWT"}`) + "." + vsegs[1]

	tests := []struct {
		name  string
		token string
		want  string // "" accepts; else a part of the reason
	}{
		{"valid", valid, ""},
		{"valid without typ", forge(k.sign, sha256.New, `{"alg":"HS256"}`, payload("user", now+3600, "")), ""},
		{"valid without exp", forge(k.sign, sha256.New, hs256, `{"jti":"a","sub":"b","role":"admin","iat":1,"iss":"berth"}`), ""},
		{"expired", forge(k.sign, sha256.New, hs256, payload("user", now-31, "")), "expired"},
		{"expiry within leeway", forge(k.sign, sha256.New, hs256, payload("user", now-29, "")), ""},
		{"issued in the future", forge(k.sign, sha256.New, hs256, strings.Replace(payload("user", 0, ""), fmt.Sprint(now), fmt.Sprint(now+301), 1)), "future"},
		{"issued within skew", forge(k.sign, sha256.New, hs256, strings.Replace(payload("user", 0, ""), fmt.Sprint(now), fmt.Sprint(now+299), 1)), ""},
		{"wrong signature (other key)", otherSigned, "bad signature"},
		{"alg none without signature segment", noneHeader, "three"},
		{"alg none with empty signature", noneHeader + ".", "HS256"},
		{"alg none with a signature", noneHeader + "." + vsegs[2], "HS256"},
		{"alg None", forge(k.sign, sha256.New, `{"alg":"None","typ":"JWT"}`, payload("user", now+3600, "")), "HS256"},
		{"alg hs256 lower case", forge(k.sign, sha256.New, `{"alg":"hs256","typ":"JWT"}`, payload("user", now+3600, "")), "HS256"},
		{"alg missing", forge(k.sign, sha256.New, `{"typ":"JWT"}`, payload("user", now+3600, "")), "HS256"},
		{"alg not a string", forge(k.sign, sha256.New, `{"alg":["HS256"]}`, payload("user", now+3600, "")), "HS256"},
		{"alg HS512", forge(k.sign, sha512.New, `{"alg":"HS512","typ":"JWT"}`, payload("user", now+3600, "")), "HS256"},
		{"alg HS384", forge(k.sign, sha512.New384, `{"alg":"HS384","typ":"JWT"}`, payload("user", now+3600, "")), "HS256"},
		// Algorithm confusion: the HMAC key used as an RSA "public key"
		// makes a signature that HS256 verification would accept.
		{"RS256 signed with the HMAC key", forge(k.sign, sha256.New, `{"alg":"RS256","typ":"JWT"}`, payload("admin", now+3600, "")), "HS256"},
		{"EdDSA signed with the HMAC key", forge(k.sign, sha256.New, `{"alg":"EdDSA","typ":"JWT"}`, payload("admin", now+3600, "")), "HS256"},
		{"typ JWS", forge(k.sign, sha256.New, `{"alg":"HS256","typ":"JWS"}`, payload("user", now+3600, "")), "typ"},
		{"crit", forge(k.sign, sha256.New, `{"alg":"HS256","typ":"JWT","crit":["exp"]}`, payload("user", now+3600, "")), "crit"},
		{"header jwk", forge(k.sign, sha256.New, `{"alg":"HS256","jwk":{}}`, payload("user", now+3600, "")), "unsupported parameter"},
		{"header duplicate alg", forge(k.sign, sha256.New, `{"alg":"none","alg":"HS256"}`, payload("user", now+3600, "")), "duplicate"},
		{"header not an object", forge(k.sign, sha256.New, `["HS256"]`, payload("user", now+3600, "")), "not a JSON object"},
		{"header not JSON", forge(k.sign, sha256.New, `alg=HS256`, payload("user", now+3600, "")), "not a JSON object"},
		{"tampered payload (user to admin)", tampered, "bad signature"},
		{"missing jti", forge(k.sign, sha256.New, hs256, `{"sub":"alice","role":"user","iat":1,"iss":"berth"}`), "jti is missing"},
		{"empty sub", forge(k.sign, sha256.New, hs256, `{"jti":"a","sub":"","role":"user","iat":1,"iss":"berth"}`), "sub is empty"},
		{"missing role", forge(k.sign, sha256.New, hs256, `{"jti":"a","sub":"b","iat":1,"iss":"berth"}`), "role is missing"},
		{"unknown role", forge(k.sign, sha256.New, hs256, payload("root", now+3600, "")), "unknown role"},
		{"wrong issuer", forge(k.sign, sha256.New, hs256, `{"jti":"a","sub":"b","role":"user","iat":1,"iss":"other"}`), "issuer"},
		{"missing issuer", forge(k.sign, sha256.New, hs256, `{"jti":"a","sub":"b","role":"user","iat":1}`), "iss is missing"},
		{"iat a string", forge(k.sign, sha256.New, hs256, `{"jti":"a","sub":"b","role":"user","iat":"1","iss":"berth"}`), "iat must be an integer"},
		{"exp a float", forge(k.sign, sha256.New, hs256, `{"jti":"a","sub":"b","role":"user","exp":1.5e12,"iss":"berth"}`), "exp must be an integer"},
		{"exp null", forge(k.sign, sha256.New, hs256, `{"jti":"a","sub":"b","role":"user","exp":null,"iss":"berth"}`), "exp must be an integer"},
		{"sub a number", forge(k.sign, sha256.New, hs256, `{"jti":"a","sub":7,"role":"user","iss":"berth"}`), "sub must be a string"},
		{"case-folded claim name", forge(k.sign, sha256.New, hs256, `{"jti":"a","sub":"b","ROLE":"admin","role":"user","iss":"berth"}`), "unknown claim"},
		{"duplicate role", forge(k.sign, sha256.New, hs256, `{"jti":"a","sub":"b","role":"user","role":"admin","iss":"berth"}`), "duplicate"},
		{"payload not an object", forge(k.sign, sha256.New, hs256, `"admin"`), "not a JSON object"},
		{"payload trailing data", forge(k.sign, sha256.New, hs256, payload("user", now+3600, "")+`{}`), "trailing"},
		{"payload bad UTF-8", forge(k.sign, sha256.New, hs256, `{"jti":"a","sub":"`+"\xff"+`","role":"user","iss":"berth"}`), "UTF-8"},
		{"oversized", forge(k.sign, sha256.New, hs256, payload("user", now+3600, `,"x":"`+strings.Repeat("a", MaxTokenLen)+`"`)), "longer than"},
		{"2 segments", vsegs[0] + "." + vsegs[1], "three"},
		{"4 segments", valid + "." + vsegs[2], "three"},
		{"empty", "", "three"},
		{"padding on signature", valid + "=", "not unpadded base64url"},
		{"padding on payload", vsegs[0] + "." + vsegs[1] + "==." + vsegs[2], "not unpadded base64url"},
		{"standard base64 alphabet", vsegs[0] + "." + vsegs[1] + ".+" + vsegs[2][1:], "not unpadded base64url"},
		{"signature with stray low bits", vsegs[0] + "." + vsegs[1] + "." + strayBits(vsegs[2]), "not unpadded base64url"},
		{"newline inside a segment", vsegs[0] + "." + vsegs[1][:4] + "\n" + vsegs[1][4:] + "." + vsegs[2], "not unpadded base64url"},
		{"whitespace around", " " + valid, "not unpadded base64url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := k.Parse(tt.token, testNow)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("want accepted, got %v", err)
				}
				if c.ID == "" || c.Subject == "" || c.Issuer != TokenIssuer {
					t.Errorf("accepted claims incomplete: %+v", c)
				}
				return
			}
			if err == nil {
				t.Fatalf("want refused (%s), got %+v", tt.want, c)
			}
			if c != (Claims{}) {
				t.Errorf("a refused token must return zero claims, got %+v", c)
			}
			var be *berth.Error
			if !errors.As(err, &be) || be.Code != berth.ECodeUnauthorized {
				t.Fatalf("want *berth.Error %s, got %T %v", berth.ECodeUnauthorized, err, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q should say %q", err, tt.want)
			}
			for _, seg := range strings.Split(tt.token, ".") {
				if len(seg) >= 8 && strings.Contains(err.Error(), seg) {
					t.Errorf("error %q echoes the token", err)
				}
			}
		})
	}
}

func TestParseTamperedRoleKeepsUser(t *testing.T) {
	t.Parallel()
	// The same tampering, checked from the other side: the untampered token
	// is a user, and no single-byte change of its payload verifies.
	k := testKeys(t, 1)
	tok, err := k.Sign(Claims{ID: "t", Subject: "alice", Role: RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	segs := strings.Split(tok, ".")
	for i := range len(segs[1]) {
		b := []byte(segs[1])
		b[i] ^= 1
		mut := segs[0] + "." + string(b) + "." + segs[2]
		if mut == tok {
			continue
		}
		if c, err := k.Parse(mut, testNow); err == nil {
			t.Fatalf("payload byte %d flipped: accepted %+v", i, c)
		}
	}
}

// BenchmarkParse measures checking one bearer token's signature and claims,
// which every authenticated request pays.
func BenchmarkParse(b *testing.B) {
	keys, err := NewKeys(make([]byte, MasterKeySize))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	tok, err := keys.Sign(Claims{ID: "01M82WTYJG86J0YJFZBWER17PM", Subject: "alice", Role: RoleUser, IssuedAt: now.Unix()})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := keys.Parse(tok, now); err != nil {
			b.Fatal(err)
		}
	}
}
