package auth

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
)

func TestSealOpen(t *testing.T) {
	t.Parallel()
	k := testKeys(t, 1)
	plain := []byte("hunter2-very-secret")
	sealed, err := k.Seal("alice", "HF_TOKEN", plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, plain) {
		t.Fatal("sealed bytes contain the plaintext")
	}
	if len(sealed) != 12+len(plain)+16 {
		t.Errorf("sealed length %d, want nonce + plaintext + tag = %d", len(sealed), 12+len(plain)+16)
	}
	got, err := k.Open("alice", "HF_TOKEN", sealed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, plain) {
		t.Fatalf("Open = %q", got)
	}
	again, err := k.Seal("alice", "HF_TOKEN", plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(again[:12], sealed[:12]) {
		t.Error("two seals used the same nonce")
	}

	empty, err := k.Seal("alice", "EMPTY", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.Open("alice", "EMPTY", empty); err != nil || len(got) != 0 {
		t.Errorf("empty secret round trip: %q, %v", got, err)
	}

	flipped := slices.Clone(sealed)
	flipped[len(flipped)-1] ^= 1
	flippedNonce := slices.Clone(sealed)
	flippedNonce[0] ^= 0x80
	fails := []struct {
		name         string
		keys         *Keys
		owner, name2 string
		sealed       []byte
	}{
		{"wrong owner", k, "bob", "HF_TOKEN", sealed},
		{"wrong name", k, "alice", "OTHER", sealed},
		{"owner/name boundary moved", k, "alice\x00HF", "_TOKEN", sealed},
		{"flipped ciphertext bit", k, "alice", "HF_TOKEN", flipped},
		{"flipped nonce bit", k, "alice", "HF_TOKEN", flippedNonce},
		{"other key", testKeys(t, 2), "alice", "HF_TOKEN", sealed},
		{"truncated", k, "alice", "HF_TOKEN", sealed[:20]},
		{"empty", k, "alice", "HF_TOKEN", nil},
	}
	for _, tt := range fails {
		got, err := tt.keys.Open(tt.owner, tt.name2, tt.sealed)
		if err == nil {
			t.Errorf("%s: opened to %q, want error", tt.name, got)
			continue
		}
		if got != nil {
			t.Errorf("%s: returned bytes with the error", tt.name)
		}
		if strings.Contains(err.Error(), string(plain)) {
			t.Errorf("%s: error %q contains the plaintext", tt.name, err)
		}
	}
	if _, err := k.Seal("a\x00b", "c", plain); err == nil {
		t.Error("Seal must refuse an owner holding NUL")
	}
}

func TestValidSecretName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"A", "_", "HF_TOKEN", "aws_key2", strings.Repeat("x", 64)} {
		if err := ValidSecretName(ok); err != nil {
			t.Errorf("ValidSecretName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "2FA", "HF-TOKEN", "a b", "ключ", "A}}", strings.Repeat("x", 65)} {
		err := ValidSecretName(bad)
		var be *berth.Error
		if !errors.As(err, &be) || be.Code != berth.ECodeInvalid || be.Field != "name" {
			t.Errorf("ValidSecretName(%q) = %v, want invalid name", bad, err)
		}
	}
}

func TestSecretRefsAndExpand(t *testing.T) {
	t.Parallel()
	s := "--token {{SECRET:HF}} --key={{SECRET:AWS_KEY}} again {{SECRET:HF}} {{SECRET:bad-name}} {{ SECRET:X }} {{SECRET:}}"
	if got, want := SecretRefs(s), []string{"HF", "AWS_KEY"}; !slices.Equal(got, want) {
		t.Errorf("SecretRefs = %q, want %q", got, want)
	}
	if got := SecretRefs("no references"); got != nil {
		t.Errorf("SecretRefs without references = %q", got)
	}
	got, err := ExpandSecrets(s, map[string]string{"HF": "hf_123", "AWS_KEY": "{{SECRET:HF}}"})
	if err != nil {
		t.Fatal(err)
	}
	want := "--token hf_123 --key={{SECRET:HF}} again hf_123 {{SECRET:bad-name}} {{ SECRET:X }} {{SECRET:}}"
	if got != want {
		t.Errorf("ExpandSecrets =\n%q, want\n%q", got, want)
	}
	_, err = ExpandSecrets("a {{SECRET:HF}} b {{SECRET:MISSING}}", map[string]string{"HF": "hf_supersecret"})
	if err == nil {
		t.Fatal("unknown secret: want error")
	}
	if !strings.Contains(err.Error(), "MISSING") || strings.Contains(err.Error(), "hf_supersecret") {
		t.Errorf("error %q must name MISSING and no value", err)
	}
	if berth.ErrorCode(err) != berth.ECodeInvalid {
		t.Errorf("error code %s, want %s", berth.ErrorCode(err), berth.ECodeInvalid)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	r := NewRedactor([]string{"abc", "", "abcdef", "xyz", "abc", "ab"})
	tests := []struct{ in, want string }{
		{"nothing here", "nothing here"},
		{"key=abcdef;", "key=***;"},
		{"abc abc", "*** ***"},
		{"abcxyz", "******"},  // touching values stay separate
		{"abxyzc", "******c"}, // "ab" and "xyz" touch
		{"zabcdefz", "z***z"}, // longest wins
		{"ab", "***"},         // short values are redacted too
		{"aaab", "aa***"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := r.Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	overlap := NewRedactor([]string{"abcd", "cdef"})
	if got := overlap.Redact("xabcdefx"); got != "x***x" {
		t.Errorf("overlapping values: %q, want every covered byte hidden", got)
	}
	var none *Redactor
	if got := none.Redact("abc"); got != "abc" {
		t.Errorf("nil Redactor changed text: %q", got)
	}
	if got := NewRedactor(nil).Redact("abc"); got != "abc" {
		t.Errorf("empty Redactor changed text: %q", got)
	}
}

// shipMasked ships input the way the agent does: it reads from the file
// what has been written so far (input[:written]) from the last shipped
// offset, masks it and ships what Mask says is final.
func shipMasked(r *Redactor, input string, writes []int) string {
	var shipped []byte
	for k, written := range writes {
		buf := []byte(input[len(shipped):written])
		n := r.Mask(buf, k == len(writes)-1)
		shipped = append(shipped, buf[:n]...)
	}
	return string(shipped)
}

func TestMaskSplitAcrossReads(t *testing.T) {
	t.Parallel()
	secrets := []string{"hf_SECRET_TOKEN", "p4ss", "aaaa"}
	r := NewRedactor(secrets)
	input := "token=hf_SECRET_TOKEN pass=p4ss p4sp4ss aaaaaa hf_SECRET_TOKENhf_SECRET_TOKEN end"
	whole := []byte(input)
	if n := r.Mask(whole, true); n != len(input) {
		t.Fatalf("final Mask = %d, want all %d bytes", n, len(input))
	}
	for _, s := range secrets {
		if strings.Contains(string(whole), s) {
			t.Fatalf("Mask leaves %q in %q", s, whole)
		}
	}
	if len(whole) != len(input) || !strings.HasPrefix(string(whole), "token=***************") {
		t.Fatalf("Mask must keep the length and hide each byte: %q", whole)
	}
	// The output written in two, then three, pieces: what is shipped is
	// what masking the whole gives, whatever the cuts.
	for i := 0; i <= len(input); i++ {
		for j := i; j <= len(input); j += 7 {
			if got := shipMasked(r, input, []int{i, j, len(input)}); got != string(whole) {
				t.Fatalf("written up to %d, %d, %d: shipped %q, want %q", i, j, len(input), got, whole)
			}
		}
	}
}

func TestMaskHoldsBackWhatMayBeASecret(t *testing.T) {
	t.Parallel()
	r := NewRedactor([]string{"0123456789"})
	buf := []byte(strings.Repeat("x", 100) + "01234")
	if n := r.Mask(buf, false); n != 105-9 {
		t.Errorf("Mask = %d, want all but the last 9 bytes (longest value - 1) = %d", n, 105-9)
	}
	var none *Redactor
	if n := none.Mask(buf, false); n != len(buf) {
		t.Errorf("a nil Redactor's Mask = %d, want %d", n, len(buf))
	}
}
