package agent

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// spares lists the files kept in dir.
func spares(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestLogFilesKeepFilesForAttemptsToAppendTo(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "logs")
	l, err := OpenLogFiles(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	write := func(path, text string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(text); err != nil {
			t.Fatal(err)
		}
	}
	take := func() (string, int64) {
		t.Helper()
		p, start := l.Take()
		if filepath.Dir(p) != dir {
			t.Fatalf("Take = %s, want a path in %s", p, dir)
		}
		return p, start
	}
	var paths []string
	for i, text := range []string{"first\n", "", "third\n"} {
		p, start := take()
		if start != 0 || slices.Contains(paths, p) {
			t.Fatalf("Take %d with none kept = %s at %d; want a new name at 0 (taken before: %v)", i, p, start, paths)
		}
		write(p, text)
		paths = append(paths, p)
	}
	for _, p := range paths {
		l.Release(p)
	}
	if got := spares(t, dir); len(got) != 2 {
		t.Fatalf("kept %v, want 2 files (keep = 2)", got)
	}
	if _, err := os.Stat(paths[2]); !os.IsNotExist(err) {
		t.Fatalf("%s, released past keep, still exists (err %v)", paths[2], err)
	}

	// The next attempts append to the kept files, each from the end.
	for _, want := range []struct {
		path  string
		start int64
	}{{paths[1], 0}, {paths[0], int64(len("first\n"))}} {
		if p, start := take(); p != want.path || start != want.start {
			t.Fatalf("Take = %s at %d, want the kept %s at %d", p, start, want.path, want.start)
		}
	}
	if p, start := take(); slices.Contains(paths, p) || start != 0 {
		t.Fatalf("Take with none kept = %s at %d, want a new name at 0", p, start)
	}

	// A file grown to MaxKeptLog, or outside the directory, is deleted.
	if err := os.Truncate(paths[0], MaxKeptLog); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(root, "service.log")
	write(outside, "")
	for _, p := range []string{paths[0], outside} {
		l.Release(p)
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s still exists after Release (err %v)", p, err)
		}
	}
	l.Release(filepath.Join(dir, "never-created")) // nothing to do
}

func TestOpenLogFilesTakesFilesLeftBehind(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "logs")
	if err := os.MkdirAll(filepath.Join(dir, "a-directory"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"3": "", "7": "old output"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	big := filepath.Join(dir, "12")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, MaxKeptLog); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLogFiles(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := spares(t, dir); !slices.Equal(got, []string{"3", "7"}) {
		t.Fatalf("after open, %s holds %v; want [3 7] (not the directory or the full file)", dir, got)
	}
	starts := map[string]int64{}
	for range 2 {
		p, start := l.Take()
		starts[filepath.Base(p)] = start
	}
	if want := map[string]int64{"3": 0, "7": int64(len("old output"))}; !maps.Equal(starts, want) {
		t.Fatalf("Take twice = %v, want the kept files at their ends %v", starts, want)
	}
	if p, start := l.Take(); p != filepath.Join(dir, "13") || start != 0 {
		t.Fatalf("Take with none kept = %s at %d, want %s at 0 (past every name left behind)", p, start, filepath.Join(dir, "13"))
	}
}
