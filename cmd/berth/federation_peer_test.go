package main

import (
	"io"
	"maps"
	"strings"
	"testing"
	"time"
)

// TestServerPeerFlags: --peer-user maps each origin given (repeatable),
// refuses an origin mapped twice and a value that is no ORIGIN=USER;
// --federation-changelog-retention defaults to a day.
func TestServerPeerFlags(t *testing.T) {
	t.Parallel()
	flags := func(args ...string) (*serverConfig, error) {
		m := &Main{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
		fs := m.flagSet("server", "[flags]")
		var cfg serverConfig
		m.addServerFlags(fs, &cfg)
		return &cfg, parse(fs, args)
	}
	cfg, err := flags("--peer-user", "a=alice", "--peer-user", "b=bob")
	if err != nil || !maps.Equal(cfg.PeerUsers, map[string]string{"a": "alice", "b": "bob"}) || cfg.ChangelogRetention != 24*time.Hour {
		t.Errorf("flags: %+v, %v; want a→alice, b→bob and a retention of 24h", cfg, err)
	}
	for _, args := range [][]string{
		{"--peer-user", "a=alice", "--peer-user", "a=bob"},
		{"--peer-user", "alice"},
		{"--peer-user", "a="},
		{"--peer-user", " a=alice"},
	} {
		if _, err := flags(args...); err == nil || !strings.Contains(err.Error(), "peer-user") {
			t.Errorf("%q: %v, want an error naming --peer-user", args, err)
		}
	}
}
