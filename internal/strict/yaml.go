package strict

import (
	"bytes"
	"encoding/json"
	"reflect"

	"github.com/goccy/go-yaml"

	"github.com/berth-dev/berth"
)

// ErrEmptyYAML is DecodeYAML's error for a document with nothing in it
// (an empty file, or only comments).
var ErrEmptyYAML error = berth.Invalidf("", "the document is empty")

// DecodeYAML decodes a YAML (or JSON) document into v strictly, as
// DecodeJSON does: malformed YAML, an unknown field or a bad value is an
// invalid *berth.Error naming the field where there is one, and an empty
// document is ErrEmptyYAML. Job files, service templates and the
// arbiter's catalog are read with it.
func DecodeYAML(data []byte, v any) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return berth.Invalidf("", "not valid YAML: %s", yaml.FormatError(err, false, false))
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return ErrEmptyYAML
	}
	if err := bareUnitNumber(js, reflect.TypeOf(v)); err != nil {
		return err
	}
	return DecodeJSON(js, v)
}

// bareUnitNumber returns an invalid *berth.Error for the first duration or
// size in js, a document of type t converted from YAML, written as a bare
// number other than 0. The API takes numbers of seconds and bytes from
// programs, but in a file people write, "max_runtime: 90" could mean
// minutes (as Slurm reads it) and "memory: 16000" megabytes; as with
// flags, the unit must be written, and a size is read as berth.ParseBytes
// reads one.
func bareUnitNumber(js []byte, t reflect.Type) error {
	var bare json.Number
	var sizeErr error
	field, ok, _ := walkJSON(numberDecoder(js), t, "", func(vt reflect.Type, tok json.Token, _ bool) bool {
		n, isNumber := tok.(json.Number)
		switch {
		case !isNumber:
		case vt == durationType:
			if f, err := n.Float64(); err != nil || f != 0 {
				bare = n
				return true
			}
		case vt == bytesType:
			_, sizeErr = berth.ParseBytes(n.String())
			return sizeErr != nil
		}
		return false
	})
	switch {
	case !ok:
		return nil
	case sizeErr != nil:
		return berth.Invalidf(field, "%v", sizeErr)
	}
	return berth.Invalidf(field, "%s is a bare number; write the unit: a duration such as %ss, %sm or %sh", bare, bare, bare, bare)
}

var (
	durationType = reflect.TypeFor[berth.Duration]()
	bytesType    = reflect.TypeFor[berth.Bytes]()
)
