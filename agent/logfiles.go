package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// LogFiles hands out the log files of batch attempts from one directory
// and takes them back when the attempts are done. A file taken back is
// kept, output and all, for a later attempt to append to, until it holds
// MaxKeptLog bytes; then it is deleted. Each attempt's output starts at
// the size the file had when it was taken. On ext4 under the churn of
// short jobs, making a file costs 100–700 µs of kernel time and emptying
// one with output about as much (a truncate, and a flush on the next
// close), against a few µs to reopen a kept one.
type LogFiles struct {
	dir  string
	keep int // the most files kept

	mu   sync.Mutex
	free []keptLog
	seq  int // the next new name in dir
}

// keptLog is a file of the directory no attempt writes to, and its size.
type keptLog struct {
	path string
	size int64
}

// MaxKeptLog is the size past which a log file is deleted rather than kept.
const MaxKeptLog = 1 << 20

// OpenLogFiles keeps up to keep log files in dir, creating dir if needed.
// Of what a previous agent left there it keeps the files under MaxKeptLog
// and deletes the rest.
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
		info, err := e.Info()
		if err != nil || !l.keeps(info) {
			_ = os.RemoveAll(path)
			continue
		}
		l.free = append(l.free, keptLog{path, info.Size()})
	}
	return l, nil
}

// keeps reports whether a file of the directory that no attempt writes to
// is kept; l.mu is held or l not yet shared.
func (l *LogFiles) keeps(info os.FileInfo) bool {
	return info.Mode().IsRegular() && info.Size() < MaxKeptLog && len(l.free) < l.keep
}

// Take returns the path of the log file of a new attempt and the offset
// its output will start at: a kept file and its size where there is one,
// otherwise a new name in the directory (the file is created when first
// opened) and 0.
func (l *LogFiles) Take() (path string, start int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		f := l.free[n-1]
		l.free = l.free[:n-1]
		return f.path, f.size
	}
	path = filepath.Join(l.dir, strconv.Itoa(l.seq))
	l.seq++
	return path, 0
}

// Release takes back the log file at path once its output is shipped. A
// file of the directory is kept while it is under MaxKeptLog and fewer
// than keep are; any other file is deleted. A missing file is no error.
func (l *LogFiles) Release(path string) {
	info, err := os.Stat(path)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if filepath.Dir(path) == l.dir && l.keeps(info) {
		l.free = append(l.free, keptLog{path, info.Size()})
		return
	}
	_ = os.Remove(path)
}
