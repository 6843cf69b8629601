package wire_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

func intPtr(n int) *int { return &n }

// TestRoundTrip encodes every message type with all fields populated and
// checks that Decode returns the same type and an equal value.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		typ string
		msg any
	}{
		{wire.TypeRegister, &wire.Register{
			Version:  wire.Version,
			WorkerID: "w-1",
			Host:     "gpu-box-1",
			Queues:   []string{"gpu", "cpu"},
			GPUs: []berth.GPU{
				{Index: 0, UUID: "GPU-aaaa", Model: "NVIDIA H100 80GB HBM3", Memory: 80 << 30},
				{Index: 1, UUID: "GPU-bbbb", Model: "NVIDIA H100 80GB HBM3", Memory: 80 << 30},
			},
			CPUs:     31.5,
			Memory:   256 << 30,
			Slots:    8,
			Labels:   map[string]string{"zone": "a", "rack": "7"},
			Running:  []string{"att-1", "att-2"},
			Finished: []string{"att-0"},
			Agent:    "v1.2.3",
			Models:   []string{"llama-3-8b", "org/mistral-7b"},
		}},
		{wire.TypeHeartbeat, &wire.Heartbeat{Running: []string{"att-1", "att-2"}, FaultyGPUs: []int{1}, Models: []string{"llama-3-8b"}}},
		{wire.TypeReadyForWork, &wire.ReadyForWork{}},
		{wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: "att-1"}},
		{wire.TypeJobResult, &wire.JobResult{
			AttemptID: "att-1",
			State:     berth.AttemptFailed,
			ExitCode:  intPtr(137),
			Reason:    "killed",
			LogSize:   1 << 40,
		}},
		{wire.TypeLog, &wire.Log{AttemptID: "att-1", Offset: 4096, Data: []byte("hello\x00\xff world\n")}},
		{wire.TypeLog, &wire.Log{AttemptID: "att-1", Offset: 4096, Data: []byte("oops\n"), Stream: berth.StreamStderr}},
		{wire.TypeJobAssign, &wire.JobAssign{
			AttemptID:  "att-1",
			JobID:      "job-1",
			TaskIndex:  3,
			ArrayIndex: intPtr(0), // zero must survive: it is a pointer
			Command:    []string{"python", "train.py", "--lr", "0.1"},
			Env:        map[string]string{"A": "1", "B": ""},
			Workdir:    "/srv/work",
			GPUs:       []int{0, 2},
			MaxRuntime: 90 * time.Minute,
			Grace:      10 * time.Second,
			Model:      "llama-3-8b",
		}},
		{wire.TypeJobCancel, &wire.JobCancel{AttemptID: "att-1", Reason: "cancelled by user"}},
		{wire.TypeNoWork, &wire.NoWork{}},
		{wire.TypePrewarmHint, &wire.PrewarmHint{Model: "org/llama-3-70b"}},
		{wire.TypeStreamOpen, &wire.StreamOpen{ID: "s1", AttemptID: "att-1", Kind: wire.StreamExec, Command: []string{"env"}}},
		{wire.TypeAck, &wire.Ack{
			Of:        wire.AckRegister,
			AttemptID: "att-1",
			Offset:    12345,
			Keep:      []string{"att-1"},
			Kill:      []string{"att-9"},
			Lease:     30 * time.Second,
			Heartbeat: 5 * time.Second,
			Resend:    true,
			Error:     "refused",
		}},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		seen[tt.typ] = true
		t.Run(tt.typ, func(t *testing.T) {
			t.Parallel()
			frame, err := wire.Encode(tt.typ, tt.msg)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			typ, got, err := wire.Decode(frame)
			if err != nil {
				t.Fatalf("Decode(%s): %v", frame, err)
			}
			if typ != tt.typ {
				t.Errorf("type = %q, want %q", typ, tt.typ)
			}
			if !reflect.DeepEqual(got, tt.msg) {
				t.Errorf("round trip changed the message:\n got  %#v\n want %#v\nframe %s", got, tt.msg, frame)
			}
		})
	}
	// Every message type the package defines is covered above.
	for _, typ := range []string{
		wire.TypeRegister, wire.TypeHeartbeat, wire.TypeReadyForWork, wire.TypeJobAccepted,
		wire.TypeJobResult, wire.TypeLog, wire.TypeJobAssign, wire.TypeJobCancel, wire.TypeNoWork, wire.TypeAck,
		wire.TypePrewarmHint, wire.TypeStreamOpen,
	} {
		if !seen[typ] {
			t.Errorf("message type %q has no round-trip case", typ)
		}
	}
}

// TestEncodeFrameShape pins the envelope: {"type":…,"payload":{…}}.
func TestEncodeFrameShape(t *testing.T) {
	t.Parallel()
	frame, err := wire.Encode(wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(frame, &env); err != nil {
		t.Fatalf("frame is not a JSON object: %v", err)
	}
	if string(env["type"]) != `"job_accepted"` {
		t.Errorf("type = %s, want \"job_accepted\"", env["type"])
	}
	if string(env["payload"]) != `{"attempt_id":"a"}` {
		t.Errorf("payload = %s", env["payload"])
	}
	if len(env) != 2 {
		t.Errorf("frame has %d keys, want 2: %s", len(env), frame)
	}
}

func TestEncodeRejectsUnencodablePayload(t *testing.T) {
	t.Parallel()
	if _, err := wire.Encode(wire.TypeLog, make(chan int)); err == nil {
		t.Fatal("Encode of a channel succeeded")
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		frame string
	}{
		{"empty frame", ""},
		{"whitespace only", "   \n"},
		{"not JSON", "register hello"},
		{"truncated JSON", `{"type":"register","payload":{"version":1`},
		{"JSON array", `[1,2,3]`},
		{"JSON string", `"register"`},
		{"trailing data", `{"type":"no_work"} {"type":"no_work"}`},
		{"empty object has no type", `{}`},
		{"unknown type", `{"type":"format_disk","payload":{}}`},
		{"type with different case", `{"type":"Register","payload":{"version":1}}`},
		{"type of wrong JSON type", `{"type":7,"payload":{}}`},
		{"register version as string", `{"type":"register","payload":{"version":"x"}}`},
		{"register gpus as object", `{"type":"register","payload":{"gpus":{"index":0}}}`},
		{"register memory as bool", `{"type":"register","payload":{"memory":true}}`},
		{"heartbeat running as string", `{"type":"heartbeat","payload":{"running":"att-1"}}`},
		{"job_result exit_code as string", `{"type":"job_result","payload":{"exit_code":"0"}}`},
		{"log data not base64", `{"type":"log","payload":{"attempt_id":"a","data":"!!!"}}`},
		{"log offset fractional", `{"type":"log","payload":{"offset":1.5}}`},
		{"ack of as number", `{"type":"ack","payload":{"of":1}}`},
		{"prewarm_hint model as number", `{"type":"prewarm_hint","payload":{"model":7}}`},
		{"heartbeat models as string", `{"type":"heartbeat","payload":{"models":"m1"}}`},
		{"payload is an array", `{"type":"job_accepted","payload":["a"]}`},
		{"payload is a string", `{"type":"job_cancel","payload":"a"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			typ, msg, err := wire.Decode([]byte(tt.frame))
			if err == nil {
				t.Fatalf("Decode(%q) = %q, %#v; want an error", tt.frame, typ, msg)
			}
			if typ != "" || msg != nil {
				t.Errorf("Decode(%q) returned %q, %#v with its error; want nothing", tt.frame, typ, msg)
			}
		})
	}
}

// TestDecodeUnknownTypeNamesIt checks the error says which type was unknown,
// which is what the server closes the session with.
func TestDecodeUnknownTypeNamesIt(t *testing.T) {
	t.Parallel()
	_, _, err := wire.Decode([]byte(`{"type":"format_disk"}`))
	if err == nil || !strings.Contains(err.Error(), "format_disk") {
		t.Fatalf("err = %v, want one naming format_disk", err)
	}
}

// TestDecodeAcceptsUnknownPayloadFieldsForForwardCompatibility documents a
// choice: Decode ignores fields it does not know, in the payload and in the
// envelope, so that a newer peer can add optional fields without breaking
// an older one within the same protocol Version. Incompatible changes bump
// Version, which the server checks at register.
func TestDecodeAcceptsUnknownPayloadFieldsForForwardCompatibility(t *testing.T) {
	t.Parallel()
	frame := `{"type":"register","trace_id":"abc","payload":{"version":1,"worker_id":"w","host":"h","slots":2,"future_field":{"x":[1,2]}}}`
	typ, msg, err := wire.Decode([]byte(frame))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := &wire.Register{Version: 1, WorkerID: "w", Host: "h", Slots: 2}
	if typ != wire.TypeRegister || !reflect.DeepEqual(msg, want) {
		t.Fatalf("Decode = %q, %#v; want register, %#v", typ, msg, want)
	}
}

// TestDecodeMissingPayloadIsZeroValue documents that a frame without a
// payload (or with a null one) decodes to the zero message of its type; the
// receiver's checks (register's version, worker_id, host) reject what it
// cannot use.
func TestDecodeMissingPayloadIsZeroValue(t *testing.T) {
	t.Parallel()
	for _, frame := range []string{`{"type":"ready_for_work"}`, `{"type":"ready_for_work","payload":null}`} {
		typ, msg, err := wire.Decode([]byte(frame))
		if err != nil {
			t.Fatalf("Decode(%s): %v", frame, err)
		}
		if typ != wire.TypeReadyForWork || !reflect.DeepEqual(msg, &wire.ReadyForWork{}) {
			t.Errorf("Decode(%s) = %q, %#v", frame, typ, msg)
		}
	}
	_, msg, err := wire.Decode([]byte(`{"type":"register"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := msg.(*wire.Register); !ok || r.Version == wire.Version {
		t.Errorf("register without payload = %#v; want a *Register whose version the server refuses", msg)
	}
}
