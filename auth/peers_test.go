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

// A backend's credentials open only as that backend's: not as another
// backend's, not as a pool key of the same name, not under another master
// key.
func TestBackendCredentialsSealing(t *testing.T) {
	t.Parallel()
	v := &Vault{keys: testKeys(t, 1)}
	const kubeconfig = "apiVersion: v1\nusers: [{name: a, user: {token: s3cret}}]\n"
	sealed, err := v.SealBackendCredentials("k8s-cw", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("s3cret")) {
		t.Fatal("sealed credentials contain the token")
	}
	if got, err := v.OpenBackendCredentials("k8s-cw", sealed); err != nil || got != kubeconfig {
		t.Fatalf("OpenBackendCredentials = %q, %v", got, err)
	}
	if _, err := v.OpenBackendCredentials("k8s-other", sealed); err == nil {
		t.Error("another backend's name opened the credentials")
	}
	if _, err := v.OpenPoolKey("k8s-cw", sealed); err == nil {
		t.Error("a backend's credentials opened as a pool key of the same name")
	}
	if _, err := (&Vault{keys: testKeys(t, 2)}).OpenBackendCredentials("k8s-cw", sealed); err == nil {
		t.Error("another master key opened the credentials")
	}
}
