// Package dirlock keeps two processes from using one data directory at
// once. What a server keeps there (the embedded store, the audit log, its
// keys) and what an agent keeps there (the process-group journal, log
// files) each assume a single owner: a second server would interleave the
// audit log's records, a second agent would kill the first one's attempts
// as left behind.
package dirlock

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// FileName is the lock file in a locked directory. It holds the pid of the
// process that last took the lock; the lock itself is an flock(2) on it,
// which the kernel drops when that process exits, however it exits.
const FileName = "lock"

// ErrInUse is returned, wrapped, by Acquire when another process holds the
// lock.
var ErrInUse = errors.New("in use")

// Lock is an exclusive hold on a directory, kept until Release.
type Lock struct{ f *os.File }

// Acquire creates dir if needed and takes its lock without waiting. When
// another process holds it, the error wraps ErrInUse and names that
// process's pid.
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is %w by another process%s", dir, ErrInUse, holder(f))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return nil, err
	}
	return &Lock{f: f}, nil
}

// holder returns " (pid N)" for the pid the lock file names, or "" when it
// names none.
func holder(f *os.File) string {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid, err := strconv.Atoi(string(bytes.TrimSpace(buf[:n])))
	if err != nil || pid <= 0 {
		return ""
	}
	return fmt.Sprintf(" (pid %d)", pid)
}

// Release gives the directory up (the lock file stays, for the next
// owner). It unlocks before it closes the file: a child process forked
// meanwhile (by any goroutine) shares the open file until it execs, and
// closing alone would leave the lock held until then.
func (l *Lock) Release() error {
	unlockErr := syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	return errors.Join(unlockErr, l.f.Close())
}

// File returns the locked file. A child process given it (as one of
// exec.Cmd's ExtraFiles) shares the lock: the directory stays locked until
// Release, or until this process and every such child have exited.
func (l *Lock) File() *os.File { return l.f }
