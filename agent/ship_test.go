package agent

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

func TestAgentSendsProgressFromOutput(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, _ := startAgent(t, fs, nil)
	// Past the first 64 KiB read, so that the lines cross a read's end;
	// one write with two values, of which only the latest is sent. Then
	// another once the test has seen that.
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sh", "-c",
		`mkfifo next; yes filler | head -c 65530; printf '\nBERTH_PROGRESS 0.25\nBERTH_PROGRESS 0.5\n'; read x <next; echo "BERTH_PROGRESS done"; sleep 1000`}})
	isProgress := func(v string) func(wire.Message) bool {
		return func(m wire.Message) bool {
			p, ok := m.Body.(*wire.Progress)
			return ok && p.AttemptID == "a1" && (v == "" || p.Progress == v)
		}
	}
	fs.await("progress 0.5", isProgress("0.5"))
	release(t, fs, "a1", filepath.Join(a.work.attDir, "a1", "next"))
	fs.await("progress done", isProgress("done"))
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a1", Reason: "cancelled by alice"})
	checkResult(t, fs.result("a1"), berth.AttemptCancelled, "", nil, "cancelled by alice")
	var values []string
	for _, m := range fs.sent(isProgress("")) {
		values = append(values, m.Body.(*wire.Progress).Progress)
	}
	if !slices.Equal(values, []string{"0.5", "done"}) {
		t.Fatalf("progress sent: %q, want [0.5 done]", values)
	}
}

func TestAgentSendsLastProgressBeforeResult(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, func(c *Config) { c.ShipEvery = time.Hour }) // nothing is shipped while it runs
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sh", "-c", `echo "BERTH_PROGRESS 1"`}})
	checkResult(t, fs.result("a1"), berth.AttemptSucceeded, "", intp(0), "")
	var order []string
	for _, m := range fs.sent(func(m wire.Message) bool { return m.Type == wire.TypeProgress || m.Type == wire.TypeJobResult }) {
		order = append(order, m.Type)
		if p, ok := m.Body.(*wire.Progress); ok && p.Progress != "1" {
			t.Fatalf("progress = %q, want 1", p.Progress)
		}
	}
	if !slices.Equal(order, []string{wire.TypeProgress, wire.TypeJobResult}) {
		t.Fatalf("the agent sent %q, want the progress, then the result", order)
	}
}

func TestAgentSecrets(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, _ := startAgent(t, fs, nil)
	const value = "s3cr3t-value-42"
	secrets := map[string]string{"KEY": value}
	// The value written in two pieces, the first shipped before the second
	// is written: neither may be shipped in the clear.
	fs.assign(&wire.JobAssign{AttemptID: "s1", Secrets: secrets, Env: map[string]string{"K": "{{SECRET:KEY}}"},
		Command: []string{"sh", "-c", `mkfifo next; echo hello, the key follows; printf 'key=%s' "${K%????}"; read x <next; printf '%s\n' "${K#"${K%????}"}"; ` +
			`echo "BERTH_PROGRESS 0.5 $K"; echo arg={{SECRET:KEY}}; exit 3`}})
	fs.output("s1", "hello")                         // shipped while the start of the value is held back
	ownLog := filepath.Join(a.work.attDir, "s1.log") // not a kept file other attempts append to
	if _, err := os.Stat(ownLog); err != nil {
		t.Fatalf("an attempt with secrets writes %s: %v", ownLog, err)
	}
	release(t, fs, "s1", filepath.Join(a.work.attDir, "s1", "next"))
	checkResult(t, fs.result("s1"), berth.AttemptFailed, "", intp(3), "exit code 3")
	fs.send(wire.TypeAck, &wire.Ack{Of: wire.AckResult, AttemptID: "s1"})
	// A command whose program is the secret: the start error names it.
	fs.assign(&wire.JobAssign{AttemptID: "s2", Secrets: secrets, Command: []string{"{{SECRET:KEY}}"}})
	if _, err := os.Stat(ownLog); !os.IsNotExist(err) { // the ack came before s2's assignment
		t.Errorf("%s, with a secret's value, is still on disk once shipped (err %v)", ownLog, err)
	}
	res := fs.result("s2")
	// A reference the server sent no value for fails the attempt, naming it.
	fs.assign(&wire.JobAssign{AttemptID: "s3", Command: []string{"echo", "{{SECRET:GONE}}"}})
	gone := fs.result("s3")
	if gone.State != berth.AttemptFailed || !strings.Contains(gone.Reason, "GONE") {
		t.Errorf("a reference without a value: %s %q, want failed naming GONE", gone.State, gone.Reason)
	}

	var shipped strings.Builder
	for _, m := range fs.sent(func(m wire.Message) bool { _, ok := m.Body.(*wire.Log); return ok }) {
		shipped.Write(m.Body.(*wire.Log).Data)
	}
	for _, m := range fs.sent(func(m wire.Message) bool { _, ok := m.Body.(*wire.Progress); return ok }) {
		shipped.WriteString(m.Body.(*wire.Progress).Progress + "\n")
	}
	shipped.WriteString(res.Reason)
	out := shipped.String()
	if strings.Contains(out, value) || strings.Contains(out, value[:len(value)-4]) {
		t.Fatalf("the secret's value was shipped:\n%s", out)
	}
	masked := strings.Repeat("*", len(value))
	for _, want := range []string{"key=" + masked + "\n", "arg=" + masked + "\n", "0.5 ***", `"***"`} {
		if !strings.Contains(out, want) {
			t.Errorf("shipped output lacks %q (the substituted value, masked):\n%s", want, out)
		}
	}
}

func TestAgentAttemptsShareALogFileApart(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, _ := startAgent(t, fs, func(c *Config) { c.Slots = 1 })
	for _, id := range []string{"first", "second"} {
		fs.assign(&wire.JobAssign{AttemptID: id, Command: []string{"echo", id}})
		checkResult(t, fs.result(id), berth.AttemptSucceeded, "", intp(0), "")
		fs.send(wire.TypeAck, &wire.Ack{Of: wire.AckResult, AttemptID: id}) // done with the file: the next attempt takes it
	}
	for _, id := range []string{"first", "second"} {
		var shipped strings.Builder
		for _, m := range fs.sent(func(m wire.Message) bool { l, ok := m.Body.(*wire.Log); return ok && l.AttemptID == id }) {
			l := m.Body.(*wire.Log)
			if l.Offset != int64(shipped.Len()) {
				t.Fatalf("%s: a chunk at offset %d after %d bytes", id, l.Offset, shipped.Len())
			}
			shipped.Write(l.Data)
		}
		if got := shipped.String(); got != id+"\n" {
			t.Errorf("%s shipped %q, want only its own output", id, got)
		}
	}
	dir := filepath.Join(a.cfg.DataDir, "logs")
	if names := spares(t, dir); len(names) != 1 || readFile(t, filepath.Join(dir, names[0])) != "first\nsecond\n" {
		t.Errorf("%s holds %v; want one file the second attempt appended to", dir, names)
	}
}

// TestAgentShipsStdoutAndStderrApart checks that each chunk the agent
// ships holds one stream's output, tagged with it, and that the chunks
// together are the job's output in the order it wrote it; a process that
// leaves the group holding stdout open does not keep the attempt from
// ending.
func TestAgentShipsStdoutAndStderrApart(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	// Each write waits until the one before is shipped, so that the
	// order the agent reads them in is the order written. w reads the
	// FIFO until it gets a line: a read that opens it while the test's
	// last write is still open gets only that writer's end (EOF). The leader ends
	// once the escapee, in a session of its own, has written its pid.
	work := t.TempDir()
	fs.assign(&wire.JobAssign{AttemptID: "a1", Workdir: work, Command: []string{"sh", "-c",
		`mkfifo next; w() { until read x <next; do :; done; }; echo out 1; w; echo err 1 >&2; w; printf 'out 2\nout 3\n'; w; echo err 2 >&2; ` +
			`setsid sh -c 'echo $$ >escapee.tmp && mv escapee.tmp escapee; exec sleep 60' & ` +
			`while [ ! -e escapee ]; do sleep 0.01; done`}})
	for _, line := range []string{"out 1", "err 1", "out 3"} {
		fs.output("a1", line)
		release(t, fs, "a1", filepath.Join(work, "next"))
	}
	checkResult(t, fs.result("a1"), berth.AttemptSucceeded, "", intp(0), "")
	// The escapee, which holds the job's stdout open, outlived the result.
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(work, "escapee"))))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Errorf("the process that left the group was gone before the result (%v): the result waited for it", err)
	}
	var all, stdout, stderr []byte
	for _, m := range fs.sent(func(m wire.Message) bool { return m.Type == wire.TypeLog }) {
		l := m.Body.(*wire.Log)
		if l.Offset != int64(len(all)) {
			t.Fatalf("chunk at offset %d, want %d: the chunks are not contiguous", l.Offset, len(all))
		}
		all = append(all, l.Data...)
		switch l.Stream {
		case "":
			stdout = append(stdout, l.Data...)
		case berth.StreamStderr:
			stderr = append(stderr, l.Data...)
		default:
			t.Fatalf("chunk with stream %q", l.Stream)
		}
	}
	if want := "out 1\nerr 1\nout 2\nout 3\nerr 2\n"; string(all) != want {
		t.Errorf("output = %q, want %q, in the order written", all, want)
	}
	if string(stdout) != "out 1\nout 2\nout 3\n" || string(stderr) != "err 1\nerr 2\n" {
		t.Errorf("stdout chunks = %q, stderr chunks = %q: want each stream's lines alone", stdout, stderr)
	}
}

func TestStreamsSayWhichStreamWroteEachByte(t *testing.T) {
	t.Parallel()
	var s Streams
	if stderr, limit, _ := s.StreamAt(0); stderr || limit != math.MaxInt64 {
		t.Fatalf("unstarted Streams: StreamAt(0) = %t, %d; want stdout without limit", stderr, limit)
	}
	s.started, s.end = true, 10 // 10 bytes of earlier attempts
	s.runs = []streamRun{{10, false}, {14, true}, {20, false}}
	s.end = 25
	for _, c := range []struct {
		off     int64
		stderr  bool
		limit   int64
		changes bool
	}{{10, false, 14, true}, {13, false, 14, true}, {14, true, 20, true}, {19, true, 20, true}, {20, false, 25, false}, {24, false, 25, false}} {
		stderr, limit, changes := s.StreamAt(c.off)
		if stderr != c.stderr || limit != c.limit || changes != c.changes {
			t.Errorf("StreamAt(%d) = %t, %d, %t; want %t, %d, %t", c.off, stderr, limit, changes, c.stderr, c.limit, c.changes)
		}
	}
	s.forget(16)
	if stderr, limit, _ := s.StreamAt(16); !stderr || limit != 20 || len(s.runs) != 2 {
		t.Errorf("after forget(16): StreamAt(16) = %t, %d with runs %v; want the run holding 16 kept", stderr, limit, s.runs)
	}
}

// release writes a line to the job's FIFO at path, which the job reads to
// go on; it fails the test, rather than hanging it, when the job has not
// opened the FIFO within 30 seconds (it ended, or was killed, first),
// with what the agent reported of attempt id.
func release(t *testing.T, fs *fakeServer, id, path string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(path, []byte("go\n"), 0) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		if r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			<-done // our reader lets the write through
			r.Close()
		}
		var said []string
		for _, m := range fs.sent(func(m wire.Message) bool { r, ok := m.Body.(*wire.JobResult); return ok && r.AttemptID == id }) {
			r := m.Body.(*wire.JobResult)
			said = append(said, fmt.Sprintf("%s cause %q: %s", r.State, r.Cause, r.Reason))
		}
		t.Fatalf("the job did not read %s within 30 s: it ended or was killed first (its results: %v)", path, said)
	}
}
