package wire

import (
	"reflect"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// TestFastDecodersTakeWhatAppendFrameWrites holds the fast decoders to
// their purpose: each decodes, by itself, the messages of a job's path as
// AppendFrame writes them, every field set, and gives the message back.
// (That they agree with encoding/json on any input is FuzzDecodeFrame's.)
func TestFastDecodersTakeWhatAppendFrameWrites(t *testing.T) {
	zero, exit, index := 0, -137, 41
	for _, tt := range []struct {
		typ string
		msg any
	}{
		{TypeJobAccepted, &JobAccepted{AttemptID: "01JQ8Z5C2V3K4M5N6P7Q8R9S0T"}},
		{TypeJobResult, &JobResult{AttemptID: "a1", State: berth.AttemptFailed, ExitCode: &exit, Reason: "exit code 9", Cause: "stall",
			LogSize: 1<<63 - 1, Class: "oom"}},
		{TypeJobResult, &JobResult{AttemptID: "a1", State: berth.AttemptSucceeded, ExitCode: &zero}},
		{TypeAck, &Ack{Of: AckResult, AttemptID: "a1", Offset: 4096, Keep: []string{"a1", "a2"}, Kill: []string{"a3"},
			Lease: 30 * time.Second, Heartbeat: 5 * time.Second, Resend: true, Error: "refused: wrong host"}},
		{TypeAck, &Ack{Of: AckResult, AttemptID: "a1"}},
		{TypeJobAssign, &JobAssign{AttemptID: "a1", JobID: "j1", TaskIndex: 3, ArrayIndex: &index, JobName: "train-7b", User: "alice",
			Attempt: 2, Queue: "gpu",
			Command: []string{"sh", "-c", "echo $BERTH_ARRAY_INDEX > out"}, Env: map[string]string{"A": "1", "B": ""},
			Workdir: "/srv/run", GPUs: []int{0, 2}, Memory: 64 << 20, MaxRuntime: 90 * time.Minute, StallTimeout: -time.Minute, Grace: 10 * time.Second,
			Model: "org/llama", Secrets: map[string]string{"HF": "hf_x"}}},
		{TypeJobAssign, &JobAssign{AttemptID: "a1", JobID: "j1", ArrayIndex: &zero, Queue: "default", Command: []string{"true"}}},
	} {
		frame, err := Encode(tt.typ, tt.msg)
		if err != nil {
			t.Fatal(err)
		}
		k, payload, ok := splitEnvelope(frame)
		if !ok || k.name != tt.typ {
			t.Fatalf("splitEnvelope(%s) = %s, %v", frame, k.name, ok)
		}
		if k.fast == nil {
			t.Fatalf("%s has no fast decoder", tt.typ)
		}
		got, ok := k.fast(payload)
		if !ok || !reflect.DeepEqual(got, tt.msg) {
			t.Errorf("fast decoder of %s = %#v, %v; want %#v", frame, got, ok, tt.msg)
		}
	}
}

// TestFastDecodersGiveUp lists payloads the fast decoders leave to
// encoding/json, and checks that Decode still gives encoding/json's answer.
func TestFastDecodersGiveUp(t *testing.T) {
	for _, tt := range []struct{ typ, payload string }{
		{TypeJobAccepted, `{"attempt_id":"a\u00e9"}`},              // an escape beyond ASCII
		{TypeJobAccepted, `{"attempt_id":"é"}`},                    // not ASCII
		{TypeJobAccepted, `{"attempt\u005fid":"a1"}`},              // an escape in a key
		{TypeJobAccepted, `{"Attempt_ID":"a1"}`},                   // another case of a key
		{TypeJobAccepted, `{"attempt_id":"a1","x":1}`},             // an unknown key
		{TypeJobAccepted, `{"attempt_id":"a1","attempt_id":"a2"}`}, // a repeated key
		{TypeJobAccepted, `{ "attempt_id":"a1"}`},                  // a space
		{TypeJobAccepted, `{"attempt_id":null}`},                   // null
		{TypeJobResult, `{"attempt_id":"a1","exit_code":1.0}`},
		{TypeJobResult, `{"attempt_id":"a1","exit_code":1e2}`},
		{TypeJobResult, `{"attempt_id":"a1","exit_code":01}`},
		{TypeJobResult, `{"attempt_id":"a1","log_size":9223372036854775808}`},
		{TypeJobResult, `{"attempt_id":"a1","exit_code":null}`},
		{TypeAck, `{"of":"heartbeat","control":{"parked":true}}`}, // a nested object
		{TypeAck, `{"of":"result","resend":"yes"}`},
		{TypeJobAssign, `{"attempt_id":"a1","env":{"A":"1","A":"2"}}`},
		{TypeJobAssign, `{"attempt_id":"a1","service":{"needs_port":true}}`},
		{TypeJobAssign, `{"attempt_id":"a1","cpus":0.5}`},
		{TypeJobAssign, `{"attempt_id":"a1","gpus":[0,-1.5]}`},
	} {
		if _, ok := fastDecoders[tt.typ]([]byte(tt.payload)); ok {
			t.Errorf("fast decoder of %s took %s", tt.typ, tt.payload)
		}
		line := []byte(envelopeHead + tt.typ + envelopeMid + tt.payload + "}")
		typ, body, err := Decode(line)
		wantTyp, wantBody, wantErr := decodeEnvelope(line)
		if (err == nil) != (wantErr == nil) || typ != wantTyp || !reflect.DeepEqual(body, wantBody) {
			t.Errorf("Decode(%s) = %s, %#v, %v; encoding/json gives %s, %#v, %v", line, typ, body, err, wantTyp, wantBody, wantErr)
		}
	}
}
