package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
)

// FuzzParse checks that Parse never panics, refuses only with an
// ECodeUnauthorized *berth.Error that does not echo the token, and that what
// it accepts signs again to a token that parses to the same claims.
func FuzzParse(f *testing.F) {
	k := testKeys(f, 1)
	valid, err := k.Sign(Claims{ID: "tok1", Subject: "alice", Role: RoleUser, IssuedAt: testNow.Unix(), Expires: testNow.Unix() + 3600})
	if err != nil {
		f.Fatal(err)
	}
	segs := strings.Split(valid, ".")
	f.Add(valid)
	f.Add(b64(`{"alg":"none","typ":"JWT"}`) + "." + segs[1] + ".")
	f.Add(valid[:len(valid)/2])
	f.Add("\x00garbage.\xff.==")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := k.Parse(token, testNow)
		if err != nil {
			var be *berth.Error
			if !errors.As(err, &be) || be.Code != berth.ECodeUnauthorized {
				t.Fatalf("refusal is not an unauthorized *berth.Error: %T %v", err, err)
			}
			if len(token) >= 16 && strings.Contains(err.Error(), token) {
				t.Fatalf("error %q echoes the token", err)
			}
			return
		}
		again, err := k.Sign(c)
		if err != nil {
			t.Fatalf("accepted claims %+v do not sign: %v", c, err)
		}
		c2, err := k.Parse(again, testNow)
		if err != nil {
			t.Fatalf("re-signed claims %+v do not parse: %v", c, err)
		}
		if c2 != c {
			t.Fatalf("round trip changed the claims: %+v became %+v", c, c2)
		}
	})
}

// TestFuzzCorpusValidSeed keeps the committed corpus honest: the seed named
// valid_hs256 must be a token Parse accepts, so the fuzzer starts from the
// accepting path too.
func TestFuzzCorpusValidSeed(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzParse", "valid_hs256"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "string(") {
		t.Fatalf("not a fuzz corpus file: %q", data)
	}
	tok, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "string("), ")"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := testKeys(t, 1).Parse(tok, testNow)
	if err != nil {
		t.Fatalf("valid seed refused: %v", err)
	}
	if c.Subject != "alice" || c.Role != RoleUser {
		t.Errorf("valid seed claims = %+v", c)
	}
}
