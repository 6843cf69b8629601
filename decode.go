package berth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// DecodeJSON decodes one JSON value into v strictly: an unknown field, a
// value of the wrong type or one a Berth type rejects, malformed JSON,
// nothing at all or anything but whitespace after the value is an invalid
// *Error. Its Field is the JSON path of the field at fault
// ("resources.memory"), or "" when the fault is the document's.
func DecodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	// Only JSON whitespace may follow; dec.More would miss a stray ] or }.
	if len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) > 0 {
		return Invalidf("", "trailing data after the JSON object")
	}
	return nil
}

func decodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := jsonPath(typeErr.Field)
		// encoding/json makes no UnmarshalTypeError for a type with its
		// own UnmarshalJSON: one for such a type is rejectValue's.
		if reflect.PointerTo(typeErr.Type).Implements(unmarshaler) {
			return Invalidf(field, "%s", typeErr.Value)
		}
		return Invalidf(field, "must be %s", kindOf(typeErr.Type))
	case errors.As(err, &syntaxErr):
		return Invalidf("", "malformed JSON at byte %d: %v", syntaxErr.Offset, err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return Invalidf(field, `unknown field %q`, field)
	case errors.Is(err, io.EOF):
		return Invalidf("", "empty; want a JSON object")
	}
	return Invalidf("", "%v", err)
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// rejectValue is the error of a Berth type's UnmarshalJSON for a value it
// rejects: an *json.UnmarshalTypeError, so that encoding/json adds the
// path of the field, with msg, what is wrong, as its Value.
func rejectValue[T any](msg string) error {
	return &json.UnmarshalTypeError{Value: msg, Type: reflect.TypeFor[T]()}
}

// jsonPath turns an UnmarshalTypeError's field path into the JSON path:
// encoding/json names an embedded struct by its Go name
// ("JobSpec.resources.gpus" for SubmitRequest), which users never write.
// JSON field names here are all lower case.
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	kept := parts[:0]
	for _, p := range parts {
		if p != "" && (p[0] < 'A' || p[0] > 'Z') {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, ".")
}

// kindOf says in words what a JSON value of type t is.
func kindOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return kindOf(t.Elem())
	}
	return fmt.Sprint(t)
}
