// Package auth holds Berth's credentials: the master key and the keys
// derived from it, signed tokens and roles, the token registry, secret
// sealing and the vault of sealed secrets, and the ingress layers that turn
// an HTTP request into an Identity, with rate limiting. The {{SECRET:…}}
// reference syntax is the root package's, the masking of secret values
// package redact's, and development TLS package devca's.
package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// MasterKeySize is the length in bytes of the master key.
const MasterKeySize = 32

// Derivation labels: HMAC-SHA256(master, label) gives each purpose its own key.
const (
	labelTokenSigning     = "berth token signing v1"
	labelSecretEncryption = "berth secret encryption v1"
	labelAuditSigning     = "berth audit checkpoint signing v1"
)

// Keys holds the keys derived from the master key: one signs tokens, the
// other encrypts secrets. The master key itself is not kept. The zero value
// is unusable; build one with LoadOrCreateKey or NewKeys. A *Keys is
// immutable and safe for concurrent use.
type Keys struct {
	sign  []byte // HMAC-SHA256 key for tokens
	enc   []byte // AES-256 key for secrets
	audit []byte // HMAC-SHA256 key for the audit log's checkpoints
}

// AuditKey returns the HMAC-SHA256 key that signs the audit log's
// checkpoints (audit.Options.Key). It cannot fail.
func (k *Keys) AuditKey() []byte { return k.audit }

// NewKeys derives the signing and encryption keys from a 32-byte master key.
// It returns an error, and no Keys, when master is not exactly 32 bytes.
func NewKeys(master []byte) (*Keys, error) {
	if len(master) != MasterKeySize {
		return nil, fmt.Errorf("master key must be %d bytes, got %d", MasterKeySize, len(master))
	}
	return &Keys{
		sign:  derive(master, labelTokenSigning),
		enc:   derive(master, labelSecretEncryption),
		audit: derive(master, labelAuditSigning),
	}, nil
}

func derive(master []byte, label string) []byte {
	m := hmac.New(sha256.New, master)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// LoadKey reads the hex-encoded 32-byte master key at path, as
// LoadOrCreateKey does, but never creates it: a missing file is an error
// (fs.ErrNotExist, wrapped), as are the errors of LoadOrCreateKey.
func LoadKey(path string) (*Keys, error) {
	master, err := readKey(path)
	if err != nil {
		return nil, err
	}
	return NewKeys(master)
}

// LoadOrCreateKey reads the hex-encoded 32-byte master key at path and
// returns the Keys derived from it. When the file does not exist it creates
// one with a fresh random key, mode 0600 (creating a missing parent directory
// with mode 0700); the key is written to a temporary file that is then linked
// into place, so a concurrent caller sees either no file or the whole key, and
// two first users end up with the same key. It returns an error naming path
// when the file cannot be read or written, does not hold exactly 64 hex
// digits, or is readable or writable by group or others (the fix is
// chmod 600).
func LoadOrCreateKey(path string) (*Keys, error) {
	master, err := readKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := createKey(path); err != nil {
			return nil, err
		}
		master, err = readKey(path)
	}
	if err != nil {
		return nil, err
	}
	return NewKeys(master)
}

func readKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("key file %s is not a regular file", path)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("key file %s has mode %04o and is open to group or others: run chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	data, err := io.ReadAll(io.LimitReader(f, 1024))
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	master, derr := hex.DecodeString(strings.TrimSpace(string(data)))
	if derr != nil || len(master) != MasterKeySize {
		return nil, fmt.Errorf("key file %s must hold %d hex digits (a %d-byte key): delete it to create a new key (tokens and secrets made with the old key stop working)", path, 2*MasterKeySize, MasterKeySize)
	}
	return master, nil
}

// createKey writes a fresh key to path unless a file appears there first.
func createKey(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create key directory: %w", err)
	}
	master := make([]byte, MasterKeySize)
	if _, err := rand.Read(master); err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".berth-key-*")
	if err != nil {
		return fmt.Errorf("create key file: %w", err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName)
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("create key file: %w", err)
	}
	if _, err := tmp.WriteString(hex.EncodeToString(master) + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("write key file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write key file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write key file: %w", err)
	}
	// Link fails when path exists, so a key another process created in the
	// meantime is never replaced. Where hard links are unsupported, fall
	// back to rename (atomic, but last writer wins).
	err = os.Link(tmpName, path)
	switch {
	case err == nil, errors.Is(err, fs.ErrExist):
		return nil
	}
	if _, serr := os.Lstat(path); serr == nil {
		return nil
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("install key file: %w", err)
	}
	return nil
}
