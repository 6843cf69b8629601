package auth

import (
	"bytes"
	"testing"
)

// A pool's API key opens only as that pool's key: not as another pool's,
// not as a peer token of the same name, not under another master key.
func TestPoolKeySealing(t *testing.T) {
	t.Parallel()
	v := &Vault{keys: testKeys(t, 1)}
	sealed, err := v.SealPoolKey("rent", "vast-key-123")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("vast-key-123")) {
		t.Fatal("sealed key contains the key")
	}
	if got, err := v.OpenPoolKey("rent", sealed); err != nil || got != "vast-key-123" {
		t.Fatalf("OpenPoolKey = %q, %v", got, err)
	}
	if _, err := v.OpenPoolKey("other", sealed); err == nil {
		t.Error("another pool's name opened the key")
	}
	if _, err := v.OpenPeerToken("rent", sealed); err == nil {
		t.Error("a pool key opened as a peer token of the same name")
	}
	peer, err := v.SealPeerToken("rent", "peer-token")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.OpenPoolKey("rent", peer); err == nil {
		t.Error("a peer token opened as a pool key of the same name")
	}
	if _, err := (&Vault{keys: testKeys(t, 2)}).OpenPoolKey("rent", sealed); err == nil {
		t.Error("another master key opened the pool key")
	}
}
