package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// LogFiles keeps the emptied log files of ended attempts for the next ones.
// Creating and deleting a file per attempt is the costliest step of starting
// a short job on ext4 (100–700 µs of kernel time each on the development
// VM, against a few tens for linking a kept file into place), and the agent
// starts attempts one after another.
type LogFiles struct {
	dir  string
	keep int // the most files kept

	mu   sync.Mutex
	free []string // paths of empty files in dir
	seq  int      // the next name in dir
}

// OpenLogFiles keeps up to keep spare log files in dir, creating dir if
// needed and taking the files a previous agent left there.
func OpenLogFiles(dir string, keep int) (*LogFiles, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	l := &LogFiles{dir: dir, keep: keep}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if info, err := e.Info(); err != nil || !info.Mode().IsRegular() || info.Size() > 0 || len(l.free) >= keep {
			_ = os.RemoveAll(path)
			continue
		}
		l.free = append(l.free, path)
		if n, err := strconv.Atoi(e.Name()); err == nil && n >= l.seq {
			l.seq = n + 1
		}
	}
	return l, nil
}

// Open opens path for appending, creating it if it does not exist: from a
// kept file where there is one, otherwise a new one. A nil LogFiles always
// creates.
func (l *LogFiles) Open(path string) (*os.File, error) {
	if spare := l.take(); spare != "" {
		// Link, not rename: an existing log must be appended to, not replaced.
		err := os.Link(spare, path)
		if err == nil {
			_ = os.Remove(spare)
		} else {
			l.put(spare)
		}
	}
	return os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
}

// Recycle empties the log file at path and keeps it for a later Open, or
// deletes it when enough are kept. A missing file is no error.
func (l *LogFiles) Recycle(path string) {
	if err := os.Truncate(path, 0); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			_ = os.Remove(path)
		}
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.free) >= l.keep {
		_ = os.Remove(path)
		return
	}
	spare := filepath.Join(l.dir, strconv.Itoa(l.seq))
	l.seq++
	if err := os.Rename(path, spare); err != nil {
		_ = os.Remove(path)
		return
	}
	l.free = append(l.free, spare)
}

// take returns a kept file's path, or "" when none is kept.
func (l *LogFiles) take() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.free) == 0 {
		return ""
	}
	spare := l.free[len(l.free)-1]
	l.free = l.free[:len(l.free)-1]
	return spare
}

// put keeps a file take returned.
func (l *LogFiles) put(spare string) {
	l.mu.Lock()
	l.free = append(l.free, spare)
	l.mu.Unlock()
}
