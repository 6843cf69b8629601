// Package apitest builds the security of a test API server: real keys, a
// real token registry and vault on the test's store, and an audit log in
// a temporary directory.
package apitest

import (
	"crypto/rand"
	"path/filepath"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/audit"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/store"
)

// Security returns the security of a server on st that trusts direct
// loopback clients as trustLoopback ("" for no one), with an audit log in
// a temporary directory, closed when t ends.
func Security(t testing.TB, st store.CredentialStore, trustLoopback auth.Role) *api.Security {
	t.Helper()
	return SecurityWithAudit(t, st, trustLoopback, filepath.Join(t.TempDir(), "audit.log"))
}

// SecurityWithAudit is Security with its audit log at auditPath, for tests
// that read the log.
func SecurityWithAudit(t testing.TB, st store.CredentialStore, trustLoopback auth.Role, auditPath string) *api.Security {
	t.Helper()
	keys, err := auth.NewKeys([]byte(rand.Text() + rand.Text())[:auth.MasterKeySize])
	if err != nil {
		t.Fatal(err)
	}
	reg, err := auth.NewRegistry(t.Context(), st, keys, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	vault, err := auth.NewVault(t.Context(), st, keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	log, err := audit.Open(auditPath, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	return &api.Security{
		Ingress: &auth.Ingress{TrustLoopback: trustLoopback, Keys: keys, Tokens: reg},
		Tokens:  reg, Secrets: vault, Audit: log,
	}
}

// Token issues a token for name with role (and, for an agent, worker) and
// returns it.
func Token(t testing.TB, sec *api.Security, name string, role auth.Role, worker string) string {
	t.Helper()
	issued, err := sec.Tokens.Issue(t.Context(), auth.Grant{Name: name, Role: role, Worker: worker, By: "test"},
		func(*berth.Token) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return issued.Secret
}
