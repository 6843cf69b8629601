package controller

import (
	"context"
	"fmt"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// OpenStream asks the agent running member rank of job id to open the
// stream m (see wire.StreamOpen), whose AttemptID it sets, and returns
// that member's worker host: the only host whose agent may then dial the
// stream. A job that is not running, or whose member rank has not started
// or has ended, is ECodeConflict naming its state; a rank past the job's
// nodes is invalid on field rank; a member whose agent is not connected
// is ECodeUnavailable; an unknown job is ECodeNotFound. A nil m checks
// all that and sends nothing.
func (c *Controller) OpenStream(ctx context.Context, id string, rank int, m *wire.StreamOpen) (host string, err error) {
	var state berth.JobState
	if err := c.do(ctx, func() {
		js := c.jobs[id]
		if js == nil {
			return
		}
		state = js.view().State
		switch {
		case rank < 0 || rank >= js.view().Nodes:
			err = berth.Invalidf("rank", "job %s has %d node(s): rank must be 0 to %d", id, js.view().Nodes, js.view().Nodes-1)
		case state != berth.JobRunning:
		case rank >= len(js.members) || js.members[rank] == nil || js.members[rank].a.State != berth.AttemptRunning:
			err = &berth.Error{Code: berth.ECodeConflict, Field: "rank", Message: fmt.Sprintf("member %d of job %s is not running", rank, id)}
		case js.members[rank].worker.sess == nil:
			ws := js.members[rank].worker
			err = berth.Errorf(berth.ECodeUnavailable, "the agent of worker %s, where member %d of job %s runs, is not connected", ws.w.Host, rank, id)
		default:
			as := js.members[rank]
			host = as.worker.w.Host
			if m != nil {
				m.AttemptID = as.a.ID
				as.worker.sess.send(wire.TypeStreamOpen, m)
			}
		}
	}); err != nil {
		return "", err
	}
	if err != nil || host != "" {
		return host, err
	}
	if state == "" { // no longer active: its state is in the store
		j, err := c.store.Job(ctx, id)
		if err != nil {
			return "", err
		}
		state = j.State
	}
	return "", &berth.Error{Code: berth.ECodeConflict, Field: "id", Message: fmt.Sprintf("job %s is %s, not running", id, state)}
}
