package auth

import "fmt"

// peerOwner is the owner a federation peer's token is sealed under, with
// the peer's name as the secret's name: no identity is named so (identity
// names have no /), so a user's sealed secret never opens as a peer token,
// nor the reverse.
const peerOwner = "/peer"

// SealPeerToken seals the token that reaches peer for the store, as a
// secret is sealed (Keys.Seal), bound to the peer's name.
func (v *Vault) SealPeerToken(peer, token string) ([]byte, error) {
	sealed, err := v.keys.Seal(peerOwner, peer, []byte(token))
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", peer, err)
	}
	return sealed, nil
}

// OpenPeerToken opens what SealPeerToken sealed for peer. It fails when
// sealed was sealed for another peer or under another key.
func (v *Vault) OpenPeerToken(peer string, sealed []byte) (string, error) {
	plain, err := v.keys.Open(peerOwner, peer, sealed)
	if err != nil {
		return "", fmt.Errorf("peer %s token: %w", peer, err)
	}
	return string(plain), nil
}
