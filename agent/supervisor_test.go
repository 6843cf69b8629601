package agent

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

func TestAgentBudget(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sleep", "1000"}, MaxRuntime: 200 * time.Millisecond})
	checkResult(t, fs.result("a1"), berth.AttemptFailed, berth.CauseBudget, intp(75), "max_runtime exceeded (200ms)")
}

func TestAgentStall(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sh", "-c", "echo loading; sleep 1000"},
		StallTimeout: 300 * time.Millisecond})
	checkResult(t, fs.result("a1"), berth.AttemptFailed, berth.CauseStall, intp(76), "stalled: no output and no progress for 300ms")
}

func TestAgentUserCancelHasNoCause(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sleep", "1000"}})
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a1", Reason: "cancelled by bob"})
	checkResult(t, fs.result("a1"), berth.AttemptCancelled, "", nil, "cancelled by bob")
}

func TestAgentRejectsUnknownCancelCause(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sleep", "1000"}})
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a1", Reason: "because", Cause: "whim"})
	checkResult(t, fs.result("a1"), berth.AttemptCancelled, "", nil, "because")
}

func TestAgentControl(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, logs := startAgent(t, fs, nil)
	sleep := []string{"sleep", "1000"}
	fs.assign(&wire.JobAssign{AttemptID: "g1", Queue: "gpu", Command: sleep})
	fs.assign(&wire.JobAssign{AttemptID: "c1", Queue: "cpu", Command: sleep})

	// Pushed: gpu off with the hard policy stops g1 only.
	fs.send(wire.TypeControl, &wire.Control{Off: []wire.QueueOff{{Queue: "gpu", Policy: berth.StopHard, RequestedBy: "alice"}}})
	checkResult(t, fs.result("g1"), berth.AttemptCancelled, berth.CauseOperator, intp(79),
		"stopped by operator: queue gpu of box turned off (hard) by alice; processes gone")

	// On heartbeat acks: drain stops nothing; then hard, by "*", stops c1.
	fs.send(wire.TypeAck, &wire.Ack{Of: wire.AckHeartbeat, Control: &wire.Control{Parked: true,
		Off: []wire.QueueOff{{Queue: berth.AllQueues, Policy: berth.StopDrain, RequestedBy: "bob"}}}})
	fs.send(wire.TypeAck, &wire.Ack{Of: wire.AckHeartbeat, Control: &wire.Control{Parked: true,
		Off: []wire.QueueOff{{Queue: berth.AllQueues, Policy: berth.StopHard}}}})
	checkResult(t, fs.result("c1"), berth.AttemptCancelled, berth.CauseOperator, intp(79),
		"stopped by operator: every queue of box turned off (hard); processes gone")
	if !a.Parked() {
		t.Fatal("Parked = false after a control that parks the worker")
	}

	// A queue turned on by name while "*" is off keeps its attempts.
	on := &wire.Control{Off: []wire.QueueOff{{Queue: berth.AllQueues, Policy: berth.StopHard}}, On: []string{"cpu"}}
	fs.send(wire.TypeControl, on)
	fs.assign(&wire.JobAssign{AttemptID: "c2", Queue: "cpu", Command: sleep})
	fs.send(wire.TypeAck, &wire.Ack{Of: wire.AckHeartbeat, Control: on})
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "c2", Reason: "cancelled by carol"})
	checkResult(t, fs.result("c2"), berth.AttemptCancelled, "", nil, "cancelled by carol")
	if a.Parked() {
		t.Fatal("Parked = true after a control that does not park the worker")
	}
	for _, want := range []string{"parked: every queue of this worker is off", "resumed"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the agent did not log %q; its log:\n%s", want, logs)
		}
	}
}

// TestAgentFencesItselfPastTheLease runs the agent on a clock the test
// moves: once the server has been silent for longer than the lease (the
// minute the fake server's register ack gives), the agent kills its
// attempt and reports it self-fenced, without the test waiting a minute.
func TestAgentFencesItselfPastTheLease(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	var skew atomic.Int64
	startAgent(t, fs, func(c *Config) {
		c.ShipEvery = 10 * time.Millisecond
		c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sleep", "1000"}})
	skew.Store(int64(time.Hour)) // the fake server sends nothing more: past the lease from now on
	checkResult(t, fs.result("a1"), berth.AttemptCancelled, "", nil,
		"self-fenced: the server was unreachable for longer than the lease")
}
