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
