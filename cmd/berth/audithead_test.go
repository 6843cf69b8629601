package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/postgres/pgtest"
)

// auditedDataDir runs a server on a new data dir twice, submitting jobs
// each time, so that its audit log has two checkpoints (one per clean
// stop) and the store an audit head; it returns the dir.
func auditedDataDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for range 2 {
		rs, err := startServer(context.Background(), &serverConfig{DataDir: dir, Listen: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		c := &cli{t: t, url: rs.URL}
		for range 3 {
			if code, _, errOut := c.run("submit", "--", "true"); code != 0 {
				t.Fatalf("submit: exit %d: %s", code, errOut)
			}
		}
		if err := rs.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fileLines returns the lines of path, each with its newline.
func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
}

// keepLines writes the first n of ls (lines with their newlines) to path.
func keepLines(t *testing.T, path string, ls []string, n int) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(ls[:n], "")), 0o600); err != nil {
		t.Fatal(err)
	}
}

// seqOf returns the seq of a checkpoint or record line.
func seqOf(t *testing.T, line string) int {
	t.Helper()
	var seq int
	if _, err := fmt.Sscanf(line, `{"seq":%d`, &seq); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	return seq
}

// TestAuditVerifyCatchesAShortenedLog holds issue 25's tamper cases, each
// of which verified as OK before the store anchored the log's end: the
// store's audit head, written with the batches the records describe,
// shows a log cut short however its checkpoints were edited.
func TestAuditVerifyCatchesAShortenedLog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		tamper func(logPath, cpPath string)
	}{
		{"newest checkpoint deleted and the log truncated to the one before", func(logPath, cpPath string) {
			cps := fileLines(t, cpPath)
			keepLines(t, cpPath, cps, len(cps)-1)
			keepLines(t, logPath, fileLines(t, logPath), seqOf(t, cps[len(cps)-2]))
		}},
		{"checkpoint file emptied and the log truncated", func(logPath, cpPath string) {
			keepLines(t, cpPath, nil, 0)
			ls := fileLines(t, logPath)
			keepLines(t, logPath, ls, len(ls)-2)
		}},
		{"truncated after the newest checkpoint of a killed server", func(logPath, cpPath string) {
			cps := fileLines(t, cpPath)
			keepLines(t, cpPath, cps, len(cps)-1) // a kill -9 writes no checkpoint on the way out
			keepLines(t, logPath, fileLines(t, logPath), seqOf(t, cps[len(cps)-2])+1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := auditedDataDir(t)
			verify := func() (int, string) {
				code, out, errOut := (&cli{t: t}).run("audit", "verify", "--data-dir", dir)
				return code, out + errOut
			}
			code, out := verify()
			if code != 0 || !strings.Contains(out, "matches: the chain is whole to seq") || !strings.Contains(out, "checkpoints signed: 2 verified") {
				t.Fatalf("verify of the untouched log: exit %d: %s", code, out)
			}
			logPath := filepath.Join(dir, "audit.log")
			before, _ := os.ReadFile(logPath)
			tc.tamper(logPath, logPath+".head")
			if after, _ := os.ReadFile(logPath); bytes.Equal(before, after) {
				t.Fatal("the tampering changed nothing")
			}
			code, out = verify()
			if code != exitFailed || !strings.Contains(out, "the log was shortened") || !strings.Contains(out, "store's audit head is seq") {
				t.Fatalf("verify of the shortened log: exit %d: %s; want it caught", code, out)
			}
		})
	}
}

// TestAuditVerifyAgainstPostgres checks the log against a PostgreSQL
// store's audit head, given with --store.
func TestAuditVerifyAgainstPostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	dir := t.TempDir()
	rs, err := startServer(context.Background(), &serverConfig{DataDir: dir, Store: url, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	c := &cli{t: t, url: rs.URL}
	for range 2 {
		if code, _, errOut := c.run("submit", "--", "true"); code != 0 {
			t.Fatalf("submit: exit %d: %s", code, errOut)
		}
	}
	if err := rs.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	verify := func() (int, string) {
		code, out, errOut := (&cli{t: t}).run("audit", "verify", "--data-dir", dir, "--store", url)
		return code, out + errOut
	}
	if code, out := verify(); code != 0 || !strings.Contains(out, "store PostgreSQL: audit head seq") || !strings.Contains(out, "matches") {
		t.Fatalf("verify against PostgreSQL: exit %d: %s", code, out)
	}
	logPath := filepath.Join(dir, "audit.log")
	ls := fileLines(t, logPath)
	keepLines(t, logPath, ls, len(ls)-1)
	keepLines(t, logPath+".head", nil, 0)
	if code, out := verify(); code != exitFailed || !strings.Contains(out, "the log was shortened") {
		t.Fatalf("verify of the shortened log against PostgreSQL: exit %d: %s", code, out)
	}
}
