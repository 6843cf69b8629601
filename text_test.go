package berth

import "testing"

func TestTruncate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exact", 5, "exact"},
		{"longer", 4, "long"},
		{"héllo", 2, "h"}, // é is 2 bytes, at 1–2: not split
		{"héllo", 3, "hé"},
		{"日本", 4, "日"},
		{"日本", 2, ""},
		{"x", 0, ""},
	} {
		if got := Truncate(tt.s, tt.n); got != tt.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exact", 5, "exact"},
		{"longer", 4, "long…"},
		{"héllo", 2, "h…"}, // not split inside é
	} {
		if got := Clip(tt.s, tt.n); got != tt.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}
