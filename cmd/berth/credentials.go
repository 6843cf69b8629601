package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// savedServer is what the CLI keeps for one server: the token to send and
// the CA to trust, so that commands need neither flags nor environment.
type savedServer struct {
	Token       string `json:"token,omitempty"`
	CA          string `json:"ca,omitempty"` // a CA file to trust
	Fingerprint string `json:"ca_fingerprint,omitempty"`
}

// credentialsPath is the CLI's credentials file: $BERTH_CREDENTIALS, else
// credentials.json in $XDG_CONFIG_HOME/berth, else ~/.config/berth.
func (m *Main) credentialsPath() string {
	if p := m.Getenv("BERTH_CREDENTIALS"); p != "" {
		return p
	}
	dir := m.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		dir = filepath.Join(m.Getenv("HOME"), ".config")
	}
	return filepath.Join(dir, "berth", "credentials.json")
}

// savedServers reads the credentials file; a missing or unreadable one is
// empty.
func (m *Main) savedServers() map[string]savedServer {
	saved := map[string]savedServer{}
	data, err := os.ReadFile(m.credentialsPath())
	if err == nil {
		_ = json.Unmarshal(data, &saved)
	}
	return saved
}

// saveServer records s for the server at url in the credentials file
// (mode 0600), replacing what was kept for it.
func (m *Main) saveServer(url string, s savedServer) (string, error) {
	path := m.credentialsPath()
	saved := m.savedServers()
	saved[url] = s
	data, err := json.MarshalIndent(saved, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("credentials: %w", err)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	err = os.WriteFile(tmp, append(data, '\n'), 0o600)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return "", errors.Join(fmt.Errorf("credentials: %w", err), os.Remove(tmp))
	}
	return path, nil
}
