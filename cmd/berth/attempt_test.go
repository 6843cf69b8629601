package main

import (
	"strings"
	"testing"
)

// TestAttemptCheckNeedsAnAttempt: berth attempt check with no id outside
// a job, or with two ids, is a usage error naming the id; an unknown
// attempt is the server's not found (exit 2: treat as not valid).
func TestAttemptCheckNeedsAnAttempt(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"attempt", "check"}, "BERTH_ATTEMPT_ID is unset"},
		{[]string{"attempt", "check", "a", "b"}, "give one attempt id"},
		{[]string{"attempt", "check", "no-such-attempt"}, `no attempt "no-such-attempt"`},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and one line saying %q", tc.args, code, out, errOut, exitUsage, tc.want)
		}
	}
}
