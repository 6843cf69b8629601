package api

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/wire"
)

// StreamDialTimeout is how long the server waits for an agent to dial a
// stream it was asked to open before it answers the client 503.
const StreamDialTimeout = 10 * time.Second

// streamReadLimit bounds one message read on a stream's WebSockets: a
// channel byte and wire.MaxStreamMessage bytes of data, with room to spare.
const streamReadLimit = 2 * wire.MaxStreamMessage

// streams are the streams asked of agents and not yet dialled by them, by
// id. The server joins each client's WebSocket to its agent's (see
// wire.StreamOpen).
type streams struct {
	mu      sync.Mutex
	pending map[string]pendingStream
}

// pendingStream is a stream asked of the agent of host, and where its
// WebSocket goes once that agent dials it.
type pendingStream struct {
	host string
	ch   chan agentStream
}

// agentStream is an agent's WebSocket for a stream (nil when it could not
// be accepted), and done, which the agent's request waits on until the
// stream is over.
type agentStream struct {
	conn *websocket.Conn
	done chan struct{}
}

// expect registers a new stream for the agent of host, returning its id,
// where its agent's WebSocket will arrive and the function that gives up
// on it: it forgets the id and, when the agent has dialled meanwhile,
// hangs up on it.
func (st *streams) expect(host string) (id string, arrived <-chan agentStream, abandon func()) {
	id = rand.Text()
	ch := make(chan agentStream, 1)
	st.mu.Lock()
	if st.pending == nil {
		st.pending = map[string]pendingStream{}
	}
	st.pending[id] = pendingStream{host: host, ch: ch}
	st.mu.Unlock()
	return id, ch, func() {
		if st.claim(id, "") != nil {
			return // the agent will find nothing
		}
		if a := <-ch; a.conn != nil { // it dialled: its request waits on done
			a.conn.CloseNow()
			close(a.done)
		}
	}
}

// claim removes stream id and returns its channel: nil when no stream of
// that id is awaited (never asked, already dialled or given up) or, with
// host set, when it is awaited from another host's agent.
func (st *streams) claim(id, host string) chan agentStream {
	st.mu.Lock()
	defer st.mu.Unlock()
	p, ok := st.pending[id]
	if !ok || (host != "" && p.host != host) {
		return nil
	}
	delete(st.pending, id)
	return p.ch
}

// execJob is GET /api/v1/jobs/{id}/exec: a WebSocket that runs a command
// (?command=ARG, repeated, in order) in member ?rank= (default 0) of a
// running job, as wire.StreamExec.
func (s *Server) execJob(w http.ResponseWriter, r *http.Request) {
	argv := r.URL.Query()["command"]
	if len(argv) == 0 || argv[0] == "" {
		writeError(w, r, berth.Invalidf("command", "name the command to run"))
		return
	}
	s.stream(w, r, &wire.StreamOpen{Kind: wire.StreamExec, Command: argv}, "job.exec",
		map[string]string{"program": argv[0], "args": strconv.Itoa(len(argv) - 1)})
}

// portForward is GET /api/v1/jobs/{id}/port-forward: a WebSocket carrying
// one TCP connection to 127.0.0.1:?port= on the worker of member ?rank=
// (default 0) of a running job, as wire.StreamPort. With ?check=true it
// only checks the request (204 when a WebSocket would be opened).
func (s *Server) portForward(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.URL.Query().Get("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, r, berth.Invalidf("port", "must be a port number from 1 to 65535, not %q", r.URL.Query().Get("port")))
		return
	}
	check, err := boolQuery(r, "check")
	if err != nil {
		writeError(w, r, err)
		return
	}
	m := &wire.StreamOpen{Kind: wire.StreamPort, Port: port}
	if check {
		m = nil
	}
	s.stream(w, r, m, "job.port_forward", map[string]string{"port": strconv.Itoa(port)})
}

// stream opens stream m into the job of r's path, which the caller must
// be allowed to cancel, once it is recorded in the audit log as action
// with fields (and the rank), and relays it until either side ends. A nil
// m only checks the request and answers 204.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, m *wire.StreamOpen, action string, fields map[string]string) {
	id := r.PathValue("id")
	rank, err := wholeQuery(r, "rank", 0, "the member of a gang, from 0")
	var j *berth.JobDetail
	if err == nil {
		j, err = s.ownJob(r, id, true)
	}
	if err == nil && j.Cluster != "" {
		err = berth.Errorf(berth.ECodeConflict, "job %s is handed to federation peer %s: exec and port-forward reach only this cluster's workers", id, j.Cluster)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	host, err := s.ctl.OpenStream(r.Context(), id, rank, nil)
	if err != nil {
		writeError(w, r, err) // refused before it is recorded
		return
	}
	if m == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	fields["rank"] = strconv.Itoa(rank)
	if err := s.sec.record(r, action, "job/"+id, fields); err != nil {
		writeError(w, r, err)
		return
	}
	var arrived <-chan agentStream
	var abandon func()
	m.ID, arrived, abandon = s.streams.expect(host)
	if now, err := s.ctl.OpenStream(r.Context(), id, rank, m); err != nil || now != host {
		abandon()
		if err == nil { // it ended and started again elsewhere meanwhile
			err = berth.Errorf(berth.ECodeConflict, "member %d of job %s moved from %s to %s; try again", rank, id, host, now)
		}
		writeError(w, r, err)
		return
	}
	timer := time.NewTimer(StreamDialTimeout)
	defer timer.Stop()
	var agent agentStream
	select {
	case agent = <-arrived:
	case <-timer.C:
		abandon()
		writeError(w, r, berth.Errorf(berth.ECodeUnavailable, "the agent of worker %s did not open the stream within %s", host, StreamDialTimeout))
		return
	case <-r.Context().Done():
		abandon()
		return
	}
	if agent.conn == nil {
		writeError(w, r, berth.Errorf(berth.ECodeUnavailable, "the agent of worker %s could not open the stream", host))
		return
	}
	defer close(agent.done)
	client, err := websocket.Accept(w, r, nil)
	if err != nil {
		agent.conn.CloseNow()
		return // Accept wrote the error response
	}
	client.SetReadLimit(streamReadLimit)
	relay(context.Background(), client, agent.conn)
}

// agentStream is GET /api/v1/agent/streams/{id}: the agent's side of a
// stream the server asked it to open, dialled by that agent (its
// credential's host) or an admin's. It lasts as long as the stream.
func (s *Server) agentStream(w http.ResponseWriter, r *http.Request) {
	ch := s.streams.claim(r.PathValue("id"), identity(r).Worker)
	if ch == nil {
		writeError(w, r, berth.Errorf(berth.ECodeNotFound, "no stream %s is awaited from this agent", r.PathValue("id")))
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		ch <- agentStream{} // the client's side learns; Accept wrote the error response
		return
	}
	c.SetReadLimit(streamReadLimit)
	done := make(chan struct{})
	ch <- agentStream{conn: c, done: done}
	<-done
}

// relay copies messages between a and b, one at a time each way, until
// either ends: a close is passed on to the other side with its status, and
// any other end closes both. It returns once both directions are done.
func relay(ctx context.Context, a, b *websocket.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	pass := func(from, to *websocket.Conn) {
		defer wg.Done()
		defer cancel()
		for {
			typ, data, err := from.Read(ctx)
			if err != nil {
				var ce websocket.CloseError
				if errors.As(err, &ce) {
					code := ce.Code
					if code == websocket.StatusNoStatusRcvd {
						code = websocket.StatusNormalClosure
					}
					_ = to.Close(code, ce.Reason)
				}
				return
			}
			if err := to.Write(ctx, typ, data); err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go pass(a, b)
	go pass(b, a)
	wg.Wait()
	a.CloseNow()
	b.CloseNow()
}

// streamRoutes registers the stream endpoints: a client's exec and
// port-forward, allowed to those who may cancel the job, and an agent's
// side of a stream.
func (s *Server) streamRoutes() {
	s.route("GET /api/v1/jobs/{id}/exec", auth.Identity.CanSubmit, submitters, s.execJob)
	s.route("GET /api/v1/jobs/{id}/port-forward", auth.Identity.CanSubmit, submitters, s.portForward)
	s.route("GET /api/v1/agent/streams/{id}", speaksAgent, "an agent credential or admin", s.agentStream)
}
