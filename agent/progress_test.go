package agent

import (
	"slices"
	"strings"
	"testing"
)

// scanAll feeds output to a fresh scanner in the pieces given and returns
// what it found, in order (the last value of each piece that had any).
func scanAll(pieces ...string) []string {
	var s progressScanner
	var found []string
	for _, p := range pieces {
		if v, ok := s.scan([]byte(p)); ok {
			found = append(found, v)
		}
	}
	return found
}

func TestProgressLines(t *testing.T) {
	t.Parallel()
	out := "epoch 1\nBERTH_PROGRESS 0.25\r\n  BERTH_PROGRESS \tstep 3/10, loss 0.1 \n" +
		"not BERTH_PROGRESS 0.9\nBERTH_PROGRESS\nBERTH_PROGRESS   \nBERTH_PROGRESSIVE 1\n" +
		"BERTH_PROGRESS 0.75\rBERTH_PROGRESS 1" // the last line has not ended yet
	want := []string{"0.25", "step 3/10, loss 0.1", "0.75"}

	bytewise := make([]string, len(out))
	for i := range out {
		bytewise[i] = out[i : i+1]
	}
	if got := scanAll(bytewise...); !slices.Equal(got, want) {
		t.Fatalf("fed byte by byte: found %q, want %q", got, want)
	}
	// Cut in three anywhere: what is found is in order and ends with the
	// latest value.
	for i := 0; i <= len(out); i++ {
		for j := i; j <= len(out); j++ {
			got := scanAll(out[:i], out[i:j], out[j:])
			if len(got) == 0 || got[len(got)-1] != "0.75" || !inOrder(got, want) {
				t.Fatalf("cut at %d and %d: found %q, want values of %q in order, ending with the last", i, j, got, want)
			}
		}
	}
}

// inOrder reports whether got is a subsequence of want.
func inOrder(got, want []string) bool {
	for _, g := range got {
		i := slices.Index(want, g)
		if i < 0 {
			return false
		}
		want = want[i+1:]
	}
	return true
}

func TestProgressLineLimits(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", maxProgress)
	for _, tc := range []struct {
		name   string
		pieces []string
		want   []string
	}{
		{"value of 1 KiB", []string{"BERTH_PROGRESS " + long + "\n"}, []string{long}},
		{"value over 1 KiB", []string{"BERTH_PROGRESS " + long + "y\n"}, nil},
		{"after a long line cut in pieces", []string{strings.Repeat("z", 3*maxProgressRead), strings.Repeat("z", maxProgressRead),
			"BERTH_PROGRESS 0.1\nBERTH_", "PROGRESS 0.2\n"}, []string{"0.2"}},
		{"a long line that ends like one", []string{strings.Repeat("z", 3*maxProgressRead), "\nBERTH_PROGRESS 0.3\n"}, []string{"0.3"}},
		{"line over the read limit", []string{"BERTH_PROGRESS" + strings.Repeat(" ", maxProgressRead), "0.4\n"}, nil},
	} {
		if got := scanAll(tc.pieces...); !slices.Equal(got, tc.want) {
			t.Errorf("%s: found %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestProgressValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want, err string }{
		{"0.5", "0.5", ""},
		{" \tstep 3/10\r\n", "step 3/10", ""},
		{"", "", "progress is empty"},
		{" \n", "", "progress is empty"},
		{strings.Repeat("x", maxProgress) + "\n", strings.Repeat("x", maxProgress), ""},
		{strings.Repeat("x", maxProgress+1), "", "progress is longer than 1 KiB"},
	} {
		got, err := progressValue([]byte(tc.in))
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("progressValue(%.20q) = %.20q, %v; want %.20q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestProgressSentOncePerChange(t *testing.T) {
	t.Parallel()
	var p progress
	if _, ok := p.pending(); ok {
		t.Fatal("pending before any progress")
	}
	p.set("0.1")
	p.set("0.2")
	v, ok := p.pending()
	if !ok || v != "0.2" {
		t.Fatalf("pending = %q, %v; want the latest, 0.2", v, ok)
	}
	p.set("0.3") // while 0.2 is being sent
	p.sent("0.2")
	if v, ok := p.pending(); !ok || v != "0.3" {
		t.Fatalf("pending after sending an older value = %q, %v; want 0.3", v, ok)
	}
	p.sent("0.3")
	p.set("0.3")
	if v, ok := p.pending(); ok {
		t.Fatalf("pending = %q after the same value again; want nothing", v)
	}
}
