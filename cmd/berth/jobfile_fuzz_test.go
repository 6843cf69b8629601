package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/berth-dev/berth"
)

// FuzzJobFile feeds arbitrary job files (YAML or JSON) to loadJobFile, as
// `berth submit -f -` reads them from stdin. Properties: nothing panics;
// every error is an ECodeInvalid *berth.Error; an accepted file gives a
// request whose validation errors are ECodeInvalid *berth.Errors naming a
// field; and that request, encoded as the client sends it and decoded as
// the server does (over the defaults, unknown fields rejected), is accepted
// and validates the same way: what the CLI accepts, the server reads alike.
func FuzzJobFile(f *testing.F) {
	for _, seed := range []string{
		"name: train-llama\nqueue: gpu\nresources: {gpus: 4, gpu_type: H100, gpu_memory: 80GiB}\ncommand: [\"python\", \"train.py\"]\nretries: 2\nmax_runtime: 6h\n",
		"command: python train.py --lr 0.1\nenv:\n  EPOCHS: \"3\"\narray: 10\nmax_runtime: 90\nresources:\n  cpus: 1.5\n  memory: 512MiB\n",
		`{"command":["true"],"priority":200,"constraints":{"labels":{"zone":"a"}}}`,
		"command: [\"true\"]\ngpuz: 4\n",
		"command: [python\nresources: {gpus: 1\n",
		"- command: [\"true\"]\n",
		"priority: high\nresources: {gpus: [1]}\ncommand: {a: b}\n",
		"command: [\"true\"]\npriority: 1e400\narray: 99999999999999999999\nmax_runtime: 1e300\n",
		"base: &b [\"echo\", \"hi\"]\ncommand: *b\n",
		"command: [\"a\\0b\"]\nname: \"\\0\"\n",
		"---\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req := berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
		if err := loadJobFile("-", bytes.NewReader(data), &req); err != nil {
			var e *berth.Error
			if !errors.As(err, &e) || e.Code != berth.ECodeInvalid {
				t.Fatalf("loadJobFile: error %T is not an %s *berth.Error: %v", err, berth.ECodeInvalid, err)
			}
			return
		}
		verr := req.Validate()
		if verr != nil {
			var e *berth.Error
			if !errors.As(verr, &e) || e.Code != berth.ECodeInvalid || e.Field == "" {
				t.Fatalf("Validate: error %T is not an %s *berth.Error naming a field: %v", verr, berth.ECodeInvalid, verr)
			}
		}

		body, err := json.Marshal(&req)
		if err != nil {
			t.Fatalf("marshal the request: %v", err)
		}
		sent := berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&sent); err != nil {
			t.Fatalf("the server would reject %s: %v", body, err)
		}
		if verr2 := sent.Validate(); !sameField(verr, verr2) {
			t.Fatalf("validation differs on the server: %v here, %v there (%s)", verr, verr2, body)
		}
	})
}

// sameField reports whether a and b are both nil or both *berth.Errors
// naming the same field.
func sameField(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var ea, eb *berth.Error
	return errors.As(a, &ea) && errors.As(b, &eb) && ea.Field == eb.Field
}
