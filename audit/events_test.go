package audit

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// TestRecordEventsIsAppendOfFromEvent holds RecordEvents, which reuses one
// entry for every event, to what appending each event's FromEvent writes:
// no field of one event may carry over into the next record.
func TestRecordEventsIsAppendOfFromEvent(t *testing.T) {
	events := append(lifecycleEvents(20),
		berth.Event{Time: time.Unix(1, 0), Type: "quota.set", Quota: "user:alice", Limits: "gpus<=8", Actor: "root"},
		berth.Event{Time: time.Unix(2, 0), Type: "job.held", JobID: "01KAZ5C2V3K4M5N6P7Q8R9HELD", Requested: 2, Limit: 8},
		berth.Event{Time: time.Unix(3, 0), Type: "worker.lost", Host: "gpu-2"},
		everyField(), berth.Event{Type: "limit", Limit: -1, Seq: math.MaxUint64, Peer: "p\x00"},
		berth.Event{Type: "pool.scaled", Pool: "pool-1", Count: -3, Instance: "i-1", Attempts: []string{"", "\xff"}, ExitCode: new(-9)},
		berth.Event{Type: "seq", Seq: math.MaxInt64, Requested: 1, Peer: "peer-1", Pool: "p"})
	logs := make([]string, 2)
	for i := range logs {
		logs[i] = filepath.Join(t.TempDir(), "audit.log")
		l, err := Open(logs[i], Options{Now: clock()})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			err = l.RecordEvents(pointers(events))
		} else {
			entries := make([]Entry, len(events))
			for j := range events {
				entries[j] = FromEvent(&events[j])
			}
			err = l.Append(entries...)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(logs[1])
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(want, []byte("\n")); n != len(events) {
		t.Fatalf("%d records appended, want %d", n, len(events))
	}
	if !bytes.Equal(got, want) {
		t.Errorf("RecordEvents wrote\n%s\nwant\n%s", got, want)
	}
}

// everyField returns an event with every field set, strings JSON must
// escape: a field added to the audit's records and left out of
// RecordEvents or FromEvent shows.
func everyField() berth.Event {
	e := berth.Event{Time: time.Unix(4, 5), ExitCode: new(137), Attempts: []string{"a<1>", "a&2\u2028"}}
	v := reflect.ValueOf(&e).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.String:
			f.SetString(v.Type().Field(i).Name + " \"<é>\n\xff")
		case reflect.Int, reflect.Uint64:
			if f.CanInt() {
				f.SetInt(int64(i + 100))
			} else {
				f.SetUint(uint64(i + 1000))
			}
		}
	}
	return e
}

// TestFromEventNamesTheExitCode: an ended job's record carries the exit
// code, 0 included; an event without one has no such field.
func TestFromEventNamesTheExitCode(t *testing.T) {
	for _, tc := range []struct {
		code *int
		want string
	}{{new(0), "0"}, {new(137), "137"}, {nil, ""}} {
		en := FromEvent(&berth.Event{Type: "job.failed", JobID: "J1", ExitCode: tc.code})
		if got, ok := en.Fields["exit_code"]; got != tc.want || ok != (tc.code != nil) {
			t.Errorf("exit code %v: fields %v, want exit_code %q", tc.code, en.Fields, tc.want)
		}
	}
}

// BenchmarkRecordEvents appends what the controller's group commit hands
// the log for 250 trivial jobs: each job submitted, assigned, running and
// succeeded, 1,000 events in one call.
//
//	go test ./audit -run '^$' -bench RecordEvents
func BenchmarkRecordEvents(b *testing.B) {
	l, err := Open(filepath.Join(b.TempDir(), "audit.log"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	events := pointers(lifecycleEvents(250))
	for b.Loop() {
		if err := l.RecordEvents(events); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/record")
}

// lifecycleEvents returns the events of jobs trivial jobs from submit to
// success, as the controller emits them.
// pointers returns a pointer to each of events, as the controller hands
// them to RecordEvents.
func pointers(events []berth.Event) []*berth.Event {
	ps := make([]*berth.Event, len(events))
	for i := range events {
		ps[i] = &events[i]
	}
	return ps
}

func lifecycleEvents(jobs int) []berth.Event {
	at := time.Date(2026, 11, 23, 10, 0, 0, 123456789, time.UTC)
	var events []berth.Event
	for i := range jobs {
		job := fmt.Sprintf("01KAZ5C2V3K4M5N6P7Q8R9%05d", i)
		worker, host := "01KAZ5C2V3K4M5N6P7Q8R9W000", "gpu-1"
		events = append(events,
			berth.Event{Seq: uint64(4*i + 1), Time: at, Type: "job.submitted", JobID: job, State: berth.JobPending, User: "alice", Queue: "default"},
			berth.Event{Time: at, Type: "job.assigned", JobID: job, WorkerID: worker, Host: host, Attempts: []string{job + "a"}},
			berth.Event{Seq: uint64(4*i + 3), Time: at, Type: "job.running", JobID: job, State: berth.JobRunning, WorkerID: worker, Host: host},
			berth.Event{Seq: uint64(4*i + 4), Time: at, Type: "job.succeeded", JobID: job, State: berth.JobSucceeded, WorkerID: worker, Host: host, Reason: "exit 0", ExitCode: new(0)})
	}
	return events
}
