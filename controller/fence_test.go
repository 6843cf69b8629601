package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// TestAnUnheardWorkersAttemptTurnsInvalidAtTheLeaseAndIsLostAfterTheMargin:
// a running attempt checks valid while its worker is heard within the
// lease, invalid from the moment the lease lapses, and its job is given
// to another worker only once the fence margin (at least a heartbeat)
// has passed too.
func TestAnUnheardWorkersAttemptTurnsInvalidAtTheLeaseAndIsLostAfterTheMargin(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cfg := h.c.cfg
	if cfg.FenceMargin < cfg.Heartbeat {
		t.Fatalf("fence margin %s below a heartbeat (%s)", cfg.FenceMargin, cfg.Heartbeat)
	}
	s := h.agent(workerReg())
	h.submit(nil, "sleep", "60")
	assign := h.lastSent(s, wire.TypeJobAssign).(*wire.JobAssign)
	h.from(s, wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: assign.AttemptID})
	as := h.c.attempts[assign.AttemptID]
	check := func(want bool, when string) {
		t.Helper()
		v := h.c.validity(as, h.clock.Now())
		if v.Valid != want || v.AttemptID != assign.AttemptID || v.JobID != assign.JobID || (want == (v.Reason != "")) {
			t.Errorf("%s: validity %+v, want valid %v", when, v, want)
		}
	}
	lost := func() bool { return h.c.workers["w1"].w.State == berth.WorkerLost }

	check(true, "running")
	h.housekeep(cfg.Lease)
	check(true, "at the lease")
	h.housekeep(time.Millisecond)
	check(false, "just past the lease")
	if v := h.c.validity(as, h.clock.Now()); !strings.Contains(v.Reason, "past its lease") {
		t.Errorf("reason %q, want it to say the lease lapsed", v.Reason)
	}
	h.housekeep(cfg.FenceMargin - 2*time.Millisecond)
	if lost() || h.c.attempts[assign.AttemptID] == nil {
		t.Fatalf("worker lost %s after its last message; want only after lease + margin (%s)",
			cfg.Lease+cfg.FenceMargin-time.Millisecond, cfg.Lease+cfg.FenceMargin)
	}
	h.housekeep(time.Millisecond)
	if !lost() || h.c.attempts[assign.AttemptID] != nil {
		t.Fatalf("worker not lost, or its attempt still live, at lease + margin")
	}
}

// TestTheFenceMarginIsAtLeastAHeartbeat: a configured margin shorter than
// a heartbeat is raised to one; the default is two.
func TestTheFenceMarginIsAtLeastAHeartbeat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ margin, want time.Duration }{
		{0, 2 * time.Second}, {time.Millisecond, time.Second}, {3 * time.Second, 3 * time.Second},
	} {
		cfg := Config{Heartbeat: time.Second, FenceMargin: tc.margin}
		cfg.setDefaults()
		if cfg.FenceMargin != tc.want {
			t.Errorf("margin %s: got %s, want %s", tc.margin, cfg.FenceMargin, tc.want)
		}
	}
}

// frozenConn is the connection of a frozen agent: reads and writes block
// (a write until its deadline), and a close reports its reason and then
// waits for a reply that never comes, until the test ends.
type frozenConn struct {
	closing chan string
	release chan struct{}
}

func newFrozenConn(t *testing.T) *frozenConn {
	c := &frozenConn{closing: make(chan string, 1), release: make(chan struct{})}
	t.Cleanup(func() { close(c.release) })
	return c
}

func (c *frozenConn) Read(ctx context.Context) ([]byte, error) {
	select {
	case <-c.release:
	case <-ctx.Done():
	}
	return nil, errors.New("frozen")
}

func (c *frozenConn) Write(ctx context.Context, _ []byte) error {
	select {
	case <-c.release:
	case <-ctx.Done():
	}
	return errors.New("frozen: write timed out")
}

func (c *frozenConn) Close(reason string) error {
	c.closing <- reason
	<-c.release
	return nil
}

// TestTheLeaseCheckDoesNotWaitOnAFrozenPeer: the lease check cuts off a
// frozen agent without waiting for its close reply (which used to stall
// the loop ~5 s a session); the session's writer hangs up, off the loop.
func TestTheLeaseCheckDoesNotWaitOnAFrozenPeer(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	conn := newFrozenConn(t)
	s := newSession(conn, "")
	h.from(s, wire.TypeRegister, workerReg())
	go s.writer(t.Context(), time.Minute, t.Logf)
	checked := make(chan struct{})
	go func() {
		h.housekeep(h.c.cfg.Lease + h.c.cfg.FenceMargin)
		close(checked)
	}()
	select {
	case <-checked:
	case <-time.After(10 * time.Second):
		t.Fatal("the lease check is waiting on the frozen peer")
	}
	if st := h.c.workers["w1"].w.State; st != berth.WorkerLost {
		t.Errorf("worker %s, want lost", st)
	}
	select {
	case r := <-conn.closing:
		if !strings.Contains(r, "lease expired") {
			t.Errorf("closed with %q, want the lease", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the writer never hung up")
	}
}

// TestAWriteToAFrozenPeerEndsAtItsDeadline: a message to a peer that
// stops reading is abandoned at the write deadline and the session hung
// up, rather than its writer waiting forever.
func TestAWriteToAFrozenPeerEndsAtItsDeadline(t *testing.T) {
	t.Parallel()
	conn := newFrozenConn(t)
	s := newSession(conn, "")
	go s.writer(t.Context(), 50*time.Millisecond, t.Logf)
	s.send(wire.TypeAck, &wire.Ack{Of: wire.AckHeartbeat})
	select {
	case r := <-conn.closing:
		if r != "write failed" {
			t.Errorf("closed with %q, want write failed", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write to a frozen peer never ended")
	}
}
