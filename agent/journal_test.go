package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestGroupJournalCompactsAndKeepsLiveGroups(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "groups")
	j, err := OpenGroupJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	// Group ids of processes that cannot exist (above pid_max) so that
	// KillStale's signals find nobody.
	const base = 1 << 30
	if err := j.Started("keep", base); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40_000; i++ {
		id := "attempt-" + strconv.Itoa(i)
		if err := j.Started(id, base+1+i); err != nil {
			t.Fatal(err)
		}
		if err := j.Ended(id); err != nil {
			t.Fatal(err)
		}
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() > journalCompactSize+4096 {
		t.Fatalf("journal is %d bytes after compaction should have run", info.Size())
	}
	if pgid, ok := j.Group("keep"); !ok || pgid != base {
		t.Fatalf("live entry lost in compaction: %d %v", pgid, ok)
	}
	if _, ok := j.Group("attempt-7"); ok {
		t.Fatal("ended attempt still live")
	}
	// The file on disk says the same: one live group, which KillStale
	// tries (and finds gone, which is not an error).
	if n, err := KillStale(path); n != 0 || err != nil {
		t.Fatalf("KillStale = %d, %v", n, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "start keep " + strconv.Itoa(base) + "\n"; len(data) < len(want) || string(data[:len(want)]) != want {
		t.Fatalf("compacted journal starts %q, want %q", data[:min(len(data), 40)], want)
	}
}
