package auth

import "fmt"

// Credentials Berth keeps for itself (a federation peer's token, a cloud
// pool's API key, an execution backend's kubeconfig) are sealed as secrets are (Keys.Seal), under an owner no
// identity is named (identity names have no /), with the peer's or pool's
// name as the secret's name: a user's sealed secret never opens as one of
// them, nor one kind as the other, nor one name's as another's.
const (
	peerOwner    = "/peer"
	poolOwner    = "/pool"
	backendOwner = "/backend"
)

// SealPeerToken seals the token that reaches peer for the store, bound to
// the peer's name.
func (v *Vault) SealPeerToken(peer, token string) ([]byte, error) {
	return v.sealOwn(peerOwner, "peer", peer, token)
}

// OpenPeerToken opens what SealPeerToken sealed for peer. It fails when
// sealed was sealed for another peer or under another key.
func (v *Vault) OpenPeerToken(peer string, sealed []byte) (string, error) {
	return v.openOwn(peerOwner, "peer", peer, "token", sealed)
}

// SealPoolKey seals cloud pool's provider API key for the store, bound to
// the pool's name.
func (v *Vault) SealPoolKey(pool, key string) ([]byte, error) {
	return v.sealOwn(poolOwner, "pool", pool, key)
}

// OpenPoolKey opens what SealPoolKey sealed for pool. It fails when sealed
// was sealed for another pool or under another key.
func (v *Vault) OpenPoolKey(pool string, sealed []byte) (string, error) {
	return v.openOwn(poolOwner, "pool", pool, "API key", sealed)
}

// SealBackendCredentials seals an execution backend's credentials (a
// Kubernetes backend's kubeconfig) for the store, bound to the backend's
// name.
func (v *Vault) SealBackendCredentials(backend, creds string) ([]byte, error) {
	return v.sealOwn(backendOwner, "backend", backend, creds)
}

// OpenBackendCredentials opens what SealBackendCredentials sealed for
// backend. It fails when sealed was sealed for another backend or under
// another key.
func (v *Vault) OpenBackendCredentials(backend string, sealed []byte) (string, error) {
	return v.openOwn(backendOwner, "backend", backend, "credentials", sealed)
}

// sealOwn seals plain under owner, named name; kind names what it is for
// the error.
func (v *Vault) sealOwn(owner, kind, name, plain string) ([]byte, error) {
	sealed, err := v.keys.Seal(owner, name, []byte(plain))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", kind, name, err)
	}
	return sealed, nil
}

// openOwn opens what sealOwn sealed under owner, named name; kind and what
// name it for the error.
func (v *Vault) openOwn(owner, kind, name, what string, sealed []byte) (string, error) {
	plain, err := v.keys.Open(owner, name, sealed)
	if err != nil {
		return "", fmt.Errorf("%s %s %s: %w", kind, name, what, err)
	}
	return string(plain), nil
}
