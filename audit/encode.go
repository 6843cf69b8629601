package audit

import (
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendRecord appends r as encoding/json's Marshal writes it, byte for
// byte (the tests hold it to that), without reflection: the audit log is
// written once per change and must not slow the controller down.
func appendRecord(buf []byte, r *Record) []byte {
	buf = append(buf, `{"seq":`...)
	buf = strconv.AppendUint(buf, r.Seq, 10)
	buf = append(buf, `,"time":"`...)
	buf = r.Time.AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","action":`...)
	buf = appendString(buf, r.Action)
	for _, f := range [...]struct{ name, value string }{{"actor", r.Actor}, {"role", r.Role}, {"target", r.Target}} {
		if f.value != "" {
			buf = append(append(append(buf, ',', '"'), f.name...), `":`...)
			buf = appendString(buf, f.value)
		}
	}
	if len(r.Fields) > 0 {
		buf = append(buf, `,"fields":{`...)
		var room [16]string // a record's fields fit, without an allocation
		keys := room[:0]
		for k := range r.Fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(appendString(buf, k), ':')
			buf = appendString(buf, r.Fields[k])
		}
		buf = append(buf, '}')
	}
	buf = append(buf, `,"prev":`...)
	buf = appendString(buf, r.Prev)
	return append(buf, '}')
}

const hexDigits = "0123456789abcdef"

// plain says which ASCII bytes a JSON string holds as they are: all but
// control characters, the quote, the backslash and the HTML-unsafe <, >, &.
var plain = func() (set [utf8.RuneSelf]bool) {
	for b := byte(0x20); b < utf8.RuneSelf; b++ {
		set[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return set
}()

// appendString appends s as a JSON string the way encoding/json does:
// HTML-safe escapes, U+2028 and U+2029 escaped, invalid UTF-8 replaced
// with U+FFFD.
func appendString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if plain[b] {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch b {
			case '\\', '"':
				buf = append(buf, '\\', b)
			case '\b':
				buf = append(buf, '\\', 'b')
			case '\f':
				buf = append(buf, '\\', 'f')
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(append(buf, s[start:i]...), `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			buf = append(append(buf, s[start:i]...), '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(append(buf, s[start:]...), '"')
}
