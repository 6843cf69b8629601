package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
)

const nonceSize = 12

// Seal encrypts plaintext with AES-256-GCM under the secret-encryption key,
// binding it to owner and name (the additional data is owner, a NUL byte and
// name), and returns the random 12-byte nonce followed by the ciphertext.
// It returns an error when owner or name contains a NUL byte or the system's
// random source fails.
func (k *Keys) Seal(owner, name string, plaintext []byte) ([]byte, error) {
	aead, ad, err := k.aead(owner, name)
	if err != nil {
		return nil, fmt.Errorf("seal secret: %w", err)
	}
	out := make([]byte, nonceSize, nonceSize+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, fmt.Errorf("seal secret: %w", err)
	}
	return aead.Seal(out, out[:nonceSize], plaintext, ad), nil
}

// Open decrypts what Seal returned for the same owner and name. It returns an
// error, which never contains the plaintext, when sealed is too short, was
// sealed for another owner or name or under another key, or was altered.
func (k *Keys) Open(owner, name string, sealed []byte) ([]byte, error) {
	aead, ad, err := k.aead(owner, name)
	if err != nil {
		return nil, fmt.Errorf("open secret: %w", err)
	}
	if len(sealed) < nonceSize+aead.Overhead() {
		return nil, fmt.Errorf("open secret %s of %s: ciphertext too short", name, owner)
	}
	pt, err := aead.Open(nil, sealed[:nonceSize], sealed[nonceSize:], ad)
	if err != nil {
		return nil, fmt.Errorf("open secret %s of %s (wrong key, owner or name, or corrupted): %w", name, owner, err)
	}
	return pt, nil
}

func (k *Keys) aead(owner, name string) (cipher.AEAD, []byte, error) {
	if strings.IndexByte(owner, 0) >= 0 || strings.IndexByte(name, 0) >= 0 {
		return nil, nil, errors.New("owner and name must not contain NUL bytes")
	}
	block, err := aes.NewCipher(k.enc)
	if err != nil {
		return nil, nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, nil, err
	}
	return aead, []byte(owner + "\x00" + name), nil
}
