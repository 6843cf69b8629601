package dirlock

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestAcquireRefusesASecondHolderUntilReleased(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir)
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("second Acquire: got %v, want ErrInUse", err)
	}
	if want := fmt.Sprintf("(pid %d)", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Fatalf("second Acquire: %q does not name the holder %s", err, want)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	again.Release()
}

// TestLockOfAnExitedProcessIsFree holds the lock in a child process that
// exits without releasing it: the kernel drops it, so a server or agent
// killed with SIGKILL does not lock its directory for good.
func TestLockOfAnExitedProcessIsFree(t *testing.T) {
	if os.Getenv("DIRLOCK_CHILD_DIR") != "" {
		if _, err := Acquire(os.Getenv("DIRLOCK_CHILD_DIR")); err != nil {
			os.Exit(3)
		}
		os.Exit(0) // without Release
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestLockOfAnExitedProcessIsFree$")
	cmd.Env = append(os.Environ(), "DIRLOCK_CHILD_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil || strings.TrimSpace(string(data)) != fmt.Sprint(cmd.Process.Pid) {
		t.Fatalf("lock file holds %q (%v), want the child's pid %d", data, err, cmd.Process.Pid)
	}
	l, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after the holder exited: %v", err)
	}
	l.Release()
}

// TestReleaseUnlocksWhileACopyIsOpen releases a lock while a duplicate of
// its file descriptor is open, as it is in a child forked by another
// goroutine until that child execs: the lock is free at once.
func TestReleaseUnlocksWhileACopyIsOpen(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	dup, err := syscall.Dup(int(l.f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(dup)
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release, a copy of the released descriptor open: %v", err)
	}
	again.Release()
}
