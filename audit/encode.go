package audit

import (
	"slices"
	"strconv"
	"time"

	"github.com/berth-dev/berth"
)

// appendRecord appends r as encoding/json's Marshal writes it, byte for
// byte (the tests hold it to that), without reflection: the audit log is
// written once per change and must not slow the controller down.
func appendRecord(buf []byte, r *Record) []byte {
	return appendRecordWith(buf, r, func(buf []byte) []byte { return appendFields(buf, r.Fields) })
}

// appendRecordWith is appendRecord with the fields written by fields,
// which appends ,"fields":{…} or nothing; r.Fields is not read.
func appendRecordWith(buf []byte, r *Record, fields func(buf []byte) []byte) []byte {
	buf = append(buf, `{"seq":`...)
	buf = strconv.AppendUint(buf, r.Seq, 10)
	buf = append(buf, `,"time":"`...)
	buf = r.Time.AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","action":`...)
	buf = berth.AppendJSONString(buf, r.Action)
	for _, f := range [...]struct{ name, value string }{{"actor", r.Actor}, {"role", r.Role}, {"target", r.Target}} {
		if f.value != "" {
			buf = append(append(append(buf, ',', '"'), f.name...), `":`...)
			buf = berth.AppendJSONString(buf, f.value)
		}
	}
	buf = fields(buf)
	buf = append(buf, `,"prev":`...)
	buf = berth.AppendJSONString(buf, r.Prev)
	return append(buf, '}')
}

// appendFields appends ,"fields":{…} with fields' keys sorted, as Marshal
// writes a map, or nothing for no fields (omitempty).
func appendFields(buf []byte, fields map[string]string) []byte {
	if len(fields) == 0 {
		return buf
	}
	buf = append(buf, `,"fields":{`...)
	var room [16]string // a record's fields fit, without an allocation
	keys := room[:0]
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(berth.AppendJSONString(buf, k), ':')
		buf = berth.AppendJSONString(buf, fields[k])
	}
	return append(buf, '}')
}
