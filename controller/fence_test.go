package controller

import (
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
