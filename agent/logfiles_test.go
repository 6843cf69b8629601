package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// readFile returns the content of path, failing the test if it cannot.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

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

func TestLogFilesRecycleEmptiesAndReusesFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	spareDir := filepath.Join(root, "spare")
	l, err := OpenLogFiles(spareDir, 2)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		t.Helper()
		path := filepath.Join(root, name)
		f, err := l.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(text); err != nil {
			t.Fatal(err)
		}
		return path
	}
	a, b, c := write("a.log", "output of a\n"), write("b.log", "output of b\n"), write("c.log", "output of c\n")
	for _, p := range []string{a, b, c} {
		l.Recycle(p)
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s still exists after Recycle (err %v)", p, err)
		}
	}
	if got := spares(t, spareDir); len(got) != 2 {
		t.Fatalf("kept %v, want 2 files (keep = 2)", got)
	}
	for _, name := range spares(t, spareDir) {
		if got := readFile(t, filepath.Join(spareDir, name)); got != "" {
			t.Fatalf("kept file %s holds %q, want it empty", name, got)
		}
	}

	// The next attempts start from the kept files, empty.
	d := write("d.log", "d")
	if got := readFile(t, d); got != "d" {
		t.Fatalf("d.log = %q, want only its own output", got)
	}
	if got := spares(t, spareDir); len(got) != 1 {
		t.Fatalf("kept %v after one Open, want 1 file", got)
	}

	// An existing log is appended to, never replaced by a kept file.
	if got := readFile(t, write("d.log", "+more")); got != "d+more" {
		t.Fatalf("d.log = %q, want d+more", got)
	}
	if got := spares(t, spareDir); len(got) != 1 {
		t.Fatalf("kept %v after an Open of an existing log, want the 1 file still kept", got)
	}

	l.Recycle(filepath.Join(root, "never-created.log")) // no output file: nothing to do
}

func TestOpenLogFilesTakesEmptyFilesLeftBehind(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	spareDir := filepath.Join(root, "spare")
	if err := os.MkdirAll(filepath.Join(spareDir, "a-directory"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"3": "", "7": "", "9": "", "5": "left over output"} {
		if err := os.WriteFile(filepath.Join(spareDir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := OpenLogFiles(spareDir, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := spares(t, spareDir); len(got) != 2 {
		t.Fatalf("after open, %s holds %v; want 2 empty files (not the directory, the non-empty file or a third)", spareDir, got)
	}
	path := filepath.Join(root, "x.log")
	f, err := l.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	l.Recycle(path) // under a new name, not over a kept one
	if got := spares(t, spareDir); len(got) != 2 {
		t.Fatalf("after a recycle, %s holds %v; want 2 files", spareDir, got)
	}

	var none *LogFiles // no spares: Open creates
	f, err = none.Open(filepath.Join(root, "y.log"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}
