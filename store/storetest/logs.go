package storetest

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// logTests check the attempts' output (store.LogReader) and the events
// a batch writes.
var logTests = []test{
	{"Logs", testLogs},
	{"LogsBinary", testLogsBinary},
	{"LogStreams", testLogStreams},
	{"Events", testEvents},
}

func testLogs(t *testing.T, s store.Store) {
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobRunning)
	att, other := newAttempt(ids.next(), job.ID, berth.AttemptRunning), newAttempt(ids.next(), job.ID, berth.AttemptRunning)
	write(t, s, &store.Batch{Jobs: []*berth.Job{job}, Attempts: []*berth.Attempt{att, other}})
	if got := getLogs(t, s, att.ID, 0, 100); len(got) != 0 {
		t.Errorf("Logs before any output = %q, want empty", got)
	}

	// Chunks "hello " | "world" | "!\n" | "x", in three writes.
	write(t, s, &store.Batch{Logs: []store.LogChunk{{AttemptID: att.ID, Offset: 0, Data: []byte("hello ")}}})
	write(t, s, &store.Batch{Logs: []store.LogChunk{
		{AttemptID: other.ID, Offset: 0, Data: []byte("OTHER ATTEMPT")},
		{AttemptID: att.ID, Offset: 6, Data: []byte("world")},
		{AttemptID: att.ID, Offset: 11, Data: []byte("!\n")},
	}})
	write(t, s, &store.Batch{Logs: []store.LogChunk{{AttemptID: att.ID, Offset: 13, Data: []byte("x")}}})
	full := "hello world!\nx"

	limits := []int{1 << 20, math.MaxInt32, math.MaxInt}
	for l := range len(full) + 2 {
		limits = append(limits, l)
	}
	for off := range int64(len(full) + 3) {
		for _, limit := range limits {
			start, end := min(int(off), len(full)), len(full)
			if limit < len(full) {
				end = min(int(off)+limit, len(full))
			}
			want := full[start:end]
			if got := getLogs(t, s, att.ID, off, limit); string(got) != want {
				t.Errorf("Logs(offset %d, limit %d) = %q, want %q", off, limit, got, want)
			}
		}
	}
	// A negative limit is no bytes (or an error), never a panic.
	if got, _ := s.Logs(t.Context(), att.ID, 3, -1); len(got) != 0 {
		t.Errorf("Logs(offset 3, limit -1) = %q, want no bytes", got)
	}
	if got := getLogs(t, s, other.ID, 0, 100); string(got) != "OTHER ATTEMPT" {
		t.Errorf("Logs(other) = %q, want %q", got, "OTHER ATTEMPT")
	}
	if got := getLogs(t, s, ids.next(), 0, 100); len(got) != 0 {
		t.Errorf("Logs(unknown attempt) = %q, want empty", got)
	}
	a := loadActive(t, s)
	if a.LogSizes[att.ID] != int64(len(full)) || a.LogSizes[other.ID] != int64(len("OTHER ATTEMPT")) {
		t.Errorf("LogSizes = %v, want %s: %d, %s: %d", a.LogSizes, att.ID, len(full), other.ID, len("OTHER ATTEMPT"))
	}
}

func testLogsBinary(t *testing.T, s store.Store) {
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobRunning)
	att := newAttempt(ids.next(), job.ID, berth.AttemptRunning)
	write(t, s, &store.Batch{Jobs: []*berth.Job{job}, Attempts: []*berth.Attempt{att}})

	// Every byte value, NULs and invalid UTF-8 included, in 64 KiB chunks.
	var full []byte
	for i := range 3 * 64 << 10 {
		full = append(full, byte(i*7+i>>8))
	}
	const chunk = 64 << 10
	for off := 0; off < len(full); off += chunk {
		write(t, s, &store.Batch{Logs: []store.LogChunk{{AttemptID: att.ID, Offset: int64(off), Data: full[off : off+chunk]}}})
	}
	for _, r := range []struct{ off, limit int }{
		{0, len(full)}, {0, len(full) + 1}, {1, chunk}, {chunk - 3, 7}, {chunk - 1, chunk + 2}, {2*chunk + 5, 1 << 30}, {len(full) - 1, 10},
	} {
		want := full[r.off:min(r.off+r.limit, len(full))]
		if got := getLogs(t, s, att.ID, int64(r.off), r.limit); !bytes.Equal(got, want) {
			t.Errorf("Logs(offset %d, limit %d): got %d bytes, want %d (equal prefix %d)", r.off, r.limit, len(got), len(want), commonPrefix(got, want))
		}
	}
}

// testLogStreams checks that each chunk keeps the stream it was written
// to, that LogChunks cuts the first and last chunk to the range asked for,
// and that Logs reads the streams as one output, in offset order.
func testLogStreams(t *testing.T, s store.Store) {
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobRunning)
	att := newAttempt(ids.next(), job.ID, berth.AttemptRunning)
	write(t, s, &store.Batch{Jobs: []*berth.Job{job}, Attempts: []*berth.Attempt{att}})
	write(t, s, &store.Batch{Logs: []store.LogChunk{
		{AttemptID: att.ID, Offset: 0, Data: []byte("out 1\n")},
		{AttemptID: att.ID, Offset: 6, Data: []byte("err 1\n"), Stream: berth.StreamStderr},
	}})
	write(t, s, &store.Batch{Logs: []store.LogChunk{{AttemptID: att.ID, Offset: 12, Data: []byte("out 2\n")}}})
	if got := getLogs(t, s, att.ID, 0, 100); string(got) != "out 1\nerr 1\nout 2\n" {
		t.Errorf("Logs = %q, want both streams in offset order", got)
	}
	for _, c := range []struct {
		off   int64
		limit int
		want  []store.LogChunk
	}{
		{0, 100, []store.LogChunk{
			{AttemptID: att.ID, Offset: 0, Data: []byte("out 1\n")},
			{AttemptID: att.ID, Offset: 6, Data: []byte("err 1\n"), Stream: berth.StreamStderr},
			{AttemptID: att.ID, Offset: 12, Data: []byte("out 2\n")},
		}},
		{8, 6, []store.LogChunk{
			{AttemptID: att.ID, Offset: 8, Data: []byte("r 1\n"), Stream: berth.StreamStderr},
			{AttemptID: att.ID, Offset: 12, Data: []byte("ou")},
		}},
		{18, 10, nil},
		{0, 0, nil},
	} {
		got, err := s.LogChunks(t.Context(), att.ID, c.off, c.limit)
		if err != nil {
			t.Fatalf("LogChunks(%d, %d): %v", c.off, c.limit, err)
		}
		checkEqual(t, fmt.Sprintf("LogChunks(%d, %d)", c.off, c.limit), got, c.want)
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func testEvents(t *testing.T, s store.Store) {
	if a := loadActive(t, s); len(a.Events) != 0 {
		t.Errorf("Active.Events of an empty store = %s, want none", dump(a.Events))
	}
	full := fullEvent(1)
	// A field added to berth.Event must be added to fullEvent too, so that
	// this test covers it.
	for name, v := range fields(reflect.ValueOf(*full)) {
		if v.IsZero() {
			t.Errorf("fullEvent leaves %s zero: give it a value so that its round trip is checked", name)
		}
	}
	// Zero fields stay zero: a zero time, nil attempts.
	minimal := &berth.Event{Seq: 2, Type: "job.submitted"}
	// A time in another location is stored as the same instant and read
	// back in UTC.
	local := newEvents(3, 1)[0]
	want := []*berth.Event{full, minimal, local}
	inZone := *local
	inZone.Time = local.Time.In(time.FixedZone("UTC+5:30", 5*3600+1800))
	write(t, s, &store.Batch{Events: []*berth.Event{full, minimal, &inZone}})
	checkEqual(t, "Active.Events", loadActive(t, s).Events, want)

	// A later batch appends, here with other writes; events of one batch
	// come back in seq order, whatever their order in it.
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobPending)
	att := newAttempt(ids.next(), job.ID, berth.AttemptRunning)
	more := newEvents(4, 3)
	write(t, s, &store.Batch{
		Jobs:       []*berth.Job{job},
		JobUpdates: []store.JobUpdate{{ID: job.ID, State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(1)}},
		Attempts:   []*berth.Attempt{att},
		Logs:       []store.LogChunk{{AttemptID: att.ID, Data: []byte("started\n")}},
		Events:     []*berth.Event{more[2], more[0], more[1]},
	})
	write(t, s, &store.Batch{Events: newEvents(7, 1)})
	want = append(append(want, more...), newEvents(7, 1)...)
	a := loadActive(t, s)
	checkEqual(t, "Active.Events after more batches", a.Events, want)
	apply(job, store.JobUpdate{ID: job.ID, State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(1)})
	checkEqual(t, "Active.Jobs", a.Jobs, []*berth.Job{job})
	checkEqual(t, "Active.Attempts", a.Attempts, []*berth.Attempt{att})
	if a.LogSizes[att.ID] != 8 {
		t.Errorf("LogSizes[%s] = %d, want 8", att.ID, a.LogSizes[att.ID])
	}
}
