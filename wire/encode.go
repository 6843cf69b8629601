package wire

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/berth-dev/berth"
)

// The messages of every job's path (job_assign, job_accepted, job_result
// and the acks) are encoded here without reflection, byte for byte as
// encoding/json's Marshal writes them (TestFastEncodersAsMarshal holds
// them to that): each is sent once per job and reflection was most of
// their cost. What these leave to Marshal (a service, a control, a CPU
// count JSON cannot hold) is rare.

// appendFast appends payload's JSON to buf as Marshal writes it and
// reports true, or leaves buf as it is and reports false for a payload it
// leaves to Marshal.
func appendFast(buf []byte, payload any) ([]byte, bool) {
	switch m := payload.(type) {
	case *JobAssign:
		if m != nil && m.Service == nil && finite(m.CPUs) {
			return m.appendJSON(buf), true
		}
	case *JobAccepted:
		if m != nil {
			return m.appendJSON(buf), true
		}
	case *JobResult:
		if m != nil {
			return m.appendJSON(buf), true
		}
	case *Ack:
		if m != nil && m.Control == nil {
			return m.appendJSON(buf), true
		}
	}
	return buf, false
}

func finite(f float64) bool { return !math.IsInf(f, 0) && !math.IsNaN(f) }

func (m *JobAssign) appendJSON(buf []byte) []byte {
	o := open(buf)
	o.str("attempt_id", m.AttemptID)
	o.str("job_id", m.JobID)
	o.int("task_index", int64(m.TaskIndex))
	o.optIntPointer("array_index", m.ArrayIndex)
	o.optStr("job_name", m.JobName)
	o.optStr("user", m.User)
	o.optInt("attempt", int64(m.Attempt))
	o.str("queue", m.Queue)
	o.strs("command", m.Command)
	o.optStrMap("env", m.Env)
	o.optStr("workdir", m.Workdir)
	if len(m.GPUs) > 0 {
		o.key("gpus")
		o.b = append(o.b, '[')
		for i, g := range m.GPUs {
			if i > 0 {
				o.b = append(o.b, ',')
			}
			o.b = strconv.AppendInt(o.b, int64(g), 10)
		}
		o.b = append(o.b, ']')
	}
	o.optInt("gpu_milli", int64(m.GPUMilli))
	o.optInt("gpu_memory", int64(m.GPUMemory))
	if m.CPUs != 0 {
		o.key("cpus")
		o.b = appendFloat(o.b, m.CPUs)
	}
	o.optInt("memory", int64(m.Memory))
	o.optDuration("max_runtime", m.MaxRuntime)
	o.optDuration("stall_timeout", m.StallTimeout)
	o.optDuration("grace", m.Grace)
	o.optInt("rendezvous_port", int64(m.RendezvousPort))
	o.optStr("model", m.Model)
	o.optStrMap("secrets", m.Secrets)
	return o.end()
}

func (m *JobAccepted) appendJSON(buf []byte) []byte {
	o := open(buf)
	o.str("attempt_id", m.AttemptID)
	return o.end()
}

func (m *JobResult) appendJSON(buf []byte) []byte {
	o := open(buf)
	o.str("attempt_id", m.AttemptID)
	o.str("state", string(m.State))
	o.optIntPointer("exit_code", m.ExitCode)
	o.optStr("reason", m.Reason)
	o.optStr("cause", m.Cause)
	o.int("log_size", m.LogSize)
	o.optStr("class", m.Class)
	return o.end()
}

func (m *Ack) appendJSON(buf []byte) []byte {
	o := open(buf)
	o.str("of", m.Of)
	o.optStr("attempt_id", m.AttemptID)
	o.optInt("offset", m.Offset)
	if len(m.Keep) > 0 {
		o.strs("keep", m.Keep)
	}
	if len(m.Kill) > 0 {
		o.strs("kill", m.Kill)
	}
	o.optDuration("lease", m.Lease)
	o.optDuration("heartbeat", m.Heartbeat)
	if m.Resend {
		o.key("resend")
		o.b = append(o.b, "true"...)
	}
	o.optStr("error", m.Error)
	return o.end()
}

// object writes a JSON object's fields in order; the caller appends the
// closing brace. Keys are written as they are (they need no escaping).
type object struct {
	b      []byte
	fields int
}

// open starts an object at the end of buf.
func open(buf []byte) object { return object{b: append(buf, '{')} }

// key writes the comma before any field but the first, and its key.
func (o *object) key(name string) {
	if o.fields > 0 {
		o.b = append(o.b, ',')
	}
	o.fields++
	o.b = append(append(append(o.b, '"'), name...), '"', ':')
}

func (o *object) str(name, v string) {
	o.key(name)
	o.b = berth.AppendJSONString(o.b, v)
}

func (o *object) optStr(name, v string) {
	if v != "" {
		o.str(name, v)
	}
}

func (o *object) int(name string, v int64) {
	o.key(name)
	o.b = strconv.AppendInt(o.b, v, 10)
}

func (o *object) optInt(name string, v int64) {
	if v != 0 {
		o.int(name, v)
	}
}

// optIntPointer writes *v unless v is nil.
func (o *object) optIntPointer(name string, v *int) {
	if v != nil {
		o.int(name, int64(*v))
	}
}

// end closes the object and returns the buffer.
func (o *object) end() []byte { return append(o.b, '}') }

func (o *object) optDuration(name string, v time.Duration) { o.optInt(name, int64(v)) }

// strs writes a list of strings, null for a nil one.
func (o *object) strs(name string, v []string) {
	o.key(name)
	if v == nil {
		o.b = append(o.b, "null"...)
		return
	}
	o.b = append(o.b, '[')
	for i, s := range v {
		if i > 0 {
			o.b = append(o.b, ',')
		}
		o.b = berth.AppendJSONString(o.b, s)
	}
	o.b = append(o.b, ']')
}

// optStrMap writes a map of strings, keys sorted, unless it is empty.
func (o *object) optStrMap(name string, v map[string]string) {
	if len(v) == 0 {
		return
	}
	o.key(name)
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	o.b = append(o.b, '{')
	for i, k := range keys {
		if i > 0 {
			o.b = append(o.b, ',')
		}
		o.b = append(berth.AppendJSONString(o.b, k), ':')
		o.b = berth.AppendJSONString(o.b, v[k])
	}
	o.b = append(o.b, '}')
}

// appendFloat writes a finite float as encoding/json does: the shortest
// decimal that reads back as f, in exponent form below 1e-6 and from 1e21
// on, with a one-digit negative exponent written without its zero.
func appendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
