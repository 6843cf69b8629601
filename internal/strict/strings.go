package strict

import (
	"bytes"
	"encoding/json"
	"hash/maphash"
	"reflect"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/berth-dev/berth"
)

// checkStrings finds what encoding/json would change in data, one JSON
// value it has decoded without error into a value of type t: a key
// berth.Resources has no field for (its own UnmarshalJSON takes any), a string
// (key or value) that is not valid UTF-8 — invalid bytes or a lone
// surrogate escape, which encoding/json turns into U+FFFD — or a key that
// an object repeats, of which encoding/json keeps the last (in an object
// decoded into a struct, keys that differ only in case are the same key,
// as encoding/json matches them to fields). Either is an invalid
// *berth.Error naming the field (see fieldPath); nil when there is
// neither. It reads data once and allocates only for objects of more than
// smallObject keys and for keys with escapes.
func checkStrings(data []byte, t reflect.Type) error {
	// frames[i] is an open object or list; keys holds the keys of each
	// open object, frames[i].keys indexing its first one.
	var frameBuf [8]frame
	var keyBuf [32][]byte
	frames, keys := frameBuf[:0], keyBuf[:0]
	atKey := false // the next string in the open object is a key
	for i := 0; i < len(data); {
		c := data[i]
		switch c {
		case '{', '[':
			vt := t
			if len(frames) > 0 {
				vt = frames[len(frames)-1].elem(keys)
			}
			frames = append(frames, frame{object: c == '{', keys: len(keys), t: fieldsOf(vt)})
			atKey = c == '{'
			i++
		case '}', ']':
			top := frames[len(frames)-1]
			frames, keys = frames[:len(frames)-1], keys[:top.keys]
			if len(frames) == 0 {
				return nil // one value: DecodeJSON checks what follows
			}
			i++
		case ',':
			atKey = frames[len(frames)-1].object
			i++
		case '"':
			end, raw, ok := scanString(data, i)
			if !ok && atKey {
				key, _ := unquote(data[i:end]) // U+FFFD for what is invalid
				return berth.Invalidf(fieldPath(frames, append(keys, []byte(key))), "key is not valid UTF-8")
			}
			if !ok {
				return berth.Invalidf(fieldPath(frames, keys), "not valid UTF-8")
			}
			if atKey {
				key := data[i+1 : end-1] // no escapes: as written
				if !raw {
					s, _ := unquote(data[i:end])
					key = []byte(s)
				}
				keys = append(keys, key)
				if frames[len(frames)-1].repeats(keys) {
					return berth.Invalidf(fieldPath(frames, keys), "given twice")
				}
				if top := frames[len(frames)-1]; top.t == resourcesType {
					if _, ok := jsonField(top.t, string(key)); !ok { // decoded by its own UnmarshalJSON, which takes any key
						path := fieldPath(frames, keys)
						return berth.Invalidf(path, "unknown field %q", path)
					}
				}
				atKey = false
			}
			i = end
		default: // whitespace, ':', numbers, true, false, null
			i++
		}
	}
	return nil
}

// frame is an open JSON object or list in checkStrings.
type frame struct {
	object bool
	keys   int                 // index in checkStrings' keys of the object's first key
	t      reflect.Type        // what it decodes into field by field, element by element; nil for none
	seen   map[uint64]struct{} // hashes of the object's keys, once it has more than smallObject
}

// fieldsOf is t, or what t points to, when encoding/json decodes it field
// by field or element by element; else nil.
func fieldsOf(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || decodedWhole(t) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Array:
		return t
	}
	return nil
}

// elem is the type of f's value being read: the element of a list or map,
// or the struct field of the last of keys; nil when none is known.
func (f *frame) elem(keys [][]byte) reflect.Type {
	switch {
	case f.t == nil:
		return nil
	case f.t.Kind() == reflect.Struct:
		sf, _ := jsonField(f.t, string(keys[len(keys)-1]))
		return sf.Type
	}
	return f.t.Elem()
}

// smallObject is how many keys an object may have before checkStrings
// looks its keys up by hash rather than one by one.
const smallObject = 16

// keySeed seeds the hashes of keys.
var keySeed = maphash.MakeSeed()

// repeats reports whether the last of keys, an object's keys from f.keys
// on, is one of its others.
func (f *frame) repeats(keys [][]byte) bool {
	own := keys[f.keys:]
	key := own[len(own)-1]
	if f.t != nil && f.t.Kind() == reflect.Struct {
		// No more keys than fields: the others were refused as unknown.
		for _, k := range own[:len(own)-1] {
			if bytes.EqualFold(k, key) {
				return true
			}
		}
		return false
	}
	if len(own) > smallObject {
		if f.seen == nil {
			f.seen = make(map[uint64]struct{}, 2*len(own))
			for _, k := range own[:len(own)-1] {
				f.seen[maphash.Bytes(keySeed, k)] = struct{}{}
			}
		}
		h := maphash.Bytes(keySeed, key)
		if _, ok := f.seen[h]; !ok {
			f.seen[h] = struct{}{}
			return false
		}
		// The same hash: the same key, or (rarely) another one.
	}
	for _, k := range own[:len(own)-1] {
		if bytes.Equal(k, key) {
			return true
		}
	}
	return false
}

// scanString reads the JSON string starting at data[start] (its opening
// quote) and returns the index just past its closing quote, whether it has
// no escapes (its bytes between the quotes are its value), and whether it
// is valid UTF-8 once unescaped: no invalid bytes and no lone surrogate
// \u escape. data is valid JSON.
func scanString(data []byte, start int) (end int, raw, valid bool) {
	raw, valid = true, true
	for i := start + 1; ; {
		// Up to the next quote, which ends the string unless escaped.
		seg := data[i : i+bytes.IndexByte(data[i:], '"')]
		b := bytes.IndexByte(seg, '\\')
		if b < 0 {
			return i + len(seg) + 1, raw, valid && utf8.Valid(seg)
		}
		valid = valid && utf8.Valid(seg[:b]) // '\\' ends no UTF-8 sequence
		raw = false
		i += b
		if data[i+1] != 'u' {
			i += 2 // \" too
			continue
		}
		r := hex4(data[i+2:])
		i += 6
		switch {
		case utf16.IsSurrogate(r) && r < 0xDC00 && i+6 <= len(data) && data[i] == '\\' && data[i+1] == 'u':
			if utf16.DecodeRune(r, hex4(data[i+2:])) == utf8.RuneError {
				valid = false
			} else {
				i += 6
			}
		case utf16.IsSurrogate(r):
			valid = false
		}
	}
}

// hex4 is the rune that the four hex digits starting b spell.
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(n)
}

// unquote is the value of a quoted JSON string, as encoding/json decodes it.
func unquote(quoted []byte) (string, error) {
	var s string
	err := json.Unmarshal(quoted, &s)
	return s, err
}

// fieldPath is the JSON path, as walkJSON names it, of the value at keys
// (the keys of frames' open objects, the innermost object's last key
// naming the value at fault): struct fields by their JSON names, map
// entries by their keys, no list indices.
func fieldPath(frames []frame, keys [][]byte) string {
	path := ""
	for i, f := range frames {
		next := len(keys)
		if i+1 < len(frames) {
			next = frames[i+1].keys
		}
		if !f.object || next == f.keys {
			continue // a list, or an object whose first key is yet to come
		}
		name := string(keys[next-1]) // the key whose value is open
		if f.t != nil && f.t.Kind() == reflect.Struct {
			if sf, ok := jsonField(f.t, name); ok {
				name = sf.Name
			}
		}
		path = joinPath(path, name)
	}
	return path
}
