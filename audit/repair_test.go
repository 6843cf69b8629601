package audit

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// readRecords returns the records of the log at path.
func readRecords(t *testing.T, path string) []Record {
	t.Helper()
	var recs []Record
	if err := Read(path, 0, func(r Record, _ []byte) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestOpenCutsTornTailsAndRecordsIt(t *testing.T) {
	t.Parallel()
	logPath, cpPath := writeLog(t, 10, 4)
	if err := appendFile(logPath, `{"seq":11,"ti`); err != nil {
		t.Fatal(err)
	}
	if err := appendFile(cpPath, `{"seq":`); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(logPath, cpPath); err == nil || !strings.Contains(err.Error(), "torn") {
		t.Fatalf("Verify of the torn log = %v, want torn", err)
	}
	l, err := Open(logPath, Options{Now: clock()})
	if err != nil {
		t.Fatalf("Open of a log with a torn tail: %v", err)
	}
	if seq, _ := l.Head(); seq != 10 {
		t.Fatalf("Head seq = %d, want 10", seq)
	}
	if err := l.Append(Entry{Action: "server.started"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, logPath)
	if len(recs) != 13 {
		t.Fatalf("%d records, want 10 + 2 repairs + 1", len(recs))
	}
	for i, want := range []struct{ file, bytes string }{{"log", "13"}, {"checkpoints", "7"}} {
		r := recs[10+i]
		if r.Action != RepairedAction || r.Fields["file"] != want.file || r.Fields["bytes_dropped"] != want.bytes || !strings.Contains(r.Fields["reason"], "torn") {
			t.Fatalf("record %d = %+v, want %s of the %s file, %s bytes", r.Seq, r, RepairedAction, want.file, want.bytes)
		}
	}
	if recs[12].Action != "server.started" {
		t.Fatalf("last record = %+v", recs[12])
	}
	rep, err := Verify(logPath, cpPath)
	if err != nil || rep.Records != 13 || len(rep.Repairs) != 2 || rep.Repairs[0].Seq != 11 || rep.Repairs[0].Bytes != "13" {
		t.Fatalf("Verify after the repair = %+v, %v", rep, err)
	}
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory and returns
// it; it skips the test where mounting is not permitted.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("needs a small tmpfs to fill, and this machine cannot mount one (%v: %s)", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file in dir until the file system is full and returns it.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return p
		}
	}
}

func TestAppendOnAFullDiskKeepsTheFileWhole(t *testing.T) {
	dir := mountTmpfs(t, "256k")
	logPath := filepath.Join(dir, "audit.log")
	l, err := Open(logPath, Options{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 0; ; i++ {
		if err := l.Append(Entry{Action: "job.submitted", Target: "job/x"}); err != nil {
			t.Fatal(err)
		}
		if st, _ := os.Stat(logPath); st.Size()%4096 > 0 && st.Size()%4096 < 3000 {
			break // room left in the last page: the failing write will tear
		}
	}
	seq, hash := l.Head()
	filler := fill(t, dir)
	big := map[string]string{"pad": strings.Repeat("p", 2000)}
	batch := make([]Entry, 8)
	for i := range batch {
		batch[i] = Entry{Action: "job.submitted", Target: "job/y", Fields: big}
	}
	if err := l.Append(batch...); err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append on a full disk = %v, want ENOSPC", err)
	}
	if s, h := l.Head(); s != seq || h != hash {
		t.Fatalf("Head moved to %d after a failed append", s)
	}
	rep, err := Verify(logPath, "")
	if err != nil || rep.Records != seq {
		t.Fatalf("Verify after the failed append = %+v, %v; want the %d whole records", rep, err, seq)
	}
	if err := l.Append(batch...); err == nil {
		t.Fatal("Append on a still-full disk succeeded")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(batch...); err != nil {
		t.Fatalf("Append once space returned: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, logPath)
	if got := uint64(len(recs)); got < seq+9 {
		t.Fatalf("%d records, want %d + repairs + 8", got, seq)
	}
	r := recs[seq]
	if r.Action != RepairedAction || r.Fields["file"] != "log" || r.Fields["bytes_dropped"] == "0" || !strings.Contains(r.Fields["reason"], "no space left") {
		t.Fatalf("first record after the failures = %+v, want %s", r, RepairedAction)
	}
	rep, err = Verify(logPath, logPath+".head")
	if err != nil || len(rep.Repairs) == 0 || rep.Records != uint64(len(recs)) {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}

func TestVerifyAgainstTheStoresHead(t *testing.T) {
	t.Parallel()
	logPath, cpPath := writeLog(t, 10, 4)
	ls := lines(t, logPath)
	head := Anchor{Seq: 10, Hash: lineHash([]byte(ls[9]))}
	if rep, err := VerifyAgainst(logPath, cpPath, head, nil); err != nil || rep.Records != 10 {
		t.Fatalf("VerifyAgainst of the whole log = %+v, %v", rep, err)
	}
	if _, err := VerifyAgainst(logPath, cpPath, Anchor{Seq: 10, Hash: ZeroHash}, nil); err == nil || !strings.Contains(err.Error(), "does not match the store's audit head") {
		t.Fatalf("VerifyAgainst a different head = %v", err)
	}
	writeLines(t, logPath, ls[:9])
	if err := os.Remove(cpPath); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(logPath, cpPath); err != nil {
		t.Fatalf("Verify of the shortened log without checkpoints = %v: the chain alone cannot see it", err)
	}
	_, err := VerifyAgainst(logPath, cpPath, head, nil)
	if err == nil || !strings.Contains(err.Error(), "the log ends at seq 9 but the store's audit head is seq 10: the log was shortened (record 10 was deleted)") {
		t.Fatalf("VerifyAgainst of the shortened log = %v", err)
	}
}

func TestSignedCheckpoints(t *testing.T) {
	t.Parallel()
	key := []byte("a key of the server's")
	logPath := filepath.Join(t.TempDir(), "audit.log")
	cpPath := logPath + ".head"
	l, err := Open(logPath, Options{CheckpointEvery: 2, Now: clock(), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		if err := l.Append(Entry{Action: "job.submitted"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyAgainst(logPath, cpPath, Anchor{}, key)
	if err != nil || rep.Checkpoints != 3 || rep.Signed != 3 || rep.Unsigned != 0 {
		t.Fatalf("VerifyAgainst with the key = %+v, %v; want 3 signed checkpoints", rep, err)
	}
	if _, err := VerifyAgainst(logPath, cpPath, Anchor{}, []byte("another key")); err == nil || !strings.Contains(err.Error(), "signature does not match") {
		t.Fatalf("VerifyAgainst with another key = %v", err)
	}
	// A forged checkpoint: the right seq and hash, a signature made without
	// the key (one hex digit changed).
	cps := lines(t, cpPath)
	i := strings.Index(cps[2], `"sig":"`) + len(`"sig":"`)
	flipped := "1"
	if cps[2][i] == '1' {
		flipped = "2"
	}
	cps[2] = cps[2][:i] + flipped + cps[2][i+1:]
	writeLines(t, cpPath, cps)
	if _, err := VerifyAgainst(logPath, cpPath, Anchor{}, key); err == nil || !strings.Contains(err.Error(), "checkpoint line 3 (seq 6): its signature does not match") {
		t.Fatalf("VerifyAgainst of a forged checkpoint = %v", err)
	}
}
