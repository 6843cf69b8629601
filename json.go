package berth

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends e as encoding/json's Marshal writes it, byte for byte
// (the tests hold it to that), without reflection: every event is encoded
// once more for the store, on the writer's path. It fails where Marshal
// does: on a time it cannot write.
func (e *Event) AppendJSON(buf []byte) ([]byte, error) {
	buf = append(buf, `{"seq":`...)
	buf = strconv.AppendUint(buf, e.Seq, 10)
	// The time as MarshalJSON writes it, without the slice it makes.
	buf, err := e.Time.AppendText(append(buf, `,"time":"`...))
	if err != nil {
		return nil, fmt.Errorf("encode event time: %w", err)
	}
	buf = append(buf, '"')
	buf = append(buf, `,"type":`...)
	buf = AppendJSONString(buf, e.Type)
	for _, f := range [...]struct{ name, value string }{{"job_id", e.JobID}, {"name", e.Name}, {"state", string(e.State)},
		{"worker_id", e.WorkerID}, {"host", e.Host}, {"reason", e.Reason}} {
		buf = appendStringField(buf, f.name, f.value)
	}
	if e.ExitCode != nil {
		buf = strconv.AppendInt(append(buf, `,"exit_code":`...), int64(*e.ExitCode), 10)
	}
	for _, f := range [...]struct{ name, value string }{{"quota", e.Quota}, {"limits", e.Limits}, {"actor", e.Actor}, {"user", e.User}} {
		buf = appendStringField(buf, f.name, f.value)
	}
	buf = appendIntField(buf, "requested", e.Requested)
	buf = appendIntField(buf, "limit", e.Limit)
	for _, f := range [...]struct{ name, value string }{{"queue", e.Queue}, {"desired", e.Desired}, {"policy", e.Policy}} {
		buf = appendStringField(buf, f.name, f.value)
	}
	if len(e.Attempts) > 0 {
		buf = append(buf, `,"attempts":[`...)
		for i, a := range e.Attempts {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = AppendJSONString(buf, a)
		}
		buf = append(buf, ']')
	}
	for _, f := range [...]struct{ name, value string }{{"peer", e.Peer}, {"pool", e.Pool}, {"instance", e.Instance}} {
		buf = appendStringField(buf, f.name, f.value)
	}
	buf = appendIntField(buf, "count", e.Count)
	return append(buf, '}'), nil
}

// appendStringField appends ,"name":value unless value is empty
// (omitempty).
func appendStringField(buf []byte, name, value string) []byte {
	if value == "" {
		return buf
	}
	buf = append(append(append(buf, ',', '"'), name...), `":`...)
	return AppendJSONString(buf, value)
}

// appendIntField appends ,"name":value unless value is 0 (omitempty).
func appendIntField(buf []byte, name string, value int) []byte {
	if value == 0 {
		return buf
	}
	buf = append(append(append(buf, ',', '"'), name...), `":`...)
	return strconv.AppendInt(buf, int64(value), 10)
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

// AppendJSONString appends s as a JSON string the way encoding/json
// does: HTML-safe escapes, U+2028 and U+2029 escaped, invalid UTF-8
// replaced with U+FFFD.
func AppendJSONString(buf []byte, s string) []byte {
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
