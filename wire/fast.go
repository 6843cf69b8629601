package wire

import (
	"bytes"
	"slices"
	"time"
)

// The messages of every job's path (job_assign, job_accepted, job_result
// and the ack of a result) are decoded here without reflection when their
// payload is spelled as encoding/json writes it: one object, no spaces,
// known keys each once, strings of ASCII, integers, and no null. Anything
// else (an unknown or repeated key, a nested object, a character beyond
// ASCII, a fraction) makes a fast decoder give up, and Decode falls back
// to encoding/json, so the result is always the one encoding/json gives;
// FuzzDecodeFrame holds the two to that.

// fastDecoders are the fast decoders, by message type.
var fastDecoders = map[string]func([]byte) (any, bool){
	TypeJobAccepted: func(p []byte) (any, bool) {
		m := &JobAccepted{}
		return m, decodeObject(p, func(d *scan, key []byte) bool {
			switch string(key) {
			case "attempt_id":
				return d.str(&m.AttemptID)
			}
			return false
		})
	},
	TypeJobResult: func(p []byte) (any, bool) {
		m := &JobResult{}
		return m, decodeObject(p, func(d *scan, key []byte) bool {
			switch string(key) {
			case "attempt_id":
				return d.str(&m.AttemptID)
			case "state":
				return d.str((*string)(&m.State))
			case "exit_code":
				return d.intPointer(&m.ExitCode)
			case "reason":
				return d.str(&m.Reason)
			case "cause":
				return d.str(&m.Cause)
			case "log_size":
				return d.int64(&m.LogSize)
			case "class":
				return d.str(&m.Class)
			}
			return false
		})
	},
	TypeAck: func(p []byte) (any, bool) {
		m := &Ack{}
		return m, decodeObject(p, func(d *scan, key []byte) bool {
			switch string(key) {
			case "of":
				return d.str(&m.Of)
			case "attempt_id":
				return d.str(&m.AttemptID)
			case "offset":
				return d.int64(&m.Offset)
			case "keep":
				return d.strs(&m.Keep)
			case "kill":
				return d.strs(&m.Kill)
			case "lease":
				return d.duration(&m.Lease)
			case "heartbeat":
				return d.duration(&m.Heartbeat)
			case "resend":
				return d.bool(&m.Resend)
			case "error":
				return d.str(&m.Error)
			}
			return false
		})
	},
	TypeJobAssign: func(p []byte) (any, bool) {
		m := &JobAssign{}
		return m, decodeObject(p, func(d *scan, key []byte) bool {
			switch string(key) {
			case "attempt_id":
				return d.str(&m.AttemptID)
			case "job_id":
				return d.str(&m.JobID)
			case "task_index":
				return d.int(&m.TaskIndex)
			case "array_index":
				return d.intPointer(&m.ArrayIndex)
			case "job_name":
				return d.str(&m.JobName)
			case "user":
				return d.str(&m.User)
			case "attempt":
				return d.int(&m.Attempt)
			case "queue":
				return d.str(&m.Queue)
			case "command":
				return d.strs(&m.Command)
			case "env":
				return d.strMap(&m.Env)
			case "workdir":
				return d.str(&m.Workdir)
			case "gpus":
				return d.ints(&m.GPUs)
			case "memory":
				return d.int64((*int64)(&m.Memory))
			case "max_runtime":
				return d.duration(&m.MaxRuntime)
			case "stall_timeout":
				return d.duration(&m.StallTimeout)
			case "grace":
				return d.duration(&m.Grace)
			case "model":
				return d.str(&m.Model)
			case "secrets":
				return d.strMap(&m.Secrets)
			}
			return false
		})
	},
}

// scan reads a payload from its start; each method reads one value at
// the cursor, or reports false (and the caller gives up) if the value is
// not one it reads.
type scan struct {
	b []byte
	i int
}

// decodeObject reads p as one object, handing each key to field, which
// reads its value. It reports false if p is not an object as encoding/json
// writes it, if a key repeats, or if field gives up on one.
func decodeObject(p []byte, field func(d *scan, key []byte) bool) bool {
	d := &scan{b: p}
	var seen [24][]byte // at least as many as the keys of the largest message read
	n := 0
	return d.object(func(key []byte) bool {
		if n == len(seen) || slices.ContainsFunc(seen[:n], func(k []byte) bool { return bytes.Equal(k, key) }) {
			return false
		}
		seen[n] = key
		n++
		return field(d, key)
	}) && d.i == len(p)
}

// object reads an object, handing each key (plain ASCII, no escapes) to
// field, which reads its value.
func (d *scan) object(field func(key []byte) bool) bool {
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return true
	}
	for {
		key, ok := d.plain()
		if !ok || !d.byte(':') || !field(key) {
			return false
		}
		if d.byte('}') {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}

// plain reads a string of printable ASCII without escapes, returning its
// bytes in the payload.
func (d *scan) plain() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	for start := d.i; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// byte consumes c if it is next.
func (d *scan) byte(c byte) bool {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// str reads a string of printable ASCII, with JSON's escapes of ASCII
// (encoding/json writes <, > and & as \u003c, \u003e and \u0026).
func (d *scan) str(v *string) bool {
	if !d.byte('"') {
		return false
	}
	start := d.i
	var buf []byte // the string so far, once it has an escape
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			if buf == nil {
				*v = string(d.b[start:d.i])
			} else {
				*v = string(buf)
			}
			d.i++
			return true
		case c == '\\':
			if buf == nil {
				buf = append([]byte(nil), d.b[start:d.i]...)
			}
			e, n := unescape(d.b[d.i:])
			if n == 0 {
				return false
			}
			buf = append(buf, e)
			d.i += n
			continue
		case c < 0x20 || c >= 0x7f:
			return false
		}
		if buf != nil {
			buf = append(buf, c)
		}
		d.i++
	}
	return false
}

// unescape returns the ASCII byte the escape at the start of b stands
// for, and its length; 0 for an escape of anything else, or none.
func unescape(b []byte) (byte, int) {
	if len(b) < 2 {
		return 0, 0
	}
	switch b[1] {
	case '"', '\\', '/':
		return b[1], 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		if len(b) < 6 {
			return 0, 0
		}
		var r uint32
		for _, h := range b[2:6] {
			switch {
			case h >= '0' && h <= '9':
				r = r<<4 | uint32(h-'0')
			case h >= 'a' && h <= 'f':
				r = r<<4 | uint32(h-'a'+10)
			case h >= 'A' && h <= 'F':
				r = r<<4 | uint32(h-'A'+10)
			default:
				return 0, 0
			}
		}
		if r >= 0x80 {
			return 0, 0
		}
		return byte(r), 6
	}
	return 0, 0
}

// int64 reads an integer in range: an optional minus, then 0 or digits
// not starting with 0, and no fraction or exponent.
func (d *scan) int64(v *int64) bool {
	neg := d.byte('-')
	start := d.i
	var n uint64
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		if n > (1<<63)/10 {
			return false
		}
		n = n*10 + uint64(d.b[d.i]-'0')
		d.i++
	}
	digits := d.i - start
	switch {
	case digits == 0 || (digits > 1 && d.b[start] == '0'):
		return false
	case d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E'):
		return false
	case neg && n > 1<<63, !neg && n > 1<<63-1:
		return false
	}
	*v = int64(n)
	if neg {
		*v = -*v
	}
	return true
}

func (d *scan) int(v *int) bool {
	var n int64
	ok := d.int64(&n)
	*v = int(n)
	return ok
}

func (d *scan) intPointer(v **int) bool {
	n := new(int)
	*v = n
	return d.int(n)
}

func (d *scan) duration(v *time.Duration) bool { return d.int64((*int64)(v)) }

func (d *scan) bool(v *bool) bool {
	rest := d.b[d.i:]
	switch {
	case bytes.HasPrefix(rest, []byte("true")):
		d.i += 4
		*v = true
	case bytes.HasPrefix(rest, []byte("false")):
		d.i += 5
		*v = false
	default:
		return false
	}
	return true
}

// list reads an array, each element with elem.
func (d *scan) list(elem func() bool) bool {
	if !d.byte('[') {
		return false
	}
	if d.byte(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.byte(']') {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}

// strs reads an array of strings; an empty one is an empty, non-nil
// slice, as encoding/json makes it.
func (d *scan) strs(v *[]string) bool {
	*v = []string{}
	return d.list(func() bool {
		*v = append(*v, "")
		return d.str(&(*v)[len(*v)-1])
	})
}

// ints reads an array of integers, as strs does strings.
func (d *scan) ints(v *[]int) bool {
	*v = []int{}
	return d.list(func() bool {
		*v = append(*v, 0)
		return d.int(&(*v)[len(*v)-1])
	})
}

// strMap reads an object of strings, each key once.
func (d *scan) strMap(v *map[string]string) bool {
	m := map[string]string{}
	*v = m
	return d.object(func(key []byte) bool {
		var s string
		if _, dup := m[string(key)]; dup || !d.str(&s) {
			return false
		}
		m[string(key)] = s
		return true
	})
}
