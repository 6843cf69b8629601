package provision

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-dev/berth/cloud"
	"golang.org/x/crypto/ssh"
)

// KeyFile is the name, in the server's data dir, of the SSH private key
// Berth reaches its rented instances with (OpenSSH format, mode 0600);
// its public key is KeyFile + ".pub".
const KeyFile = "cloud_ssh_key"

// LoadOrCreateKey returns the SSH key pair kept in dataDir, creating it
// (ed25519) on first use: the signer, and the public key as an
// authorized_keys line. A key file that exists but does not parse is an
// error, never replaced.
func LoadOrCreateKey(dataDir string) (ssh.Signer, string, error) {
	path := filepath.Join(dataDir, KeyFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		b, err = createKey(path)
	}
	if err != nil {
		return nil, "", err
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, "", fmt.Errorf("provision: the SSH key %s: %w", path, err)
	}
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " berth"
	return signer, pub, nil
}

// createKey writes a new ed25519 key at path (0600, never over an
// existing file) and its public key beside it, and returns the private
// key's PEM.
func createKey(path string) ([]byte, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("provision: an SSH key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "berth")
	if err != nil {
		return nil, fmt.Errorf("provision: an SSH key: %w", err)
	}
	b := pem.EncodeToMemory(block)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("provision: the SSH key's directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("provision: the SSH key: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("provision: the SSH key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("provision: the SSH key: %w", err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("provision: an SSH key: %w", err)
	}
	if err := os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(sp), 0o644); err != nil {
		return nil, fmt.Errorf("provision: the SSH public key: %w", err)
	}
	return b, nil
}

// EnsureSSHKey loads or creates the key pair kept in dataDir and
// registers its public key with provider's account unless it is there
// already (the provider installs account keys into SSH instances). It
// returns the signer the probes authenticate with.
func EnsureSSHKey(ctx context.Context, dataDir string, provider cloud.Provider) (ssh.Signer, error) {
	signer, pub, err := LoadOrCreateKey(dataDir)
	if err != nil {
		return nil, err
	}
	if err := provider.EnsureSSHKey(ctx, pub); err != nil {
		return nil, fmt.Errorf("provision: registering the SSH key with %s: %w", provider.Name(), err)
	}
	return signer, nil
}
