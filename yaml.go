package berth

import (
	"bytes"

	"github.com/goccy/go-yaml"
)

// ErrEmptyYAML is DecodeYAML's error for a document with nothing in it
// (an empty file, or only comments).
var ErrEmptyYAML error = Invalidf("", "the document is empty")

// DecodeYAML decodes a YAML (or JSON) document into v strictly, as
// DecodeJSON does: malformed YAML, an unknown field or a bad value is an
// invalid *Error naming the field where there is one, and an empty
// document is ErrEmptyYAML. Job files, service templates and
// the arbiter's catalog are read with it.
func DecodeYAML(data []byte, v any) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return Invalidf("", "not valid YAML: %s", yaml.FormatError(err, false, false))
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return ErrEmptyYAML
	}
	return DecodeJSON(js, v)
}
