package wire

import (
	"testing"

	"github.com/berth-dev/berth"
)

// benchFrame is the traffic of one trivial job, as both ends see it: the
// assignment, its acceptance and result, and the server's acks.
func benchFrame(b *testing.B) []byte {
	arrayIndex, exitCode := 41, 0
	msgs := []struct {
		typ string
		msg any
	}{
		{TypeJobAssign, &JobAssign{AttemptID: "01JQ8Z5C2V3K4M5N6P7Q8R9S0T", JobID: "01JQ8Z5C2V3K4M5N6P7Q8R9S0V", ArrayIndex: &arrayIndex,
			Queue: "default", Command: []string{"true"}, Workdir: "/tmp/berth-bench-123"}},
		{TypeJobAccepted, &JobAccepted{AttemptID: "01JQ8Z5C2V3K4M5N6P7Q8R9S0T"}},
		{TypeAck, &Ack{Of: TypeJobAccepted, AttemptID: "01JQ8Z5C2V3K4M5N6P7Q8R9S0T"}},
		{TypeJobResult, &JobResult{AttemptID: "01JQ8Z5C2V3K4M5N6P7Q8R9S0T", State: berth.AttemptSucceeded, ExitCode: &exitCode}},
		{TypeAck, &Ack{Of: TypeJobResult, AttemptID: "01JQ8Z5C2V3K4M5N6P7Q8R9S0T"}},
	}
	var frame []byte
	for _, m := range msgs {
		var err error
		if frame, err = AppendFrame(frame, m.typ, m.msg); err != nil {
			b.Fatal(err)
		}
	}
	return frame
}

// BenchmarkAppendFrame encodes one job's messages into one frame.
func BenchmarkAppendFrame(b *testing.B) {
	arrayIndex, exitCode := 41, 0
	assign := &JobAssign{AttemptID: "01JQ8Z5C2V3K4M5N6P7Q8R9S0T", JobID: "01JQ8Z5C2V3K4M5N6P7Q8R9S0V", ArrayIndex: &arrayIndex,
		Queue: "default", Command: []string{"true"}, Workdir: "/tmp/berth-bench-123"}
	accepted := &JobAccepted{AttemptID: "01JQ8Z5C2V3K4M5N6P7Q8R9S0T"}
	result := &JobResult{AttemptID: "01JQ8Z5C2V3K4M5N6P7Q8R9S0T", State: berth.AttemptSucceeded, ExitCode: &exitCode}
	ack := &Ack{Of: TypeJobResult, AttemptID: "01JQ8Z5C2V3K4M5N6P7Q8R9S0T"}
	var frame []byte
	b.ReportAllocs()
	for b.Loop() {
		frame = frame[:0]
		for _, m := range []struct {
			typ string
			msg any
		}{{TypeJobAssign, assign}, {TypeJobAccepted, accepted}, {TypeAck, ack}, {TypeJobResult, result}, {TypeAck, ack}} {
			var err error
			if frame, err = AppendFrame(frame, m.typ, m.msg); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkDecodeFrame decodes one job's messages from one frame.
func BenchmarkDecodeFrame(b *testing.B) {
	frame := benchFrame(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeFrame(frame); err != nil {
			b.Fatal(err)
		}
	}
}
