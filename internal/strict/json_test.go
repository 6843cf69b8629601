package strict

import (
	"errors"
	"fmt"
	"testing"

	"github.com/berth-dev/berth"
)

// nestedDoc reaches structs through a pointer, a map and a list.
type nestedDoc struct {
	Job     *berth.SubmitRequest        `json:"job"`
	Models  map[string]*berth.Resources `json:"models"`
	Members []berth.Constraints         `json:"members"`
}

func TestDecodeJSONUnknownField(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`{"command":["x"],"array":2,"resources":{"gpus":1,"gpu_type":"H100"}}`,
		`{"Command":["x"],"RESOURCES":{"GPUs":1}}`, // encoding/json matches names regardless of case
		`{"command":["x"],"env":{"gpu_typ":"1","XYZ":"2"},"constraints":{"host":"h","labels":{"gpu_typ":"a","xyz":"b"}}}`,
	} {
		var req berth.SubmitRequest
		if err := DecodeJSON([]byte(doc), &req); err != nil {
			t.Errorf("DecodeJSON(%s) = %v, want ok", doc, err)
		}
	}
	for _, tt := range []struct {
		doc, field string
		v          any
	}{
		{`{"command":["x"],"colour":"red"}`, "colour", &berth.SubmitRequest{}},
		{`{"command":["x"],"resources":{"gpu_typ":"H100"}}`, "resources.gpu_typ", &berth.SubmitRequest{}},
		{`{"constraints":{"labels":{"a":"b"},"xyz":1}}`, "constraints.xyz", &berth.SubmitRequest{}},
		{`{"Resources":{"gpu_typ":"H100"}}`, "resources.gpu_typ", &berth.SubmitRequest{}},
		{`{"env":{"gpu_typ":"1"},"resources":{"gpu_typ":"H100"}}`, "resources.gpu_typ", &berth.SubmitRequest{}},
		{`{"resources":{"gpu_typ":1},"gpu_typ":2}`, "resources.gpu_typ", &berth.SubmitRequest{}},
		{`{"gpu_typ":2,"resources":{"gpu_typ":1}}`, "gpu_typ", &berth.SubmitRequest{}},
		{`{"resources":{"gpu\"typ":1}}`, `resources.gpu"typ`, &berth.SubmitRequest{}},
		{`{"job":{"command":["x"],"resources":{"gpus":1,"cpu":2}}}`, "job.resources.cpu", &nestedDoc{}},
		// As for a value of the wrong type: map keys, no list indices.
		{`{"models":{"llama":{"gpus":1},"Mistral":{"gpu":1}}}`, "models.Mistral.gpu", &nestedDoc{}},
		{`{"members":[{"host":"a"},{"labels":{},"hots":"b"}]}`, "members.hots", &nestedDoc{}},
	} {
		err := DecodeJSON([]byte(tt.doc), tt.v)
		var e *berth.Error
		if !errors.As(err, &e) || e.Code != berth.ECodeInvalid || e.Field != tt.field || e.Message != fmt.Sprintf("unknown field %q", tt.field) {
			t.Errorf("DecodeJSON(%s) = %v; want invalid, field %q, unknown field %q", tt.doc, err, tt.field, tt.field)
		}
	}
}

// TestDecodeJSONChangesNothing: what encoding/json alone would change —
// a string that is not UTF-8 (rewritten to U+FFFD), a repeated key (the
// last kept; for a struct's fields, in any case, as encoding/json matches
// them) — is refused naming the field, at any depth, in keys and values,
// in structs, maps and lists. Map keys differing in case are distinct.
func TestDecodeJSONChangesNothing(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`{"job":{"name":"ü ✓ 𝄞","command":["\ud834\udd1e","\u00fc"],"env":{"ü":"\uFFFD"}}}`,
		`{"job":{"env":{"A":"1","a":"2"},"constraints":{"labels":{"A":"x"}},"resources":{"gpus":1}}}`,
		`{"job":{"command":["x"]},"members":[{"host":"a"},{"host":"b"}]}`, // same keys in different objects
	} {
		var v nestedDoc
		if err := DecodeJSON([]byte(doc), &v); err != nil {
			t.Errorf("DecodeJSON(%s) = %v, want ok", doc, err)
		}
	}
	for _, tt := range []struct {
		name, doc, field, msg string
		v                     any
	}{
		{"invalid byte in a top-level string", "{\"name\":\"a\xffb\"}", "name", "not valid UTF-8", &berth.SubmitRequest{}},
		{"truncated sequence in a list", "{\"command\":[\"ok\",\"\xe2\x82\"]}", "command", "not valid UTF-8", &berth.SubmitRequest{}},
		{"invalid env value", "{\"command\":[\"x\"],\"env\":{\"A\":\"1\",\"HF\":\"\xc3\x28\"}}", "env.HF", "not valid UTF-8", &berth.SubmitRequest{}},
		{"invalid env key", "{\"env\":{\"A\":\"1\",\"B\xff\":\"2\"}}", "env.B\uFFFD", "key is not valid UTF-8", &berth.SubmitRequest{}},
		{"lone surrogate escape", `{"env":{"A":"\ud800"}}`, "env.A", "not valid UTF-8", &berth.SubmitRequest{}},
		{"low surrogate first", `{"name":"\udc00\ud800"}`, "name", "not valid UTF-8", &berth.SubmitRequest{}},
		{"nested label value", "{\"job\":{\"constraints\":{\"labels\":{\"zone\":\"\xfe\"}}}}", "job.constraints.labels.zone", "not valid UTF-8", &nestedDoc{}},
		{"in a list of structs", "{\"members\":[{\"host\":\"a\"},{\"host\":\"\xff\"}]}", "members.host", "not valid UTF-8", &nestedDoc{}},
		{"field named by its JSON name", "{\"Name\":\"\xff\"}", "name", "not valid UTF-8", &berth.SubmitRequest{}},
		{"duplicate top-level key", `{"name":"a","command":["x"],"name":"b"}`, "name", "given twice", &berth.SubmitRequest{}},
		{"duplicate escaped key", `{"name":"a","n\u0061me":"b"}`, "name", "given twice", &berth.SubmitRequest{}},
		{"duplicate nested key", `{"resources":{"gpus":1,"cpus":2,"gpus":8}}`, "resources.gpus", "given twice", &berth.SubmitRequest{}},
		{"duplicate env key", `{"env":{"A":"1","B":"2","A":"3"}}`, "env.A", "given twice", &berth.SubmitRequest{}},
		{"duplicate deep in a map of structs", `{"models":{"m":{"gpus":1,"gpus":2}}}`, "models.m.gpus", "given twice", &nestedDoc{}},
		{"duplicate in a list of structs", `{"members":[{"host":"a"},{"host":"b","host":"c"}]}`, "members.host", "given twice", &nestedDoc{}},
		{"struct key repeated in another case", `{"name":"a","NAME":"b"}`, "name", "given twice", &berth.SubmitRequest{}},
		{"nested struct key in another case", `{"Resources":{"gpus":1},"resources":{"cpus":1}}`, "resources", "given twice", &berth.SubmitRequest{}},
		{"duplicate after a nested object", `{"job":{"env":{"A":"1"}},"members":[],"job":{}}`, "job", "given twice", &nestedDoc{}},
	} {
		err := DecodeJSON([]byte(tt.doc), tt.v)
		var e *berth.Error
		if !errors.As(err, &e) || e.Code != berth.ECodeInvalid || e.Field != tt.field || e.Message != tt.msg {
			t.Errorf("%s: DecodeJSON(%q) = %v; want invalid, field %q, %q", tt.name, tt.doc, err, tt.field, tt.msg)
		}
	}
}
