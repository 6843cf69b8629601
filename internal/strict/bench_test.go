package strict

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
)

// submitBody is a typical submission: an array job of 100,000 tasks.
const submitBody = `{"name":"train","queue":"gpu","priority":200,"nodes":2,"resources":{"gpus":8,"gpu_memory":"80GiB","gpu_type":"H100","cpus":32,"memory":"256GiB"},"command":["python","train.py","--lr","3e-4"],"env":{"EPOCHS":"3","DATA":"/data/set-ü"},"workdir":"/data","max_runtime":"2h","retries":1,"array":100000}`

// bigSubmitBody is a submission near api.MaxBody (1 MiB): a long command
// and a large env, the most strings and keys a body can carry.
func bigSubmitBody() []byte {
	var b strings.Builder
	b.WriteString(`{"name":"big","command":["python","train.py"`)
	for i := range 8000 {
		fmt.Fprintf(&b, `,"--flag-%d=välue-%d"`, i, i)
	}
	b.WriteString(`],"env":{`)
	for i := range 16000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"VAR_%d":"some value %d"`, i, i)
	}
	b.WriteString(`},"array":100000}`)
	return []byte(b.String())
}

// benchBodies are the submit bodies the benchmarks decode: a typical one
// and one near the API's 1 MiB limit.
func benchBodies() []struct {
	name string
	body []byte
} {
	return []struct {
		name string
		body []byte
	}{
		{"submit", []byte(submitBody)},
		{"submit-1MiB", bigSubmitBody()},
	}
}

func BenchmarkDecodeJSON(b *testing.B) {
	for _, bb := range benchBodies() {
		b.Run(bb.name, func(b *testing.B) {
			b.SetBytes(int64(len(bb.body)))
			b.ReportAllocs()
			for b.Loop() {
				req := berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
				if err := DecodeJSON(bb.body, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheckStrings is DecodeJSON's UTF-8 and repeated-key check
// alone: what it adds to BenchmarkDecodeJSON.
func BenchmarkCheckStrings(b *testing.B) {
	t := reflect.TypeFor[*berth.SubmitRequest]()
	for _, bb := range benchBodies() {
		b.Run(bb.name, func(b *testing.B) {
			b.SetBytes(int64(len(bb.body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := checkStrings(bb.body, t); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
