package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-dev/berth/client"
)

// credentialFile is where, in its data dir, an agent keeps its credential.
const credentialFile = "credential"

// credentialPath returns the file of an agent's credential in its data dir.
func credentialPath(dataDir string) string { return filepath.Join(dataDir, credentialFile) }

// SavedCredential returns the credential saved in an agent's data dir, ""
// when none is.
func SavedCredential(dataDir string) (string, error) {
	data, err := os.ReadFile(credentialPath(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("agent: credential: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// join trades the join token for a credential of this agent's own, bound
// to its host, and saves it (mode 0600) so that later starts need no join
// token.
func (s *session) join(ctx context.Context) error {
	issued, err := client.New(s.cfg.Server, s.cfg.JoinToken, s.cfg.TLS).Join(ctx, s.cfg.Host)
	if err != nil {
		return fmt.Errorf("agent: join with the join token: %w", err)
	}
	if err := SaveCredential(s.cfg.DataDir, issued.Secret); err != nil {
		return err
	}
	s.cfg.Token, s.credFile = issued.Secret, credentialPath(s.cfg.DataDir)
	s.log.Info("joined: credential saved", "token_id", issued.ID)
	return nil
}

// SaveCredential saves an agent's credential in its data dir, mode 0600,
// where New finds it.
func SaveCredential(dataDir, token string) error {
	if err := replaceFile(credentialPath(dataDir), []byte(token+"\n"), 0o600); err != nil {
		return fmt.Errorf("agent: save credential: %w", err)
	}
	return nil
}
