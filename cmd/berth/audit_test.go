package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/audit"
)

// runAuditCLI runs one berth command needing no server.
func runAuditCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	code := m.Run(context.Background(), args)
	return code, out.String(), errOut.String()
}

// writeAuditLog writes n records to DIR/audit.log with a checkpoint every
// 4 and returns DIR.
func writeAuditLog(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	l, err := audit.Open(filepath.Join(dir, "audit.log"), audit.Options{CheckpointEvery: 4, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		e := audit.Entry{Action: "job.submitted", Actor: "alice", Role: "user", Target: "job/" + strconv.Itoa(i), Fields: map[string]string{"queue": "gpu", "gpus": strconv.Itoa(i)}}
		if err := l.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestAuditVerify(t *testing.T) {
	t.Parallel()
	dir := writeAuditLog(t, 10)
	logPath := filepath.Join(dir, "audit.log")
	code, out, errOut := runAuditCLI(t, "audit", "verify", "--data-dir", dir)
	if code != 0 || !strings.HasPrefix(out, "audit log OK: 10 records, head ") || !strings.HasSuffix(out, ", 3 checkpoints\n") || !strings.Contains(errOut, "no store") {
		t.Fatalf("verify --data-dir: exit %d, %q, %q", code, out, errOut)
	}
	if code, out2, _ := runAuditCLI(t, "audit", "verify", "--file", logPath); code != 0 || out2 != out {
		t.Fatalf("verify --file (checkpoints found next to it): exit %d, %q, want %q", code, out2, out)
	}

	// A copy without its checkpoint file verifies, with a warning.
	cp := filepath.Join(t.TempDir(), "copy.log")
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runAuditCLI(t, "audit", "verify", "--file", cp)
	if code != 0 || !strings.HasSuffix(out, ", 0 checkpoints\n") || !strings.Contains(errOut, "warning") || !strings.Contains(errOut, "tail truncation can't be detected") {
		t.Fatalf("verify of a copy without checkpoints: exit %d, %q, %q", code, out, errOut)
	}
	code, out, _ = runAuditCLI(t, "audit", "verify", "--file", cp, "--checkpoints", logPath+".head")
	if code != 0 || !strings.HasSuffix(out, ", 3 checkpoints\n") {
		t.Fatalf("verify --checkpoints: exit %d, %q", code, out)
	}

	// Edit record 5: line 6's prev no longer matches.
	lines := strings.Split(string(b), "\n")
	lines[4] = strings.Replace(lines[4], `"gpus":"5"`, `"gpus":"0"`, 1)
	if err := os.WriteFile(cp, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runAuditCLI(t, "audit", "verify", "--file", cp)
	if code != exitFailed || out != "" || !strings.Contains(errOut, "line 6 (seq 6): prev hash does not match line 5") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("verify of an edited log: exit %d, %q, %q; want exit 1 and one line naming the line", code, out, errOut)
	}

	// Truncate the log after a checkpoint: only the checkpoint catches it.
	if err := os.WriteFile(logPath, []byte(strings.Join(strings.Split(string(b), "\n")[:9], "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runAuditCLI(t, "audit", "verify", "--data-dir", dir)
	if code != exitFailed || !strings.Contains(errOut, "checkpoint says record 10 exists; the log ends at record 9 (truncated)") {
		t.Fatalf("verify of a truncated log: exit %d, %q", code, errOut)
	}
}

func TestAuditTailAndExport(t *testing.T) {
	t.Parallel()
	dir := writeAuditLog(t, 30)
	logPath := filepath.Join(dir, "audit.log")
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")

	code, out, errOut := runAuditCLI(t, "audit", "tail", "--data-dir", dir)
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(rows) != 21 || strings.Join(strings.Fields(rows[0]), " ") != "SEQ TIME ACTION ACTOR TARGET FIELDS" ||
		strings.Join(strings.Fields(rows[20]), " ") != "30 2025-03-01T12:00:00Z job.submitted alice job/30 gpus=30 queue=gpu" ||
		!strings.HasPrefix(rows[1], "11 ") {
		t.Fatalf("tail: exit %d, stderr %q:\n%s", code, errOut, out)
	}

	code, out, _ = runAuditCLI(t, "audit", "tail", "-n", "3", "-o", "json", "--file", logPath)
	var raw []json.RawMessage
	if code != 0 || json.Unmarshal([]byte(out), &raw) != nil || len(raw) != 3 || string(raw[0]) != all[27] || string(raw[2]) != all[29] {
		t.Fatalf("tail -n 3 -o json: exit %d:\n%s", code, out)
	}

	code, out, _ = runAuditCLI(t, "audit", "export", "--data-dir", dir)
	if code != 0 || out != string(b) {
		t.Fatalf("export: exit %d, printed %d bytes, want the log's %d", code, len(out), len(b))
	}
	code, out, _ = runAuditCLI(t, "audit", "export", "--data-dir", dir, "--since", "27")
	if code != 0 || out != strings.Join(all[27:], "\n")+"\n" {
		t.Fatalf("export --since 27: exit %d:\n%s", code, out)
	}
	if code, out, _ = runAuditCLI(t, "audit", "export", "--data-dir", dir, "--since", "30"); code != 0 || out != "" {
		t.Fatalf("export --since 30: exit %d, %q", code, out)
	}
}

func TestAuditBadInput(t *testing.T) {
	t.Parallel()
	dir := writeAuditLog(t, 2)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"audit"}, "subcommand"},
		{[]string{"audit", "frob"}, "unknown subcommand"},
		{[]string{"audit", "verify", "--data-dir", dir, "--file", filepath.Join(dir, "audit.log")}, "--file"},
		{[]string{"audit", "tail", "-n", "0", "--data-dir", dir}, "-n"},
		{[]string{"audit", "tail", "-o", "yaml", "--data-dir", dir}, "-o"},
		{[]string{"audit", "export", "--data-dir", dir, "extra"}, "no arguments"},
		{[]string{"audit", "verify", "--file", filepath.Join(dir, "missing.log")}, "missing.log"},
	} {
		code, out, errOut := runAuditCLI(t, tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("berth %s: exit %d, %q, %q; want exit 2 and one line naming %q", strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
	if code, out, _ := runAuditCLI(t, "audit", "help"); code != 0 || !strings.Contains(out, "berth audit verify") {
		t.Errorf("audit help: exit %d, %q", code, out)
	}
}
