package audit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func clock() func() time.Time { return func() time.Time { return t0 } }

// writeLog writes n records to a new log in a temp dir with a checkpoint
// every `every` records and closes it (which checkpoints the rest).
func writeLog(t *testing.T, n, every int) (logPath, cpPath string) {
	t.Helper()
	logPath = filepath.Join(t.TempDir(), "sub", "audit.log")
	l, err := Open(logPath, Options{CheckpointEvery: every, Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		e := Entry{Action: "job.submitted", Actor: "alice", Role: "user", Target: "job/" + strconv.Itoa(i), Fields: map[string]string{"gpus": strconv.Itoa(i % 3)}}
		if err := l.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return logPath, logPath + ".head"
}

// lines returns the file's lines without their newlines.
func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func writeLines(t *testing.T, path string, ls []string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(ls, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestAppendReadRoundTrip(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2024, 1, 2, 3, 4, 5, 6, time.FixedZone("X", 3600))
	in := []Entry{
		{Action: "token.created", Actor: "root", Role: "admin", Target: "token/ci", Fields: map[string]string{"role": "user", "note": "line\nbreak \"quoted\""}},
		{Action: "server.started", Time: at},
	}
	if err := l.Append(in...); err != nil {
		t.Fatal(err)
	}
	seq, head := l.Head()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(Entry{Action: "x"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}

	ls := lines(t, path)
	if len(ls) != 2 || seq != 2 || head != lineHash([]byte(ls[1])) {
		t.Fatalf("Head = %d %s; file:\n%s", seq, head, strings.Join(ls, "\n"))
	}
	if !strings.HasPrefix(ls[0], `{"seq":1,"time":"2025-03-01T12:00:00Z","action":"token.created","actor":"root","role":"admin","target":"token/ci","fields":{`) ||
		!strings.HasSuffix(ls[0], `"prev":"`+ZeroHash+`"}`) {
		t.Errorf("line 1 = %s", ls[0])
	}
	if want := `{"seq":2,"time":"2024-01-02T02:04:05.000000006Z","action":"server.started","prev":"` + lineHash([]byte(ls[0])) + `"}`; ls[1] != want {
		t.Errorf("line 2 = %s\nwant     %s", ls[1], want)
	}

	var got []Record
	err = Read(path, 0, func(r Record, line []byte) error {
		if r.Seq == 1 && string(line) != ls[0] {
			t.Errorf("Read line = %s, want %s", line, ls[0])
		}
		got = append(got, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Fields["note"] != in[0].Fields["note"] || got[0].Actor != "root" || !got[1].Time.Equal(at) || got[1].Prev != lineHash([]byte(ls[0])) {
		t.Fatalf("Read = %+v", got)
	}

	rep, err := Verify(path, path+".head")
	if err != nil || rep.Records != 2 || rep.Head != head || rep.Checkpoints != 1 {
		t.Fatalf("Verify = %+v, %v; want 2 records, head %s, 1 checkpoint", rep, err, head)
	}
	if cps := lines(t, path+".head"); len(cps) != 1 || cps[0] != `{"seq":2,"hash":"`+head+`","time":"2025-03-01T12:00:00Z"}` {
		t.Fatalf("checkpoint file = %q", cps)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("log mode = %v, %v; want 0600", st.Mode(), err)
	}
}

func TestReopenContinuesChain(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	var heads []string
	for round := range 3 {
		l, err := Open(path, Options{Now: clock()})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if seq, h := l.Head(); seq != uint64(round*2) || (round > 0 && h != heads[round-1]) {
			t.Fatalf("round %d: reopened at seq %d head %s, want %d %v", round, seq, h, round*2, heads)
		}
		if err := l.Append(Entry{Action: "a"}, Entry{Action: "b"}); err != nil {
			t.Fatal(err)
		}
		_, h := l.Head()
		heads = append(heads, h)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := Verify(path, path+".head")
	if err != nil || rep.Records != 6 || rep.Head != heads[2] || rep.Checkpoints != 3 {
		t.Fatalf("Verify across reopens = %+v, %v", rep, err)
	}
}

func TestConcurrentAppendsVerify(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{CheckpointEvery: 7})
	if err != nil {
		t.Fatal(err)
	}
	const writers, appends = 8, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range appends {
				batch := make([]Entry, 1+i%3)
				for k := range batch {
					batch[k] = Entry{Action: "job.submitted", Actor: "w" + strconv.Itoa(w)}
				}
				if err := l.Append(batch...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	perWriter := uint64(0)
	for i := range appends {
		perWriter += uint64(1 + i%3)
	}
	rep, err := Verify(path, path+".head")
	if err != nil || rep.Records != writers*perWriter || rep.Checkpoints < int(rep.Records/9) { // at most 7+2 records between checkpoints
		t.Fatalf("Verify = %+v, %v; want %d records", rep, err, writers*perWriter)
	}
	count := map[string]uint64{}
	if err := Read(path, 0, func(r Record, _ []byte) error { count[r.Actor]++; return nil }); err != nil {
		t.Fatal(err)
	}
	for w := range writers {
		if c := count["w"+strconv.Itoa(w)]; c != perWriter {
			t.Errorf("writer %d has %d records, want %d", w, c, perWriter)
		}
	}
}

// TestVerifyDetectsTampering writes a 10-record log with checkpoints at
// seqs 4, 8 and 10 (checkpoint lines 1–3), tampers with it, and checks
// Verify names the right place.
func TestVerifyDetectsTampering(t *testing.T) {
	t.Parallel()
	edit := func(ls []string, i int) {
		ls[i] = strings.Replace(ls[i], `"actor":"alice"`, `"actor":"mallory"`, 1)
	}
	for _, tc := range []struct {
		name   string
		log    func(ls []string) []string // nil: untouched
		head   func(ls []string) []string // the checkpoint file; nil: untouched
		noNL   bool                       // drop the log's final newline
		line   int
		seq    uint64
		cpLine int
		reason string
	}{
		{name: "edit a middle record", log: func(ls []string) []string { edit(ls, 4); return ls },
			line: 6, seq: 6, reason: "prev hash does not match line 5: line 5 was edited"},
		{name: "edit a checkpointed middle record", log: func(ls []string) []string { edit(ls, 3); return ls },
			line: 4, seq: 4, cpLine: 1, reason: "does not match checkpoint line 1: the record was edited"},
		{name: "edit the last record", log: func(ls []string) []string { edit(ls, 9); return ls },
			line: 10, seq: 10, cpLine: 3, reason: "does not match checkpoint line 3"},
		{name: "delete a middle line", log: func(ls []string) []string { return append(ls[:4], ls[5:]...) },
			line: 5, seq: 6, reason: "seq 6 follows 4 (line 4): record 5 was deleted"},
		{name: "delete two lines", log: func(ls []string) []string { return append(ls[:4], ls[6:]...) },
			line: 5, seq: 7, reason: "records 5–6 were deleted"},
		{name: "delete the first line", log: func(ls []string) []string { return ls[1:] },
			line: 1, seq: 2, reason: "the log starts at seq 2, not 1: record 1 was deleted"},
		{name: "insert a forged line", log: func(ls []string) []string {
			forged := fmt.Sprintf(`{"seq":6,"time":"2025-03-01T12:00:00Z","action":"token.created","actor":"mallory","prev":"%s"}`, lineHash([]byte(ls[4])))
			return append(ls[:5], append([]string{forged}, ls[5:]...)...)
		}, line: 7, seq: 6, reason: "seq 6 repeats (line 6 has it too)"},
		{name: "swap two lines", log: func(ls []string) []string { ls[4], ls[5] = ls[5], ls[4]; return ls },
			line: 5, seq: 6, reason: "seq 6 follows 4 (line 4): record 5 was deleted, or lines were reordered"},
		{name: "truncate after the last checkpoint", log: func(ls []string) []string { return ls[:9] },
			seq: 10, cpLine: 3, reason: "checkpoint says record 10 exists; the log ends at record 9 (truncated)"},
		{name: "truncate to before a checkpoint", log: func(ls []string) []string { return ls[:6] },
			seq: 8, cpLine: 2, reason: "checkpoint says record 8 exists; the log ends at record 6 (truncated)"},
		{name: "truncate everything", log: func(ls []string) []string { return nil },
			seq: 4, cpLine: 1, reason: "the log ends at record 0 (truncated)"},
		{name: "append a garbage line", log: func(ls []string) []string { return append(ls, "garbage") },
			line: 11, reason: "not a JSON record"},
		{name: "append an empty line", log: func(ls []string) []string { return append(ls, "") },
			line: 11, reason: "empty line"},
		{name: "remove the trailing newline", noNL: true,
			line: 10, seq: 10, reason: "does not end in a newline"},
		{name: "reorder checkpoints", head: func(cs []string) []string { cs[0], cs[1] = cs[1], cs[0]; return cs },
			seq: 4, cpLine: 2, reason: "checkpoint seq 4 does not follow 8 of checkpoint line 1"},
		{name: "garbage checkpoint", head: func(cs []string) []string { return append(cs, "{") },
			cpLine: 4, reason: "not a JSON checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logPath, cpPath := writeLog(t, 10, 4)
			if cs := lines(t, cpPath); len(cs) != 3 {
				t.Fatalf("checkpoint file has %d lines, want 3", len(cs))
			}
			if tc.log != nil {
				ls := tc.log(lines(t, logPath))
				if len(ls) == 0 {
					if err := os.WriteFile(logPath, nil, 0o600); err != nil {
						t.Fatal(err)
					}
				} else {
					writeLines(t, logPath, ls)
				}
			}
			if tc.head != nil {
				writeLines(t, cpPath, tc.head(lines(t, cpPath)))
			}
			if tc.noNL {
				b, _ := os.ReadFile(logPath)
				if err := os.WriteFile(logPath, bytes.TrimSuffix(b, []byte("\n")), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Verify(logPath, cpPath)
			var ce *ChainError
			if !errors.As(err, &ce) {
				t.Fatalf("Verify = %v, want a *ChainError", err)
			}
			if ce.Line != tc.line || ce.Seq != tc.seq || ce.CheckpointLine != tc.cpLine || !strings.Contains(ce.Reason, tc.reason) {
				t.Fatalf("Verify = %+v (%v);\nwant line %d seq %d checkpoint line %d, reason containing %q", *ce, ce, tc.line, tc.seq, tc.cpLine, tc.reason)
			}
			if tc.line > 0 && !strings.HasPrefix(ce.Error(), fmt.Sprintf("line %d", tc.line)) {
				t.Errorf("Error() = %q does not start with the line", ce.Error())
			}
		})
	}
}

func TestVerifyWithoutCheckpointsMissesOnlyTheTail(t *testing.T) {
	t.Parallel()
	logPath, cpPath := writeLog(t, 10, 4)
	rep, err := Verify(logPath, cpPath)
	if err != nil || rep.Records != 10 || rep.Checkpoints != 3 {
		t.Fatalf("clean log: %+v, %v", rep, err)
	}
	ls := lines(t, logPath)
	ls[9] = strings.Replace(ls[9], "alice", "mallory", 1)
	writeLines(t, logPath, ls)
	for _, cp := range []string{"", filepath.Join(t.TempDir(), "missing.head")} {
		rep, err := Verify(logPath, cp)
		if err != nil || rep.Checkpoints != 0 || rep.Records != 10 {
			t.Fatalf("Verify(%q) of an edited last record = %+v, %v; the chain alone cannot see it", cp, rep, err)
		}
	}
	if _, err := Verify(logPath, cpPath); err == nil {
		t.Fatal("the checkpoint covering the last record did not catch its edit")
	}
}

func TestOpenRefusesDamagedLog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		damage func(logPath, cpPath string) error
		want   string
	}{
		{"torn tail longer than a line", func(p, _ string) error { return appendFile(p, strings.Repeat("x", MaxLine+2)) }, "torn"},
		{"garbage last line", func(p, _ string) error { return appendFile(p, "garbage\n") }, "not a JSON record"},
		{"truncated after a checkpoint", func(p, _ string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(p, b[:bytes.LastIndexByte(b[:len(b)-1], '\n')+1], 0o600)
		}, "truncated"},
		{"garbage checkpoint", func(_, cp string) error { return appendFile(cp, "{}\n") }, "not a checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logPath, cpPath := writeLog(t, 10, 4)
			if err := tc.damage(logPath, cpPath); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(logPath)
			l, err := Open(logPath, Options{})
			if err == nil {
				l.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "berth audit verify") {
				t.Fatalf("Open = %v, want %q and a hint to run berth audit verify", err, tc.want)
			}
			if after, _ := os.ReadFile(logPath); !bytes.Equal(before, after) {
				t.Fatal("Open changed the damaged log")
			}
		})
	}
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func TestCheckpointsOnlyWhenSomethingWasAppended(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	cpPath := filepath.Join(t.TempDir(), "cp")
	l, err := Open(path, Options{CheckpointEvery: 3, CheckpointPath: cpPath, Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		b, err := os.ReadFile(cpPath)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Count(b, []byte("\n"))
	}
	if err := l.Checkpoint(); err != nil || count() != 0 {
		t.Fatalf("Checkpoint of an empty log: %v, %d lines", err, count())
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.Append(Entry{Action: "a"}, Entry{Action: "a"}))
	if count() != 0 {
		t.Fatal("checkpointed after 2 of 3 records")
	}
	must(l.Append(Entry{Action: "a"}))
	if count() != 1 {
		t.Fatal("no checkpoint after 3 records")
	}
	must(l.Checkpoint())
	must(l.Append(Entry{Action: "a"}))
	must(l.Checkpoint())
	must(l.Checkpoint())
	must(l.Close())
	if count() != 2 {
		t.Fatalf("%d checkpoints, want 2 (seq 3, seq 4)", count())
	}
	rep, err := Verify(path, cpPath)
	if err != nil || rep.Checkpoints != 2 || rep.Records != 4 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}

func TestAppendRejectsBadEntriesAndBreaksOnWriteFailure(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(Entry{Action: "a"}, Entry{}); err == nil || !strings.Contains(err.Error(), "entry 1 has no action") {
		t.Fatalf("Append without an action = %v", err)
	}
	if err := l.Append(Entry{Action: "a", Fields: map[string]string{"x": strings.Repeat("x", MaxLine)}}); err == nil {
		t.Fatal("Append of an over-long entry succeeded")
	}
	if err := l.Append(Entry{Action: "a"}); err != nil {
		t.Fatalf("Append after rejected entries: %v", err)
	}
	if seq, _ := l.Head(); seq != 1 {
		t.Fatalf("Head seq = %d, want 1: rejected entries must not be numbered", seq)
	}
	l.f.Close() // make the next write fail
	err1 := l.Append(Entry{Action: "b"})
	err2 := l.Append(Entry{Action: "c"})
	if err1 == nil || err2 != err1 || l.Checkpoint() != err1 || l.Close() != err1 {
		t.Fatalf("after a failed write: %v, then %v; want the same sticky error", err1, err2)
	}
	if rep, err := Verify(path, ""); err != nil || rep.Records != 1 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}

func TestTailAndReadAfter(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := 1; i <= n; i++ {
		// Lines of varied length, some longer than a read chunk.
		pad := strings.Repeat("p", (i*7919)%1500)
		if i%37 == 0 {
			pad = strings.Repeat("p", 70000+i)
		}
		if err := l.Append(Entry{Action: "a", Fields: map[string]string{"pad": pad}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	all := lines(t, path)
	for _, k := range []int{1, 2, 20, n, n + 5} {
		got, err := Tail(path, k)
		if err != nil {
			t.Fatal(err)
		}
		want := all[max(0, n-k):]
		if len(got) != len(want) {
			t.Fatalf("Tail(%d) returned %d lines, want %d", k, len(got), len(want))
		}
		for i := range got {
			if string(got[i]) != want[i] {
				t.Fatalf("Tail(%d)[%d] = %.80s, want %.80s", k, i, got[i], want[i])
			}
		}
	}
	stop := errors.New("stop")
	for after := uint64(0); after <= n+1; after++ {
		// The first record Read returns must be the one after `after`;
		// a few reads run to the end.
		full := after == 0 || after == n/2 || after == n-1
		first, count := uint64(0), uint64(0)
		err := Read(path, after, func(r Record, line []byte) error {
			if string(line) != all[r.Seq-1] {
				t.Fatalf("Read(after %d): line of seq %d differs", after, r.Seq)
			}
			if count == 0 {
				first = r.Seq
			} else if r.Seq != first+count {
				t.Fatalf("Read(after %d): seq %d after %d records from %d", after, r.Seq, count, first)
			}
			count++
			if !full {
				return stop
			}
			return nil
		})
		if err != nil && err != stop {
			t.Fatal(err)
		}
		switch {
		case after >= n && count != 0:
			t.Fatalf("Read(after %d) returned seq %d", after, first)
		case after < n && first != after+1:
			t.Fatalf("Read(after %d) started at seq %d", after, first)
		case full && count != n-after:
			t.Fatalf("Read(after %d) returned %d records, want %d", after, count, n-after)
		}
	}
	if err := Read(path, 0, func(Record, []byte) error { return stop }); err != stop {
		t.Fatalf("Read returned %v, want fn's error", err)
	}
	if err := appendFile(path, `{"seq":`); err != nil {
		t.Fatal(err)
	}
	if _, err := Tail(path, 1); err == nil || !strings.Contains(err.Error(), "torn") {
		t.Fatalf("Tail of a torn log = %v", err)
	}
	if err := Read(path, n-1, func(Record, []byte) error { return nil }); err == nil || !strings.Contains(err.Error(), "torn") {
		t.Fatalf("Read of a torn log = %v", err)
	}
}

func BenchmarkAppend(b *testing.B) {
	l, err := Open(filepath.Join(b.TempDir(), "audit.log"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	batch := make([]Entry, 100)
	for i := range batch {
		batch[i] = Entry{Action: "job.submitted", Actor: "alice", Role: "user", Target: "job/01JABCDEFGHJKMNPQRSTVWXYZ0", Fields: map[string]string{"queue": "gpu", "gpus": "8"}}
	}
	records := 0
	for b.Loop() {
		if err := l.Append(batch...); err != nil {
			b.Fatal(err)
		}
		records += len(batch)
	}
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
}
