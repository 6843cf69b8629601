// Package pgtest gives each test a PostgreSQL database of its own, on the
// server that TEST_DATABASE_URL names, so that tests run in parallel:
//
//	TEST_DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' go test ./...
//
// The URL is of a role that may create databases. Without it the tests
// that need PostgreSQL skip, saying so, except where the CI environment
// variable is set: there they fail.
package pgtest

import (
	"context"
	"crypto/rand"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Env is the environment variable holding the URL of the test server.
const Env = "TEST_DATABASE_URL"

// NewDatabase creates an empty database for t on the server Env names and
// returns its URL; the database is dropped, with any connection left to
// it, when t ends. It skips t when Env is unset, fails it instead when the
// CI environment variable is set, and fails it if the database cannot be
// created.
func NewDatabase(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(Env)
	if admin == "" {
		const how = Env + " is not set: these tests need PostgreSQL; run them with " +
			Env + "='postgres://USER@HOST:PORT/postgres?sslmode=disable' (a role that may create databases)"
		if os.Getenv("CI") != "" {
			t.Fatal(how + " (CI is set: tests that need PostgreSQL fail rather than skip)")
		}
		t.Skip(how)
	}
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// or postgresql:// URL", Env)
	}
	name := "berth_test_" + strings.ToLower(rand.Text()[:16])
	if err := exec(admin, `CREATE DATABASE `+name); err != nil {
		t.Fatalf("create test database on %s: %v", u.Redacted(), err)
	}
	t.Cleanup(func() {
		if err := exec(admin, `DROP DATABASE `+name+` WITH (FORCE)`); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// exec runs one statement on its own connection to the server at admin.
func exec(admin, statement string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, statement)
	return err
}
