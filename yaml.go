package berth

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/goccy/go-yaml"
)

// ErrEmptyYAML is DecodeYAML's error for a document with nothing in it
// (an empty file, or only comments).
var ErrEmptyYAML error = Invalidf("", "the document is empty")

// DecodeYAML decodes a YAML (or JSON) document into v strictly, as the
// API decodes JSON: malformed YAML, an unknown field or a value of the
// wrong type is an invalid *Error naming the field where there is one,
// and an empty document is ErrEmptyYAML. Job files, service templates and
// the arbiter's catalog are read with it.
func DecodeYAML(data []byte, v any) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return Invalidf("", "not valid YAML: %s", yaml.FormatError(err, false, false))
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return ErrEmptyYAML
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return Invalidf(te.Field, "must be %s", te.Type)
		}
		return Invalidf("", "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}
