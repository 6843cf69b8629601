package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// GroupJournal records the process group of every attempt an agent starts
// in one append-only file ("start ATTEMPT PGID" and "end ATTEMPT" lines), so
// that an agent restarted after a crash can kill the groups its predecessor
// left running (KillStale). Appending a line to an open file is far cheaper
// than a file per attempt. It is safe for concurrent use.
type GroupJournal struct {
	path string

	mu   sync.Mutex
	f    *os.File
	size int64
	live map[string]int // attempt id → process group of attempts not ended
}

// journalCompactSize is the size past which the journal is rewritten with
// only the live entries.
const journalCompactSize = 1 << 20

// OpenGroupJournal creates (or empties) the journal at path. Call KillStale
// on path first: what an old journal says is lost here.
func OpenGroupJournal(path string) (*GroupJournal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("group journal: %w", err)
	}
	return &GroupJournal{path: path, f: f, live: map[string]int{}}, nil
}

// Started records that attempt runs as process group pgid.
func (j *GroupJournal) Started(attemptID string, pgid int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.live[attemptID] = pgid
	return j.appendLocked("start " + attemptID + " " + strconv.Itoa(pgid) + "\n")
}

// Ended records that attempt's process group is gone.
func (j *GroupJournal) Ended(attemptID string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.live[attemptID]; !ok {
		return nil
	}
	delete(j.live, attemptID)
	if j.size > journalCompactSize {
		return j.compactLocked()
	}
	return j.appendLocked("end " + attemptID + "\n")
}

// Group returns the process group recorded for a live attempt.
func (j *GroupJournal) Group(attemptID string) (int, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	pgid, ok := j.live[attemptID]
	return pgid, ok
}

// Close closes the journal file.
func (j *GroupJournal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.f.Close()
}

func (j *GroupJournal) appendLocked(line string) error {
	n, err := j.f.WriteString(line)
	j.size += int64(n)
	if err != nil {
		return fmt.Errorf("group journal: %w", err)
	}
	return nil
}

// replaceFile writes data to path atomically: to a temporary file beside
// it, renamed over path, so that a reader (or an agent started after a
// crash) sees the old file or the new one, never half of one.
func replaceFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// compactLocked rewrites the journal with the live entries only, replacing
// the old file atomically.
func (j *GroupJournal) compactLocked() error {
	var b strings.Builder
	for id, pgid := range j.live {
		b.WriteString("start " + id + " " + strconv.Itoa(pgid) + "\n")
	}
	if err := replaceFile(j.path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("group journal: compact: %w", err)
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("group journal: compact: %w", err)
	}
	_ = j.f.Close()
	j.f, j.size = f, int64(b.Len())
	return nil
}

// KillStale replays the journal at path and kills, with KillAttempts, each
// attempt started and not ended there (its process group, and the
// processes that left it), returning how many of those groups were still
// alive. A missing journal is not an error. It goes on past malformed
// lines and returns the first such error with the count; it never signals
// its own process group, nor processes it may not signal (EPERM). It
// changes no file but the cgroups: those of the attempts, and then, once
// empty, those of the worker whose data dir holds the journal.
func KillStale(path string) (int, error) {
	live, err := StaleGroups(path)
	killed, _, kerr := KillAttempts(live, savedWorkerID(filepath.Dir(path)))
	closeWorkerCgroups(filepath.Dir(path))
	return killed, errors.Join(err, kerr)
}

// StaleGroups replays the journal at path and returns the process group of
// each attempt started and not ended there, by attempt id. A missing
// journal is none. It goes on past malformed lines and returns the first
// such error with what it read.
func StaleGroups(path string) (map[string]int, error) {
	live := map[string]int{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return live, nil
	}
	if err != nil {
		return live, fmt.Errorf("kill stale: %w", err)
	}
	defer f.Close()
	var first error
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 3 && fields[0] == "start":
			pgid, err := strconv.Atoi(fields[2])
			if err != nil || pgid <= 1 {
				first = errors.Join(first, fmt.Errorf("kill stale: %s:%d: %q is not a process group id", path, n, fields[2]))
				continue
			}
			live[fields[1]] = pgid
		case len(fields) == 2 && fields[0] == "end":
			delete(live, fields[1])
		default:
			first = errors.Join(first, fmt.Errorf("kill stale: %s:%d: malformed line %q", path, n, sc.Text()))
		}
	}
	if err := sc.Err(); err != nil {
		first = errors.Join(first, fmt.Errorf("kill stale: %w", err))
	}
	return live, first
}

// killGroups sends SIGKILL to each process group of live but its own and
// returns how many were alive.
func killGroups(live map[string]int) (int, error) {
	var first error
	own := syscall.Getpgrp()
	killed := 0
	for _, pgid := range live {
		if pgid == own {
			continue
		}
		switch err := syscall.Kill(-pgid, syscall.SIGKILL); err {
		case nil:
			killed++
		case syscall.ESRCH, syscall.EPERM:
		default:
			first = errors.Join(first, fmt.Errorf("kill stale: group %d: %w", pgid, err))
		}
	}
	return killed, first
}
