package berth

import "testing"

func TestTruncateAndClip(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		s                  string
		n                  int
		truncated, clipped string
	}{
		{"short", 10, "short", "short"},
		{"exact", 5, "exact", "exact"},
		{"longer", 4, "long", "long…"},
		{"héllo", 2, "h", "h…"}, // é is 2 bytes, at 1–2: not split
		{"héllo", 3, "hé", "hé…"},
		{"日本", 4, "日", "日…"},
		{"日本", 2, "", "…"},
		{"x", 0, "", "…"},
	} {
		if got := Truncate(tt.s, tt.n); got != tt.truncated {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.truncated)
		}
		if got := Clip(tt.s, tt.n); got != tt.clipped {
			t.Errorf("Clip(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.clipped)
		}
	}
}

func TestArgvStringQuotesForSh(t *testing.T) {
	for _, c := range []struct {
		argv Argv
		want string
	}{
		{Argv{"python", "train.py", "--lr=3e-4", "/data/x_1.csv"}, "python train.py --lr=3e-4 /data/x_1.csv"},
		{Argv{"sh", "-c", "echo hi; sleep 30"}, "sh -c 'echo hi; sleep 30'"},
		{Argv{"echo", "it's", ""}, `echo 'it'\''s' ''`},
		{Argv{"echo", "$HOME", "a*b", "ünï"}, "echo '$HOME' 'a*b' 'ünï'"},
	} {
		if got := c.argv.String(); got != c.want {
			t.Errorf("%q: got %s, want %s", []string(c.argv), got, c.want)
		}
	}
}

func TestCount(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ got, want string }{
		{Count(1, "GPU"), "1 GPU"},
		{Count(0, "GPU"), "0 GPUs"},
		{Count(2, "GPU"), "2 GPUs"},
		{Count(0.5, "CPU"), "0.5 CPUs"},
		{Count(1.0, "CPU"), "1 CPU"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestStripANSI(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain",
		"\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO": "(APIServer pid=1) INFO",
		"\x1b[2K\x1b[1Gbar":                         "bar",
		"\x1b]0;title\x07text":                      "text",
		"\x1b]8;;http://x\x1b\\link":                "link",
	} {
		if got := StripANSI(in); got != want {
			t.Errorf("StripANSI(%q) = %q, want %q", in, got, want)
		}
	}
}
