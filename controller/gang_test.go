package controller

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// gangReg is the registration of a worker with two GPUs on host, which
// advertises addr.
func gangReg(id, host, addr string) *wire.Register {
	gpus, _ := berth.ParseGPUSpec("2xT4:16GiB")
	return &wire.Register{Version: wire.Version, WorkerID: id, Host: host, Advertise: addr, GPUs: gpus,
		CPUs: 4, Memory: 8 << 30, Slots: 4}
}

// gangAssigns returns the job_assign last sent to each session, by rank.
func (h *harness) gangAssigns(sessions ...*session) map[int]*wire.JobAssign {
	h.t.Helper()
	out := map[int]*wire.JobAssign{}
	for _, s := range sessions {
		a := h.lastSent(s, wire.TypeJobAssign).(*wire.JobAssign)
		out[a.TaskIndex] = a
	}
	if len(out) != len(sessions) {
		h.t.Fatalf("assignments by rank %v, want one per rank", out)
	}
	return out
}

// sessionOf returns the session an attempt's worker speaks on.
func (h *harness) sessionOf(attemptID string) *session {
	h.t.Helper()
	as := h.l.attempts[attemptID]
	if as == nil {
		h.t.Fatalf("attempt %s is not active", attemptID)
	}
	return as.worker.sess
}

// TestGangRendezvousIsRankZerosAdvertisedAddress checks the environment a
// gang's members get: rank 0's advertised address (not its host label) and
// its port, the world and per-node sizes, each member's rank, and the job's
// own values over Berth's; only rank 0's agent is asked to check the port.
func TestGangRendezvousIsRankZerosAdvertisedAddress(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s1 := h.agent(gangReg("w1", "vm-1", "10.0.0.1"))
	s2 := h.agent(gangReg("w2", "vm-2", "10.0.0.2"))
	if w := h.l.workers["w1"].w; w.Advertise != "10.0.0.1" || w.Address() != "10.0.0.1" {
		t.Fatalf("worker w1 advertises %q (address %q), want 10.0.0.1", w.Advertise, w.Address())
	}
	h.submit(func(s *berth.JobSpec) {
		s.Nodes, s.Resources.GPUs = 2, 2
		s.Env = map[string]string{"LOCAL_WORLD_SIZE": "1"}
	}, "python3", "train.py")
	by := h.gangAssigns(s1, s2)
	r0, r1 := by[0], by[1]
	addr := map[*session]string{s1: "10.0.0.1", s2: "10.0.0.2"}[h.sessionOf(r0.AttemptID)]
	port := r0.Env["MASTER_PORT"]
	if p, err := strconv.Atoi(port); err != nil || p < firstRendezvousPort || p >= firstRendezvousPort+rendezvousPorts {
		t.Fatalf("MASTER_PORT %q, want a port of 29500-30499", port)
	}
	for rank, a := range by {
		want := map[string]string{"MASTER_ADDR": addr, "MASTER_PORT": port, "BERTH_COORDINATOR": net.JoinHostPort(addr, port),
			"WORLD_SIZE": "2", "BERTH_NNODES": "2", "BERTH_GPUS_PER_NODE": "2", "LOCAL_WORLD_SIZE": "1",
			"RANK": strconv.Itoa(rank), "NODE_RANK": strconv.Itoa(rank), "BERTH_NODE_RANK": strconv.Itoa(rank)}
		for k, v := range want {
			if a.Env[k] != v {
				t.Errorf("rank %d: %s=%q, want %q", rank, k, a.Env[k], v)
			}
		}
	}
	if r0.RendezvousPort != atoi(t, port) || r1.RendezvousPort != 0 {
		t.Errorf("rendezvous_port: rank 0 %d, rank 1 %d; want %s and none", r0.RendezvousPort, r1.RendezvousPort, port)
	}
}

// TestGangWhosePortIsBusyIsPlacedAgainWithAnother: rank 0's agent finds
// MASTER_PORT in use and refuses it (port_busy); the other member is
// stopped, the gang is placed again at once without spending a retry, and
// rank 0 gets another port on that machine.
func TestGangWhosePortIsBusyIsPlacedAgainWithAnother(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// Two agents on one machine: they share its address, and its ports.
	s1 := h.agent(gangReg("w1", "vm-1", "10.0.0.9"))
	s2 := h.agent(gangReg("w2", "vm-2", "10.0.0.9"))
	j := h.submit(func(s *berth.JobSpec) { s.Nodes, s.Resources.GPUs = 2, 2 }, "python3", "train.py")
	by := h.gangAssigns(s1, s2)
	r0, r1 := by[0], by[1]
	busy := r0.RendezvousPort
	h.from(h.sessionOf(r1.AttemptID), wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: r1.AttemptID})
	code, _ := berth.CauseExitCode(berth.CausePortBusy)
	h.from(h.sessionOf(r0.AttemptID), wire.TypeJobResult, &wire.JobResult{AttemptID: r0.AttemptID, State: berth.AttemptFailed,
		ExitCode: &code, Cause: berth.CausePortBusy, Reason: "not started: MASTER_PORT is in use on this machine"})
	cancel := h.lastSent(h.sessionOf(r1.AttemptID), wire.TypeJobCancel).(*wire.JobCancel)
	if cancel.AttemptID != r1.AttemptID {
		t.Fatalf("cancel sent for %s, want rank 1's %s", cancel.AttemptID, r1.AttemptID)
	}
	h.from(h.sessionOf(r1.AttemptID), wire.TypeJobResult, &wire.JobResult{AttemptID: r1.AttemptID, State: berth.AttemptCancelled})
	again := h.gangAssigns(s1, s2)
	if again[0].AttemptID == r0.AttemptID {
		t.Fatal("the gang was not placed again")
	}
	if again[0].RendezvousPort == busy || again[0].Env["MASTER_PORT"] == strconv.Itoa(busy) {
		t.Errorf("placed again with MASTER_PORT %s, the port found busy", again[0].Env["MASTER_PORT"])
	}
	if js := h.l.jobs[j.ID]; js == nil || js.view().Attempts != 1 {
		t.Fatalf("job after a busy port: %+v, want its new placement counted as its first attempt", js)
	}
	// The busy port stays out of use on that machine for busyPortFor, and
	// only there.
	now := h.clock.Now()
	h.l.nextPort = busy - firstRendezvousPort
	if p := h.l.rendezvousPort("10.0.0.9", now); p == busy || p == again[0].RendezvousPort {
		t.Errorf("next port on 10.0.0.9: %d, want neither the busy %d nor the held %d", p, busy, again[0].RendezvousPort)
	}
	h.l.nextPort = busy - firstRendezvousPort
	if p := h.l.rendezvousPort("10.0.0.7", now); p != busy {
		t.Errorf("next port on another machine: %d, want %d", p, busy)
	}
	h.l.nextPort = busy - firstRendezvousPort
	if p := h.l.rendezvousPort("10.0.0.9", now.Add(busyPortFor+time.Second)); p != busy {
		t.Errorf("next port on 10.0.0.9 once the busy mark expired: %d, want %d", p, busy)
	}
}

// TestGangJobSettingMasterPortIsNotChecked: a job that sets MASTER_PORT
// itself keeps it, and rank 0's agent is not asked to check Berth's.
func TestGangJobSettingMasterPortIsNotChecked(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s1 := h.agent(gangReg("w1", "vm-1", "10.0.0.1"))
	s2 := h.agent(gangReg("w2", "vm-2", "10.0.0.2"))
	h.submit(func(s *berth.JobSpec) {
		s.Nodes = 2
		s.Env = map[string]string{"MASTER_PORT": "12345"}
	}, "python3", "train.py")
	r0 := h.gangAssigns(s1, s2)[0]
	if r0.Env["MASTER_PORT"] != "12345" || r0.RendezvousPort != 0 || r0.Env["LOCAL_WORLD_SIZE"] != "1" {
		t.Fatalf("rank 0: MASTER_PORT=%q rendezvous_port %d LOCAL_WORLD_SIZE=%q; want the job's 12345, unchecked, and 1 (no GPUs)",
			r0.Env["MASTER_PORT"], r0.RendezvousPort, r0.Env["LOCAL_WORLD_SIZE"])
	}
}

// TestRegisterRefusesABadAdvertisedAddress: an address with a port is
// refused at register, naming the field.
func TestRegisterRefusesABadAdvertisedAddress(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := newSession(newPipeConn(), "")
	h.from(s, wire.TypeRegister, gangReg("w1", "vm-1", "10.0.0.1:7070"))
	if s.worker != nil || len(h.l.workers) != 0 {
		t.Fatal("a worker advertising 10.0.0.1:7070 was registered")
	}
	if !strings.Contains(s.lastWords, "advertise") || !strings.Contains(s.lastWords, "10.0.0.1:7070") {
		t.Fatalf("register refused with %q, want a reason naming advertise and the address", s.lastWords)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
