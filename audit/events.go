package audit

import (
	"strconv"
	"strings"

	"github.com/berth-dev/berth"
)

// RecordEvents appends one record for each of the controller's events and
// returns once they are durable, as Append does (it is the controller's
// Auditor).
func (l *Log) RecordEvents(events []berth.Event) error {
	en := Entry{Fields: map[string]string{}} // reused: one event at a time
	return l.append(len(events), func(i int) *Entry {
		fromEvent(&en, &events[i])
		return &en
	})
}

// FromEvent returns the audit entry of a controller event: its type is
// the action, the job, worker or quota rule it is about the target, and
// its other fields the entry's fields.
func FromEvent(e *berth.Event) Entry {
	en := Entry{Fields: map[string]string{}}
	fromEvent(&en, e)
	return en
}

// fromEvent sets en to FromEvent(e), reusing en's Fields map.
func fromEvent(en *Entry, e *berth.Event) {
	fields := en.Fields
	clear(fields)
	*en = Entry{Time: e.Time, Action: e.Type, Actor: e.Actor, Fields: fields}
	switch {
	case e.JobID != "":
		en.Target = "job/" + e.JobID
	case e.Quota != "":
		en.Target = "quota/" + e.Quota
	case e.Host != "":
		en.Target = "worker/" + e.Host
	case e.Peer != "":
		en.Target = "peer/" + e.Peer
	case e.Pool != "":
		en.Target = "pool/" + e.Pool
	}
	set := func(k, v string) {
		if v != "" {
			en.Fields[k] = v
		}
	}
	if e.Seq != 0 { // events published on the stream are numbered
		set("event_seq", strconv.FormatUint(e.Seq, 10))
	}
	set("state", string(e.State))
	set("worker_id", e.WorkerID)
	set("host", e.Host)
	set("reason", e.Reason)
	if e.ExitCode != nil {
		set("exit_code", strconv.Itoa(*e.ExitCode))
	}
	set("limits", e.Limits)
	set("user", e.User)
	set("queue", e.Queue)
	set("desired", e.Desired)
	set("policy", e.Policy)
	set("attempts", strings.Join(e.Attempts, ","))
	set("instance", e.Instance)
	if e.Count != 0 {
		set("count", strconv.Itoa(e.Count))
	}
	if e.Requested != 0 || e.Limit != 0 {
		set("requested", strconv.Itoa(e.Requested))
		set("limit", strconv.Itoa(e.Limit))
	}
}
