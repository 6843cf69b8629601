package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServerRefusesABadContract starts berth server with a contract
// directory holding a contract whose prompt names an undeclared input:
// it exits with one line naming --contracts, the file and the field.
func TestServerRefusesABadContract(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	doc := "name: bad\nmodel: m\nprompt: \"{{.Inputs.nope}}\"\noutput: {type: object}\n"
	if err := os.WriteFile(bad, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	code := m.Run(context.Background(), []string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--contracts", dir})
	line := errOut.String()
	if code == 0 || strings.Count(line, "\n") != 1 || !strings.Contains(line, "--contracts") ||
		!strings.Contains(line, bad+": field prompt:") || !strings.Contains(line, `"nope"`) {
		t.Errorf("exit %d, %q; want one line naming --contracts, %s, its field prompt and the input", code, line, bad)
	}
}
