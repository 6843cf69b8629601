// Package strict reads JSON and YAML documents into Berth's types
// strictly: an unknown field, a value of the wrong type or one a Berth type
// rejects is an invalid *berth.Error naming the field at fault.
package strict

import (
	"bytes"
	"cmp"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/berth-dev/berth"
)

// DecodeJSON decodes one JSON value into v strictly: an unknown field, a
// value of the wrong type or one a Berth type rejects, malformed JSON,
// nothing at all, anything but whitespace after the value, a string (key or
// value) that is not valid UTF-8 or a key an object repeats is an invalid
// *berth.Error, and v must then be discarded: nothing is changed silently,
// as encoding/json alone would (U+FFFD for what is not UTF-8, the last of
// repeated keys). Its Field is the JSON path of the field at fault
// ("resources.memory"), or "" when the fault is the document's.
func DecodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, data, reflect.TypeOf(v))
	}
	// Only JSON whitespace may follow; dec.More would miss a stray ] or }.
	if len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) > 0 {
		return berth.Invalidf("", "trailing data after the JSON object")
	}
	return checkStrings(data, reflect.TypeOf(v))
}

// decodeError turns err, from decoding data into a value of type t, into
// an invalid *berth.Error.
func decodeError(err error, data []byte, t reflect.Type) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := jsonPath(typeErr.Field)
		// encoding/json makes no UnmarshalTypeError for a type with its
		// own UnmarshalJSON: one for such a type is how the type rejects a
		// value, with what is wrong as its Value (berth.Bytes does so).
		if reflect.PointerTo(typeErr.Type).Implements(unmarshaler) {
			return berth.Invalidf(field, "%s", typeErr.Value)
		}
		// encoding/json names no map keys: find the value to name its key
		// too ("env.EPOCHS", not "env").
		var wrong json.Token
		if at, ok, _ := walkJSON(numberDecoder(data), t, "", func(vt reflect.Type, tok json.Token, unknown bool) bool {
			if !unknown && vt != nil && !decodedWhole(vt) && !fitsKind(vt, tok) {
				wrong = tok
				return true
			}
			return false
		}); ok {
			field = at
		}
		if n, ok := wrong.(json.Number); ok && typeErr.Type.Kind() == reflect.String {
			return berth.Invalidf(field, "must be a string; quote it: %q", n.String())
		}
		return berth.Invalidf(field, "must be %s", kindOf(typeErr.Type))
	case errors.As(err, &syntaxErr):
		return berth.Invalidf("", "malformed JSON at byte %d", syntaxErr.Offset).WithCause(err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json names the key alone (with %q), not where it is.
		key, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		field, ok := unknownField(numberDecoder(data), t, key)
		if !ok {
			field = key
		}
		return berth.Invalidf(field, `unknown field %q`, field)
	case errors.Is(err, io.EOF):
		return berth.Invalidf("", "empty; want a JSON object")
	}
	return &berth.Error{Code: berth.ECodeInvalid, Err: err}
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// numberDecoder decodes data keeping numbers as json.Number.
func numberDecoder(data []byte) *json.Decoder {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec
}

// fitsKind reports whether encoding/json decodes tok, a scalar token, into
// a value of type t without a type error: null into anything, and strings,
// booleans and numbers into their kinds.
func fitsKind(t reflect.Type, tok json.Token) bool {
	switch t.Kind() {
	case reflect.String:
		_, ok := tok.(string)
		return ok || tok == nil
	case reflect.Bool:
		_, ok := tok.(bool)
		return ok || tok == nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		_, ok := tok.(json.Number)
		return ok || tok == nil
	}
	return true
}

// unknownField reads one JSON value from dec as encoding/json decodes it
// into a value of type t and returns the path of the first key named key
// that no field of its struct takes.
func unknownField(dec *json.Decoder, t reflect.Type, key string) (string, bool) {
	at, found, _ := walkJSON(dec, t, "", func(_ reflect.Type, tok json.Token, unknown bool) bool {
		return unknown && tok == key
	})
	return at, found
}

// jsonVisitor is called by walkJSON for each scalar, with the Go type it
// decodes into (nil where nothing does) and its token, and for each key no
// field of its struct takes (unknown, with the key as tok). It returns
// true to stop the walk there.
type jsonVisitor func(t reflect.Type, tok json.Token, unknown bool) bool

// walkJSON reads one JSON value from dec as encoding/json decodes it into a
// value of type t, at JSON path path, calling visit until it returns true,
// and returns the path it stopped at (found). Paths name struct fields by
// their JSON names and map entries by their keys, not list indices. An
// error is of malformed JSON, which ends the walk.
func walkJSON(dec *json.Decoder, t reflect.Type, path string, visit jsonVisitor) (at string, found bool, err error) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return "", false, err
	}
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return path, visit(t, tok, false), nil
	}
	if t != nil && decodedWhole(t) {
		t = nil // no field of it is unknown
	}
	for dec.More() {
		var elem reflect.Type
		sub := path
		if tok == json.Delim('{') {
			k, err := dec.Token()
			if err != nil {
				return "", false, err
			}
			name, _ := k.(string)
			switch {
			case t == nil:
			case t.Kind() == reflect.Map:
				elem, sub = t.Elem(), joinPath(path, name)
			case t.Kind() == reflect.Struct:
				if f, ok := jsonField(t, name); ok {
					elem, sub = f.Type, joinPath(path, f.Name)
				} else if visit(nil, name, true) {
					return joinPath(path, name), true, nil
				}
			}
		} else if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		if at, found, err := walkJSON(dec, elem, sub, visit); found || err != nil {
			return at, found, err
		}
	}
	_, err = dec.Token() // the closing } or ]
	return "", false, err
}

// decodedWhole reports whether values of type t decode themselves
// (UnmarshalJSON or UnmarshalText) rather than field by field.
// berth.Resources is decoded field by field: its UnmarshalJSON only
// widens "gpus" to take a fraction (checkStrings refuses its unknown
// fields, which encoding/json does not see).
func decodedWhole(t reflect.Type) bool {
	if t == resourcesType {
		return false
	}
	return reflect.PointerTo(t).Implements(unmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)
}

var resourcesType = reflect.TypeFor[berth.Resources]()

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// joinPath appends name to the JSON path path.
func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// jsonField returns the field of struct type t that encoding/json decodes
// key into, with its JSON name as Name: the shallowest named key, else the
// shallowest named key but for case.
func jsonField(t reflect.Type, key string) (reflect.StructField, bool) {
	var best reflect.StructField
	found, exact := false, false
	for _, f := range jsonFields(t) {
		if !strings.EqualFold(f.Name, key) {
			continue
		}
		if e := f.Name == key; !found || e && !exact || e == exact && len(f.Index) < len(best.Index) {
			best, found, exact = f, true, e
		}
	}
	return best, found
}

// jsonFields returns the fields of struct type t that encoding/json
// decodes a key into, each with its JSON name as Name; worked out once a
// type.
func jsonFields(t reflect.Type) []reflect.StructField {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.([]reflect.StructField)
	}
	var fs []reflect.StructField
	for _, f := range reflect.VisibleFields(t) {
		if name, ok := jsonName(t, f); ok {
			f.Name = name
			fs = append(fs, f)
		}
	}
	fieldCache.Store(t, fs)
	return fs
}

// fieldCache maps a struct type to its jsonFields.
var fieldCache sync.Map

// jsonName returns the JSON name of f, a field visible in struct type t,
// and false when encoding/json decodes no JSON key into f itself: an
// unexported or "-" field, an embedded struct whose fields are t's, or a
// field of an embedded struct with a JSON name.
func jsonName(t reflect.Type, f reflect.StructField) (string, bool) {
	for i := 1; i < len(f.Index); i++ {
		if tagName(t.FieldByIndex(f.Index[:i])) != "" {
			return "", false
		}
	}
	name, ft := tagName(f), f.Type
	if ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	if name == "-" || !f.IsExported() || f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
		return "", false
	}
	return cmp.Or(name, f.Name), true
}

// tagName is the name in f's json tag: "" for none, "-" for a skipped field.
func tagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
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
