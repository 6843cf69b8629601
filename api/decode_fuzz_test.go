package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/berth-dev/berth"
)

// padding makes any accepted body too big when appended: JSON whitespace,
// so only the size limit can reject the result.
var padding = strings.Repeat(" ", MaxBody+1)

// FuzzDecodeSubmit feeds arbitrary request bodies to the submit handler's
// decoding and validation. Properties: nothing panics; every error is an
// ECodeInvalid *berth.Error naming a field, but for a body over MaxBody,
// too_large; an accepted body is one valid JSON value, valid UTF-8,
// repeating no key in any object, and too large once padded past MaxBody;
// and an accepted request, encoded as the client sends it, decodes again
// to a request that validates the same way.
func FuzzDecodeSubmit(f *testing.F) {
	for _, seed := range []string{
		`{"name":"train","queue":"gpu","priority":200,"nodes":2,"resources":{"gpus":8,"gpu_memory":"80GiB","gpu_type":"H100","cpus":32,"memory":"256GiB"},"command":["python","train.py"],"env":{"EPOCHS":"3"},"workdir":"/data","max_runtime":"2h","retries":1,"array":4}`,
		`{"command":"echo hello"}`,
		`[{"command":["true"]}]`,
		`{"command":["true"],"colour":"red"}`,
		`{"command":["true"],"resources":{"gpus":{"n":[1,"2"]}},"env":[["A","1"]]}`,
		`{"command":["true"],"priority":1e400,"array":99999999999999999999,"resources":{"memory":"9e99TiB","cpus":1e308}}`,
		"{\"command\":[\"a\\u0000b\",\"\x00\"],\"name\":\"\\u0000\"}",
		`{"command":["true"]} {"command":["true"]}`,
		`{"command":["true"]}}`,
		`{"":1}`,
		"{\"command\":[\"true\"],\"env\":{\"A\":\"\xff\"}}",
		`{"command":["true"],"name":"\udc00"}`,
		`{"command":["true"],"resources":{"gpus":1,"gpus":2}}`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeSubmit(bytes.NewReader(body))
		if len(body) > MaxBody {
			checkTooLarge(t, "decode", err)
			return
		}
		if err != nil {
			checkInvalid(t, "decode", err)
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted a body that is not one JSON value: %q", body)
		}
		if !utf8.Valid(body) {
			t.Fatalf("accepted a body that is not UTF-8: %q", body)
		}
		if key, ok := repeatedKey(json.NewDecoder(bytes.NewReader(body))); ok {
			t.Fatalf("accepted a body that repeats key %q: %q", key, body)
		}
		verr := req.Validate()
		if verr != nil {
			checkInvalid(t, "Validate", verr)
		}

		// The same body, padded with whitespace past the limit.
		_, err = decodeSubmit(io.MultiReader(bytes.NewReader(body), strings.NewReader(padding)))
		checkTooLarge(t, "decode padded", err)

		// What the client sends for this request decodes and validates alike.
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("marshal accepted request: %v", err)
		}
		req2, err := decodeSubmit(bytes.NewReader(again))
		if err != nil {
			t.Fatalf("re-encoded request %s rejected: %v", again, err)
		}
		if verr2 := req2.Validate(); !sameError(verr, verr2) {
			t.Fatalf("validation changed over a round trip through JSON: %v, then %v (%s)", verr, verr2, again)
		}
	})
}

// decodeSubmit decodes body as the submit handler does.
func decodeSubmit(body io.Reader) (*berth.SubmitRequest, error) {
	r := httptest.NewRequest(http.MethodPost, "/api/v1/jobs", body)
	req := berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	return &req, decode(r, &req)
}

// checkInvalid fails t unless err is an ECodeInvalid *berth.Error with a
// field, and returns it.
func checkInvalid(t *testing.T, what string, err error) *berth.Error {
	t.Helper()
	var e *berth.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %T is not a *berth.Error: %v", what, err, err)
	}
	if e.Code != berth.ECodeInvalid {
		t.Fatalf("%s: code %q, want %q: %v", what, e.Code, berth.ECodeInvalid, err)
	}
	if e.Field == "" {
		t.Fatalf("%s: error names no field: %v", what, err)
	}
	return e
}

// repeatedKey reads one JSON value from dec, token by token, and returns
// the first key an object in it repeats: a check independent of the
// server's.
func repeatedKey(dec *json.Decoder) (string, bool) {
	tok, err := dec.Token()
	if err != nil || (tok != json.Delim('{') && tok != json.Delim('[')) {
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		if tok == json.Delim('{') {
			k, _ := dec.Token()
			key, _ := k.(string)
			if seen[key] {
				return key, true
			}
			seen[key] = true
		}
		if key, ok := repeatedKey(dec); ok {
			return key, true
		}
	}
	_, _ = dec.Token() // the closing } or ]
	return "", false
}

// checkTooLarge fails t unless err is a too_large *berth.Error on field
// body.
func checkTooLarge(t *testing.T, what string, err error) {
	t.Helper()
	var e *berth.Error
	if !errors.As(err, &e) || e.Code != berth.ECodeTooLarge || e.Field != "body" {
		t.Fatalf("%s: a body over MaxBody: %v, want too_large on body", what, err)
	}
}

// sameError reports whether a and b are both nil or name the same field.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var ea, eb *berth.Error
	return errors.As(a, &ea) && errors.As(b, &eb) && ea.Field == eb.Field
}
