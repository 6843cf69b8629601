package wire

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// tricky holds what a JSON string writer can get wrong: quotes, escapes,
// HTML's characters, control bytes, U+2028, invalid UTF-8 and non-ASCII.
const tricky = "a\"b\\c<d>e&f\n\t\x00\x1f\u2028\u2029\xff\xfeé世"

// fill sets every field reachable from v to a value that is not its
// zero, so Marshal writes every field (a field added to a message and not
// to its encoder then shows).
func fill(v reflect.Value, seed int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(tricky + strconv.Itoa(seed))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(seed)*7919 - 3)
	case reflect.Float64:
		v.SetFloat(float64(seed) + 0.25)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), seed)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fill(s.Index(0), seed)
		fill(s.Index(1), seed+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for i := range 3 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, seed+10-i) // inserted out of order: Marshal sorts keys
			fill(e, seed+i)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), seed+i)
		}
	}
}

// TestFastEncodersAsMarshal holds the messages encoded without reflection
// to Marshal's bytes: every field set (with strings JSON must escape),
// none set, and the edge values of each kind.
func TestFastEncodersAsMarshal(t *testing.T) {
	assign, accepted, result, ack := &JobAssign{}, &JobAccepted{}, &JobResult{}, &Ack{}
	for _, m := range []any{assign, accepted, result, ack} {
		fill(reflect.ValueOf(m).Elem(), 1)
	}
	assign.Service, ack.Control = nil, nil // left to Marshal
	zero, neg := 0, -1
	msgs := []any{assign, accepted, result, ack, &JobAssign{}, &JobAccepted{}, &JobResult{}, &Ack{},
		&JobAssign{Command: []string{}, ArrayIndex: &zero, Env: map[string]string{}, GPUs: []int{}, Secrets: map[string]string{}},
		&JobResult{ExitCode: &neg, State: berth.AttemptSucceeded, LogSize: math.MinInt64},
		&Ack{Keep: []string{}, Kill: []string{""}, Offset: math.MaxInt64, Lease: -time.Second},
	}
	for _, cpus := range []float64{0.5, 1, 1e20, 1e21, 1e-6, 1e-7, 123456789.125, -2.5e-9, 1e100, math.SmallestNonzeroFloat64, math.MaxFloat64} {
		msgs = append(msgs, &JobAssign{CPUs: cpus})
	}
	for i, m := range msgs {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendFast([]byte("prefix"), m)
		if !ok {
			t.Fatalf("message %d (%T): not encoded fast", i, m)
		}
		if string(got) != "prefix"+string(want) {
			t.Errorf("message %d (%T):\nfast    %s\nMarshal %s", i, m, got[len("prefix"):], want)
		}
	}
}

// TestFastEncodersLeaveTheRestToMarshal: what the fast encoders do not
// write goes to Marshal, and AppendFrame's frame is Marshal's either way
// (an error where Marshal fails).
func TestFastEncodersLeaveTheRestToMarshal(t *testing.T) {
	for _, tt := range []struct {
		typ string
		msg any
	}{
		{TypeJobAssign, &JobAssign{AttemptID: "a1", Service: &Service{NeedsPort: true}}},
		{TypeJobAssign, &JobAssign{AttemptID: "a1", CPUs: math.Inf(1)}},
		{TypeJobAssign, &JobAssign{AttemptID: "a1", CPUs: math.NaN()}},
		{TypeJobAssign, (*JobAssign)(nil)},
		{TypeJobResult, (*JobResult)(nil)},
		{TypeAck, &Ack{Of: AckHeartbeat, Control: &Control{Parked: true}}},
		{TypeAck, (*Ack)(nil)},
		{TypeJobAccepted, JobAccepted{AttemptID: "a1"}},
	} {
		if _, ok := appendFast(nil, tt.msg); ok {
			t.Errorf("%#v encoded fast", tt.msg)
		}
		frame, err := AppendFrame([]byte("x"), tt.typ, tt.msg)
		p, wantErr := json.Marshal(tt.msg)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("AppendFrame(%#v): error %v, Marshal's %v", tt.msg, err, wantErr)
		}
		if err != nil {
			if string(frame) != "x" {
				t.Errorf("AppendFrame(%#v) failed and left %q", tt.msg, frame)
			}
			continue
		}
		if want := "x\n" + envelopeHead + tt.typ + envelopeMid + string(p) + "}"; string(frame) != want {
			t.Errorf("AppendFrame = %s, want %s", frame, want)
		}
	}
}
