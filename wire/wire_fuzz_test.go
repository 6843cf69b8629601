package wire

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// FuzzDecodeFrame feeds arbitrary frames to DecodeFrame. Properties:
//
//   - nothing panics;
//   - Decode of each line agrees with the full parse of its envelope
//     (decodeEnvelope), whatever its spelling;
//   - an error returns no message, and success returns one message per
//     non-blank line, each a non-nil pointer that Decode of that line
//     agrees with;
//   - re-encoding a decoded message and decoding it again gives the same
//     type and an equal payload, where a nil and an empty slice or map are
//     equal, and the second encoding is byte-for-byte the first.
//
// Exact reflect.DeepEqual does not hold after one round trip, so it is
// not asserted: `"queues":[]` decodes to an empty slice, which the
// omitempty tag drops on encoding, so it comes back nil (likewise maps and
// "data":""). What does hold is that the encoding is canonical: once
// decoded, a message encodes to the same bytes however it was written.
func FuzzDecodeFrame(f *testing.F) {
	arrayIndex := 0
	exitCode := 137
	control := &Control{Off: []QueueOff{{Queue: "*", Policy: "drain", RequestedBy: "ops"}}, On: []string{"gpu"}, Parked: true}
	msgs := []struct {
		typ string
		msg any
	}{
		{TypeRegister, &Register{Version: Version, WorkerID: "w-1", Host: "gpu-box-1", Queues: []string{"gpu"},
			GPUs: []berth.GPU{{Index: 0, UUID: "GPU-aaaa", Model: "NVIDIA H100", Memory: 80 << 30}},
			CPUs: 31.5, Memory: 256 << 30, Slots: 8, Labels: map[string]string{"zone": "a"},
			Running: []string{"att-1"}, Finished: []string{"att-0"}, Agent: "v1", Models: []string{"llama"}}},
		{TypeHeartbeat, &Heartbeat{Running: []string{"att-1"}, FaultyGPUs: []int{1}, Models: []string{"llama"}}},
		{TypeReadyForWork, &ReadyForWork{}},
		{TypeJobAccepted, &JobAccepted{AttemptID: "att-1"}},
		{TypeJobResult, &JobResult{AttemptID: "att-1", State: berth.AttemptFailed, ExitCode: &exitCode, Reason: "killed", Cause: "stall", LogSize: 1 << 40}},
		{TypeLog, &Log{AttemptID: "att-1", Offset: 4096, Data: []byte("hello\x00\xff\n")}},
		{TypeProgress, &Progress{AttemptID: "att-1", Progress: "0.42"}},
		{TypeJobAssign, &JobAssign{AttemptID: "att-1", JobID: "job-1", TaskIndex: 3, ArrayIndex: &arrayIndex, Queue: "gpu",
			Command: []string{"python", "train.py"}, Env: map[string]string{"A": "1"}, Workdir: "/srv", GPUs: []int{0, 2},
			MaxRuntime: 90 * time.Minute, StallTimeout: time.Minute, Grace: 10 * time.Second, Model: "llama"}},
		{TypeJobCancel, &JobCancel{AttemptID: "att-1", Reason: "cancelled", Cause: "operator"}},
		{TypeNoWork, &NoWork{}},
		{TypeAck, &Ack{Of: AckHeartbeat, AttemptID: "att-1", Offset: 12345, Keep: []string{"att-1"}, Kill: []string{"att-9"},
			Lease: 30 * time.Second, Heartbeat: 5 * time.Second, Resend: true, Control: control, Error: "refused"}},
		{TypeControl, control},
		{TypePrewarmHint, &PrewarmHint{Model: "org/llama"}},
		{TypeStreamOpen, &StreamOpen{ID: "s1", AttemptID: "att-1", Kind: StreamExec, Command: []string{"env"}}},
	}
	var multi []byte
	for _, m := range msgs {
		frame, err := Encode(m.typ, m.msg)
		if err != nil {
			f.Fatalf("Encode(%s): %v", m.typ, err)
		}
		f.Add(frame)
		if multi, err = AppendFrame(multi, m.typ, m.msg); err != nil {
			f.Fatalf("AppendFrame(%s): %v", m.typ, err)
		}
	}
	f.Add(multi)
	for _, seed := range []string{
		``,
		"\n \n",
		`{"type":"heartbeat","payload":{"running":["a"`,
		`{"type":"reboot","payload":{}}`,
		`{"type":"register","payload":{"queues":[],"labels":{},"memory":"80GiB","gpus":[{"memory":"1.5KiB"}]}}`,
		`{"type":"log","payload":{"data":"","offset":-1}}` + "\n\n" + `{"type":"no_work"}`,
		`{"type":"ack","payload":null}` + "\n" + `{"type":"job_result","payload":{"state":"x","exit_code":null}}`,
		`{"type":"ack","payload":{},"of":"x"}`,
		`{"type":"ack","payload":{"of":"a"} }`,
		`{"type":"ack","payload":{"of":"a"}}}`,
		`{"type":"ack\u0020","payload":{}}`,
		`{"type":"ack","payload":{"of":"a"},"payload":{"of":"b"}}`,
		`{"type":"job_accepted","payload":{"attempt_id":"a\"\\\/\b\f\n\r\t\u0041\u00e9\u003c"}}`,
		`{"type":"job_result","payload":{"exit_code":-0,"log_size":-9223372036854775808,"state":""}}`,
		`{"type":"job_assign","payload":{"env":{},"command":[],"gpus":[],"array_index":0,"secrets":{"a":"b","c":"d"}}}`,
		`{"type":"ack","payload":{"keep":[""],"resend":false,"lease":-1}}`,
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, frame []byte) {
		for _, line := range bytes.Split(frame, []byte("\n")) {
			typ, body, err := Decode(line)
			wantTyp, wantBody, wantErr := decodeEnvelope(line)
			if (err == nil) != (wantErr == nil) || typ != wantTyp || !reflect.DeepEqual(body, wantBody) {
				t.Fatalf("Decode(%q) = %s, %#v, %v; the full parse gives %s, %#v, %v", line, typ, body, err, wantTyp, wantBody, wantErr)
			}
		}
		got, err := DecodeFrame(frame)
		if err != nil {
			if got != nil {
				t.Fatalf("DecodeFrame returned %d messages with error %v", len(got), err)
			}
			return
		}
		var lines [][]byte
		for _, line := range bytes.Split(frame, []byte("\n")) {
			if len(bytes.TrimSpace(line)) > 0 {
				lines = append(lines, line)
			}
		}
		if len(got) == 0 || len(got) != len(lines) {
			t.Fatalf("DecodeFrame returned %d messages for %d non-blank lines", len(got), len(lines))
		}
		var again []byte
		for i, m := range got {
			if v := reflect.ValueOf(m.Body); v.Kind() != reflect.Pointer || v.IsNil() {
				t.Fatalf("message %d (%s): body %#v is not a non-nil pointer", i, m.Type, m.Body)
			}
			typ, body, err := Decode(lines[i])
			if err != nil || typ != m.Type || !reflect.DeepEqual(body, m.Body) {
				t.Fatalf("Decode(line %d) = %s, %#v, %v; DecodeFrame gave %s, %#v", i, typ, body, err, m.Type, m.Body)
			}

			enc, err := Encode(m.Type, m.Body)
			if err != nil {
				t.Fatalf("re-encode %s %#v: %v", m.Type, m.Body, err)
			}
			typ2, body2, err := Decode(enc)
			if err != nil {
				t.Fatalf("decode re-encoded %s: %v", enc, err)
			}
			if typ2 != m.Type {
				t.Fatalf("type %q came back as %q", m.Type, typ2)
			}
			enc2, err := Encode(typ2, body2)
			if err != nil {
				t.Fatalf("encode %s again: %v", typ2, err)
			}
			if !bytes.Equal(enc, enc2) {
				t.Fatalf("encoding is not stable:\n first  %s\n second %s", enc, enc2)
			}
			if a, b := emptyToNil(m.Body), emptyToNil(body2); !reflect.DeepEqual(a, b) {
				t.Fatalf("round trip changed the %s payload:\n got  %#v\n want %#v\n frame %s", m.Type, b, a, enc)
			}
			if again, err = AppendFrame(again, m.Type, m.Body); err != nil {
				t.Fatalf("AppendFrame(%s): %v", m.Type, err)
			}
		}
		// All of them in one frame, as the outbox batches them.
		back, err := DecodeFrame(again)
		if err != nil || len(back) != len(got) {
			t.Fatalf("DecodeFrame of the re-encoded frame: %d messages, %v; want %d", len(back), err, len(got))
		}
		for i := range back {
			if back[i].Type != got[i].Type {
				t.Fatalf("re-encoded frame: message %d is %q, want %q", i, back[i].Type, got[i].Type)
			}
		}
	})
}

// emptyToNil returns a deep copy of v, a pointer to a message, with every
// empty slice and map made nil: the two encode alike under omitempty.
func emptyToNil(v any) any {
	src := reflect.ValueOf(v)
	dst := reflect.New(src.Type()).Elem()
	copyNormal(dst, src)
	return dst.Interface()
}

func copyNormal(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Pointer:
		if !src.IsNil() {
			dst.Set(reflect.New(src.Type().Elem()))
			copyNormal(dst.Elem(), src.Elem())
		}
	case reflect.Struct:
		for i := range src.NumField() {
			copyNormal(dst.Field(i), src.Field(i))
		}
	case reflect.Slice:
		if src.Len() > 0 {
			dst.Set(reflect.MakeSlice(src.Type(), src.Len(), src.Len()))
			for i := range src.Len() {
				copyNormal(dst.Index(i), src.Index(i))
			}
		}
	case reflect.Map:
		if src.Len() > 0 {
			dst.Set(reflect.MakeMapWithSize(src.Type(), src.Len()))
			iter := src.MapRange()
			for iter.Next() {
				dst.SetMapIndex(iter.Key(), iter.Value()) // keys and values are strings here
			}
		}
	default:
		dst.Set(src)
	}
}
