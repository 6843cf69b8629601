package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/wire"
)

// Conn is one agent's message connection (a WebSocket in production).
type Conn interface {
	// Read returns the next frame, which may share memory with the frame
	// after it: it is valid until the next Read.
	Read(ctx context.Context) ([]byte, error)
	// Write sends one frame. The caller may reuse frame once Write
	// returns.
	Write(ctx context.Context, frame []byte) error
	// Close ends the connection, telling the peer why. It may wait on the
	// peer (a WebSocket waits a bounded time for the close reply), so the
	// controller calls it from the session's writer, never from its loop.
	Close(reason string) error
}

// session is one connected agent. send and close are safe from any
// goroutine and never block: the session's writer writes the outbox in
// order, batched into frames, each within a deadline, and hangs up once
// the session is closed. Nothing the loop does waits on the peer.
type session struct {
	conn    Conn
	out     *wire.Outbox
	worker  *workerState // set by register, loop-owned
	refused bool         // register was refused; loop-owned
	host    string       // the only host this session may register as; "" for any

	closed    chan struct{}
	once      sync.Once
	reason    string
	lastWords string // why the session closes once its last message is written
}

func newSession(conn Conn, host string) *session {
	return &session{conn: conn, host: host, out: wire.NewOutbox(0), closed: make(chan struct{})}
}

func (s *session) send(typ string, payload any) {
	_ = s.out.Send(context.Background(), typ, payload) // never waits: no limit
}

// sendAndClose sends one last message and then closes the session with
// reason, so that the peer reads why before the close. Loop only.
func (s *session) sendAndClose(typ string, payload any, reason string) {
	s.lastWords = reason
	s.out.SendLast(typ, payload)
}

// close marks the session closed with reason; the writer then stops and
// hangs up. It returns at once.
func (s *session) close(reason string) {
	s.once.Do(func() {
		s.reason = reason
		close(s.closed)
	})
}

// writer runs the outbox until the session closes or ctx ends, each write
// within timeout, and then closes the connection, off the loop: a peer
// that stops reading (a frozen agent) delays only its own session.
func (s *session) writer(ctx context.Context, timeout time.Duration, log func(string, ...any)) {
	run, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-s.closed:
			stop()
		case <-run.Done():
		}
	}()
	err := s.out.Run(run, func(ctx context.Context, frame []byte) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return s.conn.Write(ctx, frame)
	})
	switch {
	case err == nil:
		s.close(s.lastWords)
	case run.Err() == nil:
		log("agent write failed", "err", err)
		s.close("write failed")
	default:
		s.close("session ended")
	}
	_ = s.conn.Close(s.reason)
}

// ServeAgent runs one agent session over conn until it closes. Malformed or
// out-of-order messages close this session only. A non-empty host is the
// only host the agent may register as (its credential's), and then only
// as a worker id not registered for another host.
func (c *Controller) ServeAgent(ctx context.Context, conn Conn, host string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := newSession(conn, host)
	// A write blocked longer than the lease and its margin is a peer the
	// lease check has given up on.
	go s.writer(ctx, c.cfg.Lease+c.cfg.FenceMargin, c.log.Warn)
	defer func() {
		s.close("session ended")
		_ = c.post(context.Background(), func() { c.disconnected(s) })
	}()
	for {
		frame, err := conn.Read(ctx)
		if err != nil {
			select {
			case <-s.closed:
				return fmt.Errorf("agent session closed: %s", s.reason)
			default:
			}
			return fmt.Errorf("read agent message: %w", err)
		}
		msgs, err := wire.DecodeFrame(frame)
		if err != nil {
			s.close(err.Error())
			return err
		}
		if err := c.post(ctx, func() {
			for _, m := range msgs {
				c.handle(s, m.Type, m.Body)
			}
		}); err != nil {
			s.close("server stopping")
			return err
		}
	}
}

// refusal says why a session bound to a host may not register as m
// (existing is the worker m names, if known), or "" when it may.
func (s *session) refusal(m *wire.Register, existing *workerState) string {
	switch {
	case s.host == "":
		return ""
	case m.Host != s.host:
		return fmt.Sprintf("this agent credential is for host %s, not %s", s.host, m.Host)
	case existing != nil && existing.w.Host != s.host:
		return fmt.Sprintf("worker %s belongs to host %s; this agent credential is for host %s", m.WorkerID, existing.w.Host, s.host)
	}
	return ""
}

// protocolError closes a session that broke the protocol.
func (c *Controller) protocolError(s *session, format string, args ...any) {
	reason := fmt.Sprintf(format, args...)
	c.log.Warn("closing agent session", "reason", reason)
	s.close(reason)
}

func (c *Controller) handle(s *session, typ string, msg any) {
	select {
	case <-s.closed:
		return
	default:
	}
	if s.refused {
		return // closing once the refusal is written
	}
	if s.worker == nil && typ != wire.TypeRegister {
		c.protocolError(s, "first message must be register, got %s", typ)
		return
	}
	if s.worker != nil {
		s.worker.lastSeen = c.now().UnixNano()
	}
	switch m := msg.(type) {
	case *wire.Register:
		c.onRegister(s, m)
	case *wire.Heartbeat:
		c.onHeartbeat(s, m)
	case *wire.ServiceStatus:
		c.onServiceStatus(s, m)
	case *wire.ReadyForWork:
		c.readyForWork(s)
	case *wire.JobAccepted:
		c.onAccepted(s, m)
	case *wire.Log:
		c.onLog(s, m)
	case *wire.JobResult:
		c.onResult(s, m)
	case *wire.Progress:
		c.onProgress(s, m)
	default:
		c.protocolError(s, "agents may not send %s", typ)
	}
}

func (c *Controller) onRegister(s *session, m *wire.Register) {
	switch {
	case s.worker != nil:
		c.protocolError(s, "register sent twice")
		return
	case m.Version != wire.Version:
		// Tell the agent why, then close: the ack must be written first.
		reason := fmt.Sprintf("protocol version %d not supported; server speaks %d", m.Version, wire.Version)
		c.log.Warn("closing agent session", "reason", reason)
		s.refused = true
		s.sendAndClose(wire.TypeAck, &wire.Ack{Of: wire.AckRegister, Error: reason}, reason)
		return
	case m.WorkerID == "" || m.Host == "" || len(m.WorkerID) > 128 || len(m.Host) > 253:
		c.protocolError(s, "register needs worker_id and host")
		return
	case m.Slots < 1 || m.CPUs < 0 || m.Memory < 0 || len(m.GPUs) > berth.MaxGPUsPerWorker || !berth.ValidIsolation(m.Isolation):
		c.protocolError(s, "register has invalid capacity")
		return
	}
	reason := s.refusal(m, c.workers[m.WorkerID])
	if err := berth.ValidAdvertise("advertise", m.Advertise); m.Advertise != "" && err != nil && reason == "" {
		reason = err.Error()
	}
	if reason != "" {
		c.log.Warn("refusing agent registration", "reason", reason)
		s.refused = true
		s.sendAndClose(wire.TypeAck, &wire.Ack{Of: wire.AckRegister, Error: reason}, reason)
		return
	}
	now := c.now().UTC()
	ws := c.workers[m.WorkerID]
	if ws == nil {
		ws = newWorkerState(&berth.Worker{ID: m.WorkerID, RegisteredAt: now})
		c.addWorker(ws)
	}
	if old := ws.sess; old != nil && old != s {
		old.worker = nil
		old.close("replaced by a new session of the same worker")
	}
	w := ws.w
	w.Host, w.Advertise, w.Queues, w.GPUs, w.CPUs, w.Memory, w.Slots, w.Labels, w.Version, w.Isolation =
		m.Host, m.Advertise, m.Queues, m.GPUs, m.CPUs, m.Memory, m.Slots, m.Labels, m.Agent, m.Isolation
	w.State, w.LastHeartbeat, w.RegisteredAt = berth.WorkerReady, now, now
	ws.sess, ws.lastSeen = s, now.UnixNano()
	s.worker = ws

	ack := &wire.Ack{Of: wire.AckRegister, Lease: c.cfg.Lease, Heartbeat: c.cfg.Heartbeat}
	ack.Keep, ack.Kill = c.pool.Reconcile(w.ID, m.Running, m.Finished, now)
	ws.faulty = nil
	ws.sched.Models = m.Models
	c.applyControl(ws)
	c.write(&store.Batch{Workers: []*berth.Worker{c.workerCopy(ws)}})
	ctl := c.wireControl(w.Host, ws)
	// Published before the ack is sent, so that whoever holds the ack
	// also sees the event.
	c.emit(berth.Event{Time: now, Type: berth.EventWorkerRegistered, WorkerID: w.ID, Host: w.Host})
	c.sendAfterCommit(s, wire.TypeAck, ack)
	c.sendAfterCommit(s, wire.TypeControl, ctl)
	for _, as := range ws.attempts {
		if why := as.stopReason(); why != "" {
			c.sendCancel(as, why)
		}
	}
	c.dirty = c.dirty || c.queue.Len() > 0 // new capacity places only what is queued
}

// readyForWork answers a worker that asks for work: a pass gives it work
// or answers no_work. With nothing queued a pass could place nothing, so
// the answer is no_work at once and no pass runs for it: a pass costs
// time in proportion to the workers, and thousands of agents registering
// at once (a server's restart) would otherwise run one after another.
func (c *Controller) readyForWork(s *session) {
	if c.queue.Len() == 0 {
		c.sendAfterCommit(s, wire.TypeNoWork, &wire.NoWork{})
		return
	}
	s.worker.asked = true
	c.dirty = true
}

func (l *lifecycle) workerCopy(ws *workerState) *berth.Worker {
	w := *ws.w
	w.State = l.observedState(ws)
	return &w
}

func (c *Controller) onHeartbeat(s *session, m *wire.Heartbeat) {
	ws := s.worker
	ws.w.LastHeartbeat = c.now().UTC()
	ws.w.GPUStats = m.GPUStats
	c.renewEndpoints(ws, ws.w.LastHeartbeat)
	if !slices.Equal(ws.faulty, m.FaultyGPUs) {
		ws.faulty = slices.Clone(m.FaultyGPUs)
		ws.recompute()
		c.dirty = true
		if len(m.FaultyGPUs) > 0 {
			c.log.Warn("agent reports faulty GPUs; placing nothing more on them", "host", ws.w.Host, "gpus", m.FaultyGPUs)
		}
	}
	if !slices.Equal(ws.sched.Models, m.Models) {
		ws.sched.Models = m.Models
		c.dirty = true
	}
	ack := &wire.Ack{Of: wire.AckHeartbeat, Control: c.wireControl(ws.w.Host, ws)}
	for _, id := range m.Running {
		if as := c.attempts[id]; as == nil || as.worker != ws {
			ack.Kill = append(ack.Kill, id)
		}
	}
	s.send(wire.TypeAck, ack)
}

// attemptOf returns the active attempt id on s's worker, or nil.
func (c *Controller) attemptOf(s *session, id string) *attemptState {
	if as := c.attempts[id]; as != nil && as.worker == s.worker {
		return as
	}
	return nil
}

func (c *Controller) onAccepted(s *session, m *wire.JobAccepted) {
	as := c.attemptOf(s, m.AttemptID)
	if as == nil || as.a.State != berth.AttemptAssigned {
		return // superseded or duplicate: fenced
	}
	c.markRunning(as, c.now().UTC())
}

func (c *Controller) onLog(s *session, m *wire.Log) {
	as := c.attemptOf(s, m.AttemptID)
	end := m.Offset + int64(len(m.Data))
	if as == nil {
		// Not ours (superseded or already ended): acknowledge so the agent stops.
		s.send(wire.TypeAck, &wire.Ack{Of: wire.AckLog, AttemptID: m.AttemptID, Offset: end})
		return
	}
	if m.Offset > as.logSize {
		s.send(wire.TypeAck, &wire.Ack{Of: wire.AckLog, AttemptID: m.AttemptID, Offset: as.logSize, Resend: true})
		return
	}
	if end <= as.logSize {
		s.send(wire.TypeAck, &wire.Ack{Of: wire.AckLog, AttemptID: m.AttemptID, Offset: as.logSize})
		return
	}
	c.appendLog(as, m.Stream, m.Data[as.logSize-m.Offset:])
	ack := &wire.Ack{Of: wire.AckLog, AttemptID: m.AttemptID, Offset: end}
	c.sendAfterCommit(s, wire.TypeAck, ack)
}

// appendLog stores data at the end of as's log, on stream (stderr, or
// stdout's for any other name), and wakes the log followers once durable.
func (c *Controller) appendLog(as *attemptState, stream string, data []byte) {
	if stream != berth.StreamStderr {
		stream = ""
	}
	c.write(&store.Batch{Logs: []store.LogChunk{{AttemptID: as.a.ID, Offset: as.logSize, Data: data, Stream: stream}}})
	as.logSize += int64(len(data))
	c.afterCommit(c.notifyLogs)
}

// maxProgress bounds a progress report; longer ones are cut at a character
// boundary (invalid UTF-8 and NUL bytes, which text columns refuse, are
// replaced or dropped first).
const maxProgress = 1024

func (c *Controller) onProgress(s *session, m *wire.Progress) {
	as := c.attemptOf(s, m.AttemptID)
	if as == nil {
		return // fenced
	}
	p := berth.Truncate(strings.ToValidUTF8(strings.ReplaceAll(m.Progress, "\x00", ""), "\uFFFD"), maxProgress)
	if p == as.a.Progress {
		return
	}
	as.a.Progress = p
	c.write(&store.Batch{Progress: []store.AttemptProgress{{AttemptID: as.a.ID, Progress: p}}})
}

func (c *Controller) onResult(s *session, m *wire.JobResult) {
	ack := &wire.Ack{Of: wire.AckResult, AttemptID: m.AttemptID}
	as := c.attemptOf(s, m.AttemptID)
	if as == nil {
		s.send(wire.TypeAck, ack) // fenced: already ended here; stop the resends
		return
	}
	switch m.State {
	case berth.AttemptSucceeded, berth.AttemptFailed, berth.AttemptCancelled:
	default:
		c.protocolError(s, "job_result state %q", m.State)
		return
	}
	if _, known := berth.CauseExitCode(m.Cause); (m.Cause != "" && !known) || !berth.ValidFailureClass(m.Class) {
		c.protocolError(s, "job_result cause %q, class %q", m.Cause, m.Class)
		return
	}
	c.attemptEnded(as, m.State, m.ExitCode, m.Class, m.Cause, m.Reason)
	c.sendAfterCommit(s, wire.TypeAck, ack)
}

// attemptEnded ends as as its backend reports it: in state st (succeeded,
// failed or cancelled), with its exit code, failure class, cause and
// reason; an end that follows a preemption or an operator's stop is
// recorded as that.
func (c *Controller) attemptEnded(as *attemptState, st berth.AttemptState, code *int, class, cause, reason string) {
	as.cause = cause
	if class != "" {
		as.a.FailureClass = class
		if as.job.view().Kind == berth.KindService {
			as.a.Phase = berth.PhaseFailed
		}
	}
	switch {
	case st == berth.AttemptSucceeded:
	case as.preemptedBy != "":
		st, reason = berth.AttemptPreempted, "preempted by job "+as.preemptedBy
	case as.stoppedBy != nil || cause == berth.CauseOperator:
		// The agent's own reconciliation may have stopped it first.
		st, as.cause = berth.AttemptStopped, berth.CauseOperator
		if as.stoppedBy != nil && !strings.HasPrefix(reason, "stopped by operator") {
			reason = operatorStop(as.stoppedBy) + "; " + reason
		}
		n, _ := berth.CauseExitCode(berth.CauseOperator)
		code = &n
	}
	c.endAttempt(as, st, code, reason, c.now().UTC())
}

// disconnected handles the end of session s: its worker, if s is still
// its session, is disconnected.
func (c *Controller) disconnected(s *session) {
	ws := s.worker
	if ws == nil || ws.sess != s {
		return
	}
	c.workerDisconnected(ws, s.reason, c.now())
}
