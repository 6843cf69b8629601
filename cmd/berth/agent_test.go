package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestAgentRejectsBadModelFlags checks that --models, --prewarm and
// --prewarm-timeout are validated before the agent starts, with an error
// naming the flag.
func TestAgentRejectsBadModelFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--models", "m1,,m2"}, "--models"},
		{[]string{"--models", strings.Repeat("m", 129)}, "--models"},
		{[]string{"--models", "m1,a\tb"}, "--models"},
		{[]string{"--prewarm", "fetch-weights"}, "--prewarm"},
		{[]string{"--prewarm", "fetch {model}", "--prewarm-timeout", "0s"}, "--prewarm-timeout"},
	} {
		var out, errOut bytes.Buffer
		m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
		args := append([]string{"agent", "--gpus", "0", "--data-dir", t.TempDir(), "--server", "http://127.0.0.1:1"}, tc.args...)
		code := m.Run(context.Background(), args)
		if code != exitUsage || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
			t.Errorf("berth %s: exit %d, stdout %q, stderr %q; want exit 2 and an error naming %s",
				strings.Join(args, " "), code, out.String(), errOut.String(), tc.want)
		}
	}
}
