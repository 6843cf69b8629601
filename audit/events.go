package audit

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// RecordEvents appends one record for each of the controller's events and
// returns once they are durable, as Append does (it is the controller's
// Auditor). Each record is written from its event directly, as appending
// its FromEvent writes it (the tests hold it to that), without the map of
// fields: the log takes several events a job.
func (l *Log) RecordEvents(events []*berth.Event) error {
	return l.append(len(events), func(buf []byte, i int, seq uint64) ([]byte, string) {
		e := events[i]
		if e.Type == "" {
			return buf, ""
		}
		t := e.Time
		if t.IsZero() {
			t = l.now()
		}
		return appendEventRecord(buf, seq, t.UTC(), e), e.Type
	})
}

// appendEventRecord appends the record of e, numbered seq at t, with
// ZeroHash as its prev, as appendRecord writes FromEvent's entry.
func appendEventRecord(buf []byte, seq uint64, t time.Time, e *berth.Event) []byte {
	r := Record{Seq: seq, Time: t, Action: e.Type, Actor: e.Actor, Target: eventTarget(e), Prev: ZeroHash}
	return appendRecordWith(buf, &r, func(buf []byte) []byte {
		fields := 0
		eventFields(e, func(k, s string, isNum bool, n int64) {
			if fields == 0 {
				buf = append(buf, `,"fields":{`...)
			} else {
				buf = append(buf, ',')
			}
			fields++
			buf = append(berth.AppendJSONString(buf, k), ':')
			if isNum {
				buf = append(strconv.AppendInt(append(buf, '"'), n, 10), '"') // digits need no escaping
			} else {
				buf = berth.AppendJSONString(buf, s)
			}
		})
		if fields > 0 {
			buf = append(buf, '}')
		}
		return buf
	})
}

// FromEvent returns the audit entry of a controller event: its type is
// the action, the job, worker or quota rule it is about the target, and
// its other fields the entry's fields.
func FromEvent(e *berth.Event) Entry {
	en := Entry{Time: e.Time, Action: e.Type, Actor: e.Actor, Target: eventTarget(e), Fields: map[string]string{}}
	eventFields(e, func(k, s string, isNum bool, n int64) {
		if isNum {
			s = strconv.FormatInt(n, 10)
		}
		en.Fields[k] = s
	})
	return en
}

// eventTarget is what e is about: its job, quota rule, worker, peer or
// pool, or "" for none.
func eventTarget(e *berth.Event) string {
	switch {
	case e.JobID != "":
		return "job/" + e.JobID
	case e.Quota != "":
		return "quota/" + e.Quota
	case e.Host != "":
		return "worker/" + e.Host
	case e.Peer != "":
		return "peer/" + e.Peer
	case e.Pool != "":
		return "pool/" + e.Pool
	}
	return ""
}

// eventFields calls field with each field of e's record that is not
// empty, in key order: its text in s, or for a number (isNum) the number
// in n, written as its decimal.
func eventFields(e *berth.Event, field func(k, s string, isNum bool, n int64)) {
	num := func(k string, n int64) { field(k, "", true, n) }
	str := func(k, s string) {
		if s != "" {
			field(k, s, false, 0)
		}
	}
	if len(e.Attempts) > 0 {
		str("attempts", strings.Join(e.Attempts, ","))
	}
	if e.Count != 0 {
		num("count", int64(e.Count))
	}
	str("desired", e.Desired)
	switch { // events published on the stream are numbered
	case e.Seq > math.MaxInt64:
		str("event_seq", strconv.FormatUint(e.Seq, 10))
	case e.Seq != 0:
		num("event_seq", int64(e.Seq))
	}
	if e.ExitCode != nil {
		num("exit_code", int64(*e.ExitCode))
	}
	str("host", e.Host)
	str("instance", e.Instance)
	held := e.Requested != 0 || e.Limit != 0
	if held {
		num("limit", int64(e.Limit))
	}
	str("limits", e.Limits)
	str("policy", e.Policy)
	str("queue", e.Queue)
	str("reason", e.Reason)
	if held {
		num("requested", int64(e.Requested))
	}
	str("state", string(e.State))
	str("user", e.User)
	str("worker_id", e.WorkerID)
}
