package berth

import (
	"errors"
	"fmt"
	"testing"
)

// nestedDoc reaches structs through a pointer, a map and a list.
type nestedDoc struct {
	Job     *SubmitRequest        `json:"job"`
	Models  map[string]*Resources `json:"models"`
	Members []Constraints         `json:"members"`
}

func TestDecodeJSONUnknownField(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`{"command":["x"],"array":2,"resources":{"gpus":1,"gpu_type":"H100"}}`,
		`{"Command":["x"],"RESOURCES":{"GPUs":1}}`, // encoding/json matches names regardless of case
		`{"command":["x"],"env":{"gpu_typ":"1","XYZ":"2"},"constraints":{"host":"h","labels":{"gpu_typ":"a","xyz":"b"}}}`,
	} {
		var req SubmitRequest
		if err := DecodeJSON([]byte(doc), &req); err != nil {
			t.Errorf("DecodeJSON(%s) = %v, want ok", doc, err)
		}
	}
	for _, tt := range []struct {
		doc, field string
		v          any
	}{
		{`{"command":["x"],"colour":"red"}`, "colour", &SubmitRequest{}},
		{`{"command":["x"],"resources":{"gpu_typ":"H100"}}`, "resources.gpu_typ", &SubmitRequest{}},
		{`{"constraints":{"labels":{"a":"b"},"xyz":1}}`, "constraints.xyz", &SubmitRequest{}},
		{`{"Resources":{"gpu_typ":"H100"}}`, "resources.gpu_typ", &SubmitRequest{}},
		{`{"env":{"gpu_typ":"1"},"resources":{"gpu_typ":"H100"}}`, "resources.gpu_typ", &SubmitRequest{}},
		{`{"resources":{"gpu_typ":1},"gpu_typ":2}`, "resources.gpu_typ", &SubmitRequest{}}, // the first in the document
		{`{"gpu_typ":2,"resources":{"gpu_typ":1}}`, "gpu_typ", &SubmitRequest{}},
		{`{"resources":{"gpu\"typ":1}}`, `resources.gpu"typ`, &SubmitRequest{}},
		{`{"job":{"command":["x"],"resources":{"gpus":1,"cpu":2}}}`, "job.resources.cpu", &nestedDoc{}},
		// As for a value of the wrong type: map keys, no list indices.
		{`{"models":{"llama":{"gpus":1},"Mistral":{"gpu":1}}}`, "models.Mistral.gpu", &nestedDoc{}},
		{`{"members":[{"host":"a"},{"labels":{},"hots":"b"}]}`, "members.hots", &nestedDoc{}},
	} {
		err := DecodeJSON([]byte(tt.doc), tt.v)
		var e *Error
		if !errors.As(err, &e) || e.Code != ECodeInvalid || e.Field != tt.field || e.Message != fmt.Sprintf("unknown field %q", tt.field) {
			t.Errorf("DecodeJSON(%s) = %v; want invalid, field %q, unknown field %q", tt.doc, err, tt.field, tt.field)
		}
	}
}
