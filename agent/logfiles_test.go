package agent

import (
	"os"
	"path/filepath"
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

func TestLogFilesKeepEmptyFilesAndDeleteOutput(t *testing.T) {
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
	taken := map[string]bool{}
	take := func() string {
		t.Helper()
		p := l.Take()
		if filepath.Dir(p) != dir {
			t.Fatalf("Take = %s, want a path in %s", p, dir)
		}
		if taken[p] {
			t.Fatalf("Take = %s again while it is in use", p)
		}
		taken[p] = true
		return p
	}
	quiet1, quiet2, quiet3, loud := take(), take(), take(), take()
	for _, p := range []string{quiet1, quiet2, quiet3} {
		write(p, "")
	}
	write(loud, "output\n")
	for _, p := range []string{loud, quiet1, quiet2, quiet3} {
		l.Release(p)
		delete(taken, p)
	}
	if _, err := os.Stat(loud); !os.IsNotExist(err) {
		t.Fatalf("%s, which held output, still exists after Release (err %v)", loud, err)
	}
	if got := spares(t, dir); len(got) != 2 {
		t.Fatalf("kept %v, want 2 empty files (keep = 2)", got)
	}

	// The next attempts get the kept files, then new names.
	again1, again2, fresh := take(), take(), take()
	if again1 == again2 || (again1 != quiet1 && again1 != quiet2) || (again2 != quiet1 && again2 != quiet2) {
		t.Fatalf("Take after releases = %s, %s; want the kept %s and %s", again1, again2, quiet1, quiet2)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Fatalf("Take with none kept = %s, which exists (err %v); want a new name", fresh, err)
	}

	outside := filepath.Join(root, "service.log") // an adopted service's log
	write(outside, "")
	l.Release(outside)
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Fatalf("%s, outside the directory, still exists after Release (err %v)", outside, err)
	}
	l.Release(fresh) // never created: nothing to do
}

func TestOpenLogFilesTakesEmptyFilesLeftBehind(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "logs")
	if err := os.MkdirAll(filepath.Join(dir, "a-directory"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"3": "", "7": "", "9": "", "12": "left over output"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := OpenLogFiles(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := spares(t, dir); len(got) != 2 {
		t.Fatalf("after open, %s holds %v; want 2 empty files (not the directory, the file with output or a third)", dir, got)
	}
	kept := map[string]bool{}
	for _, name := range spares(t, dir) {
		kept[filepath.Join(dir, name)] = true
	}
	for range 2 {
		if p := l.Take(); !kept[p] {
			t.Fatalf("Take = %s, want one of the kept %v", p, kept)
		}
	}
	if p, want := l.Take(), filepath.Join(dir, "13"); p != want {
		t.Fatalf("Take with none kept = %s, want %s (past every name left behind)", p, want)
	}
}
