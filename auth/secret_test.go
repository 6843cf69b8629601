package auth

import (
	"bytes"
	"slices"
	"strings"
	"testing"
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
