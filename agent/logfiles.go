package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// LogFiles hands out the log files of new attempts from one directory and
// keeps those that ended empty for the next attempts. On ext4, reopening a
// kept file costs a few microseconds of kernel time, making and deleting
// one a few tens, and emptying one that holds output far more (after a
// truncate, ext4 flushes the file on its next close: 0.4–0.7 ms on the
// development VM). So an empty file is used again in place, and one with
// output is deleted, never emptied.
type LogFiles struct {
	dir  string
	keep int // the most empty files kept

	mu   sync.Mutex
	free []string // paths of empty files in dir
	seq  int      // the next new name in dir
}

// OpenLogFiles keeps up to keep empty log files in dir, creating dir if
// needed. Of what a previous agent left there it keeps the empty files and
// deletes the rest (the output of attempts it no longer runs).
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
		if n, err := strconv.Atoi(e.Name()); err == nil && n >= l.seq {
			l.seq = n + 1
		}
		if info, err := e.Info(); err != nil || !info.Mode().IsRegular() || info.Size() > 0 || len(l.free) >= keep {
			_ = os.RemoveAll(path)
			continue
		}
		l.free = append(l.free, path)
	}
	return l, nil
}

// Take returns the path of the log file of a new attempt: a kept empty
// file where there is one, otherwise a new name in the directory, for the
// file to be created when it is first opened.
func (l *LogFiles) Take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		path := l.free[n-1]
		l.free = l.free[:n-1]
		return path
	}
	path := filepath.Join(l.dir, strconv.Itoa(l.seq))
	l.seq++
	return path
}

// Release is done with the log file at path once its output is shipped:
// an empty file of the directory is kept for a later Take while fewer
// than keep are; any other file is deleted. A missing file is no error.
func (l *LogFiles) Release(path string) {
	info, err := os.Stat(path)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if info.Size() == 0 && info.Mode().IsRegular() && filepath.Dir(path) == l.dir && len(l.free) < l.keep {
		l.free = append(l.free, path)
		return
	}
	_ = os.Remove(path)
}
