package controller

// Test helpers shared by the controller's tests: a controller on a
// SQLite store, agents spoken for by the test, and submissions. The
// lifecycle harness is in harness_test.go.

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
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

// startOn starts a controller on the SQLite store at path with a fixed
// clock. stop stops both; it runs when t ends if not called before.
func startOn(t *testing.T, path string, now time.Time) (c *Controller, stop func()) {
	t.Helper()
	return startOnWith(t, path, now, func(*Config, *sqlite.Store) {})
}

// startOnWith is startOn with the Config edit makes, given the store.
func startOnWith(t *testing.T, path string, now time.Time, edit func(*Config, *sqlite.Store)) (c *Controller, stop func()) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: st, Now: func() time.Time { return now }}
	edit(&cfg, st)
	c = New(cfg)
	if err := c.Start(t.Context()); err != nil {
		st.Close()
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.Stop(ctx); err != nil {
				t.Errorf("Stop: %v", err)
			}
			if err := st.Close(); err != nil {
				t.Errorf("close store: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return c, stop
}

// readEvents returns the events published after seq, which must exist.
func readEvents(t *testing.T, c *Controller, after uint64) []berth.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	events, _, err := c.Bus().Read(ctx, after)
	if err != nil {
		t.Fatalf("no event after %d: %v", after, err)
	}
	return events
}

// storedJobs returns how many jobs the store holds.
func storedJobs(t *testing.T, c *Controller) int {
	t.Helper()
	jobs, err := c.store.Jobs(t.Context(), store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return len(jobs)
}

// submitSleep submits one job that sleeps, its spec set by edit, and
// returns its id.
func submitSleep(t *testing.T, c *Controller, edit func(*berth.JobSpec)) string {
	t.Helper()
	spec := berth.DefaultJobSpec()
	spec.Command = berth.Argv{"sleep", "1000"}
	edit(&spec)
	jobs, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec})
	if err != nil {
		t.Fatalf("submit %+v: %v", spec, err)
	}
	return jobs[0].ID
}

// cancelJob cancels job id, which must be active.
func cancelJob(t *testing.T, c *Controller, id string) {
	t.Helper()
	if _, err := c.Cancel(t.Context(), id); err != nil {
		t.Fatalf("cancel %s: %v", id, err)
	}
}
