package berth

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// filledEvent returns an event with every field set, by reflection, so
// that a field added to Event and not to AppendJSON shows; strings hold
// what JSON escapes.
func filledEvent(t *testing.T) *Event {
	t.Helper()
	e := &Event{}
	v := reflect.ValueOf(e).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		name := v.Type().Field(i).Name
		switch f.Kind() {
		case reflect.String:
			f.SetString(name + ` <a href="x">&amp;</a> \ ` + "\u2028\u2029\xff\x00\n\t\r\b\f\x1fé")
		case reflect.Int:
			f.SetInt(int64(-i - 1))
		case reflect.Uint64:
			f.SetUint(uint64(i) + 1<<40)
		case reflect.Pointer:
			n := -7 - i
			f.Set(reflect.ValueOf(&n))
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{name, "<&>\xff"}))
		case reflect.Struct:
			f.Set(reflect.ValueOf(time.Date(2026, 11, 26, 11, 20, 0, 123456789, time.FixedZone("x", 5*3600+1800))))
		default:
			t.Fatalf("Event.%s is a %s: teach filledEvent and AppendJSON to write it", name, f.Kind())
		}
	}
	return e
}

// TestEventAppendJSONAsMarshal checks AppendJSON against encoding/json,
// byte for byte, for events with every field set, none, and the values
// omitempty keeps or drops.
func TestEventAppendJSONAsMarshal(t *testing.T) {
	zero := 0
	events := []*Event{
		{},
		filledEvent(t),
		{Seq: 1, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Type: EventJobSucceeded, JobID: "j", State: JobSucceeded, ExitCode: &zero,
			Attempts: []string{}},
		{Type: EventJobRequeued, Attempts: []string{"a"}, Requested: 1, Limit: 2, Count: 3},
	}
	for i, e := range events {
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.AppendJSON([]byte("prefix"))
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if string(got) != "prefix"+string(want) {
			t.Errorf("event %d:\nAppendJSON %s\nMarshal          %s", i, got, want)
		}
	}
}

// TestEventAppendJSONRefusesWhatMarshalRefuses: a time outside the years
// JSON's RFC 3339 holds fails both.
func TestEventAppendJSONRefusesWhatMarshalRefuses(t *testing.T) {
	e := &Event{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := json.Marshal(e); err == nil {
		t.Fatal("Marshal of year 10000: no error")
	}
	if b, err := e.AppendJSON(nil); err == nil {
		t.Fatalf("AppendJSON of year 10000 = %s, no error", b)
	}
}

// BenchmarkEventAppendJSON encodes a job's end event.
func BenchmarkEventAppendJSON(b *testing.B) {
	zero := 0
	e := &Event{Seq: 123456, Time: time.Now().UTC(), Type: EventJobSucceeded, JobID: "01JBERTH" + strconv.Itoa(42), State: JobSucceeded,
		WorkerID: "w1", Host: "bench-0", ExitCode: &zero}
	var buf []byte
	for b.Loop() {
		buf, _ = e.AppendJSON(buf[:0])
	}
}
