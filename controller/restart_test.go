package controller

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// pipeConn is an agent connection in memory: the test writes the agent's
// frames to toServer and reads the server's from toAgent.
type pipeConn struct {
	toServer, toAgent chan []byte
	closed            chan struct{}
}

func newPipeConn() *pipeConn {
	return &pipeConn{toServer: make(chan []byte, 16), toAgent: make(chan []byte, 16), closed: make(chan struct{})}
}

func (p *pipeConn) Read(ctx context.Context) ([]byte, error) {
	select {
	case f := <-p.toServer:
		return f, nil
	case <-p.closed:
		return nil, errors.New("closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Write sends a copy of frame: the server reuses its buffer.
func (p *pipeConn) Write(ctx context.Context, frame []byte) error {
	select {
	case p.toAgent <- bytes.Clone(frame):
		return nil
	case <-p.closed:
		return errors.New("closed")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pipeConn) Close(string) error {
	select {
	case <-p.closed:
	default:
		close(p.closed)
	}
	return nil
}

// fakeAgent is an agent session on c that the test speaks for.
type fakeAgent struct {
	t    *testing.T
	conn *pipeConn
}

// connectAgent opens a session on c and sends reg.
func connectAgent(t *testing.T, c *Controller, reg *wire.Register) *fakeAgent {
	t.Helper()
	a := &fakeAgent{t: t, conn: newPipeConn()}
	go func() { _ = c.ServeAgent(context.Background(), a.conn, "") }()
	t.Cleanup(func() { a.conn.Close("test over") })
	a.send(wire.TypeRegister, reg)
	return a
}

// workerReg is the registration of a worker w1 on gpu-1 serving the
// default queue with one slot.
func workerReg() *wire.Register {
	return &wire.Register{Version: wire.Version, WorkerID: "w1", Host: "gpu-1", Queues: []string{berth.DefaultQueue},
		CPUs: 4, Memory: 8 << 30, Slots: 1}
}

// registerAgent connects an agent to c with reg and requires the server
// to accept it.
func registerAgent(t *testing.T, c *Controller, reg *wire.Register) *fakeAgent {
	t.Helper()
	agent := connectAgent(t, c, reg)
	if ack := agent.await(wire.TypeAck).(*wire.Ack); ack.Error != "" {
		t.Fatalf("register refused: %s", ack.Error)
	}
	return agent
}

func (a *fakeAgent) send(typ string, body any) {
	a.t.Helper()
	frame, err := wire.Encode(typ, body)
	if err != nil {
		a.t.Fatal(err)
	}
	a.conn.toServer <- frame
}

// await returns the first message of type typ the server sends.
func (a *fakeAgent) await(typ string) any {
	a.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case frame := <-a.conn.toAgent:
			msgs, err := wire.DecodeFrame(frame)
			if err != nil {
				a.t.Fatal(err)
			}
			for _, m := range msgs {
				if m.Type == typ {
					return m.Body
				}
			}
		case <-timeout:
			a.t.Fatalf("no %s from the server", typ)
		}
	}
}

// acceptNext awaits the server's next assignment and accepts it.
func (a *fakeAgent) acceptNext() *wire.JobAssign {
	a.t.Helper()
	assign := a.await(wire.TypeJobAssign).(*wire.JobAssign)
	a.send(wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: assign.AttemptID})
	return assign
}

// exit reports the attempt of assign ended with code: succeeded for 0,
// failed for any other.
func (a *fakeAgent) exit(assign *wire.JobAssign, code int) {
	a.t.Helper()
	st := berth.AttemptSucceeded
	if code != 0 {
		st = berth.AttemptFailed
	}
	a.send(wire.TypeJobResult, &wire.JobResult{AttemptID: assign.AttemptID, State: st, ExitCode: &code})
}

// TestAssignedJobKeepsItsAttemptOverARestart restarts the server while a
// job's only attempt is assigned and not yet started, a state its stored
// row does not count: the restarted controller counts it, so the failure
// that follows spends the job's one attempt (retries 0) and ends it.
func TestAssignedJobKeepsItsAttemptOverARestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "berth.db")
	now := time.Now()
	reg := workerReg()
	c, stop := startOn(t, path, now)
	agent := registerAgent(t, c, reg)
	spec := berth.DefaultJobSpec()
	spec.Command = berth.Argv{"false"}
	jobs, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec})
	if err != nil {
		t.Fatal(err)
	}
	id := jobs[0].ID
	assign := agent.await(wire.TypeJobAssign).(*wire.JobAssign)
	stored, err := c.store.Job(t.Context(), id)
	if err != nil || stored.State != berth.JobPending || stored.Attempts != 0 {
		t.Fatalf("stored job while assigned = %+v, %v; want pending with 0 attempts", stored, err)
	}
	stop()

	c, _ = startOn(t, path, now)
	reg.Running = []string{assign.AttemptID}
	agent = connectAgent(t, c, reg)
	if ack := agent.await(wire.TypeAck).(*wire.Ack); ack.Error != "" || len(ack.Keep) != 1 || ack.Keep[0] != assign.AttemptID {
		t.Fatalf("register ack = %+v, want attempt %s kept", ack, assign.AttemptID)
	}
	exit := 1
	agent.send(wire.TypeJobResult, &wire.JobResult{AttemptID: assign.AttemptID, State: berth.AttemptFailed, ExitCode: &exit})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if res, err := c.Wait(ctx, []string{id}, false, ""); err != nil || !res.Done {
		t.Fatalf("wait for %s: %+v, %v", id, res, err)
	}
	j, err := c.store.Job(t.Context(), id)
	if err != nil || j.State != berth.JobFailed || j.Attempts != 1 {
		t.Fatalf("job after its one attempt failed = %+v, %v; want failed after 1 attempt", j, err)
	}
}
