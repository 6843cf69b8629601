package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/wire"
)

// ErrStreamEnded is what Exec's error wraps when the stream ended without
// the command's exit code: the connection was lost, or the attempt ended.
var ErrStreamEnded = errors.New("the stream ended before the command's exit code arrived")

// Exec runs argv in member rank of running job id, in its environment and
// working directory on its worker, through the server (see
// wire.StreamOpen). It copies stdin to the command until stdin ends, and
// the command's stdout and stderr to stdout and stderr, and returns its
// exit code. Exec does not wait for stdin's reader to return: a read
// blocked when the command ends is left to finish on its own. A refusal is the server's *berth.Error (403: the caller may
// not cancel the job; 409: it is not running); what the agent could not do
// is an error with its reason.
func (c *Client) Exec(ctx context.Context, id string, rank int, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	q := url.Values{"command": argv, "rank": {strconv.Itoa(rank)}}
	ws, err := c.dialStream(ctx, "/api/v1/jobs/"+url.PathEscape(id)+"/exec?"+q.Encode())
	if err != nil {
		return 0, err
	}
	defer ws.CloseNow()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if stdin != nil {
		go func() {
			_ = SendStream(ctx, ws, stdin, wire.StreamStdin)
		}()
	}
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, fmt.Errorf("exec: %w: %w", ErrStreamEnded, err)
		}
		if len(data) == 0 {
			continue
		}
		switch data[0] {
		case wire.StreamStdout:
			_, err = stdout.Write(data[1:])
		case wire.StreamStderr:
			_, err = stderr.Write(data[1:])
		case wire.StreamExit:
			code, err := strconv.Atoi(string(data[1:]))
			if err != nil {
				return 0, fmt.Errorf("exec: bad exit code %q", data[1:])
			}
			ws.Close(websocket.StatusNormalClosure, "")
			return code, nil
		case wire.StreamError:
			return 0, fmt.Errorf("exec: %s", data[1:])
		}
		if err != nil {
			return 0, fmt.Errorf("exec: write output: %w", err)
		}
	}
}

// CheckPortForward checks that the caller may forward port of member rank
// of job id, and that the job runs, without opening anything: the errors
// PortForward's would be.
func (c *Client) CheckPortForward(ctx context.Context, id string, rank, port int) error {
	return c.do(ctx, http.MethodGet, portForwardPath(id, rank, port)+"&check=true", nil, nil)
}

// PortForward joins conn, a connection the caller accepted, to a new
// connection to 127.0.0.1:port on the worker of member rank of running job
// id, through the server, until both sides have ended (see JoinStream).
// Refusals are as for CheckPortForward.
func (c *Client) PortForward(ctx context.Context, id string, rank, port int, conn net.Conn) error {
	ws, err := c.dialStream(ctx, portForwardPath(id, rank, port))
	if err != nil {
		return err
	}
	return JoinStream(ctx, ws, conn, wire.StreamStdin, wire.StreamStdout)
}

func portForwardPath(id string, rank, port int) string {
	return "/api/v1/jobs/" + url.PathEscape(id) + "/port-forward?rank=" + strconv.Itoa(rank) + "&port=" + strconv.Itoa(port)
}

// JoinStream copies between conn and the stream ws until both directions
// have ended or either fails: what conn sends goes out on channel out, and
// what arrives on channel in goes to conn; an empty message ends a
// direction (sent when conn's reads end; on arrival conn's write side is
// shut down). A wire.StreamError message ends the stream with its text as
// the error. It closes ws (normally when both ended) and conn.
func JoinStream(ctx context.Context, ws *websocket.Conn, conn net.Conn, out, in byte) error {
	var wg sync.WaitGroup
	defer wg.Wait() // last: the closes below end the sender's reads and writes
	defer ws.CloseNow()
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Add(1)
	sent := make(chan error, 1)
	go func() {
		defer wg.Done()
		sent <- SendStream(ctx, ws, conn, out)
	}()
	received := false
	for !received {
		_, data, err := ws.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				return nil
			}
			return fmt.Errorf("stream: %w", err)
		}
		switch {
		case len(data) == 0:
		case data[0] == wire.StreamError:
			return fmt.Errorf("%s", data[1:])
		case data[0] != in:
		case len(data) == 1:
			closeWrite(conn)
			received = true
		default:
			if _, err := conn.Write(data[1:]); err != nil {
				return fmt.Errorf("stream: write: %w", err)
			}
		}
	}
	select {
	case err := <-sent:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return ws.Close(websocket.StatusNormalClosure, "")
}

// closeWrite shuts down conn's write side, or closes it when it cannot.
func closeWrite(conn net.Conn) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = conn.Close()
}

// SendStream sends what r yields on channel ch of the stream ws, one
// message per read, then an empty message once r ends; it returns nil at
// r's end, else the error that stopped it.
func SendStream(ctx context.Context, ws *websocket.Conn, r io.Reader, ch byte) error {
	buf := make([]byte, 1+wire.MaxStreamMessage)
	buf[0] = ch
	for {
		n, err := r.Read(buf[1:])
		if n > 0 {
			if werr := ws.Write(ctx, websocket.MessageBinary, buf[:1+n]); werr != nil {
				return fmt.Errorf("stream: %w", werr)
			}
		}
		if err == io.EOF || errors.Is(err, net.ErrClosed) {
			return ws.Write(ctx, websocket.MessageBinary, buf[:1])
		}
		if err != nil {
			return fmt.Errorf("stream: read: %w", err)
		}
	}
}

// dialStream opens the WebSocket of a stream endpoint, path with its
// query, on the first server that takes it (as send fails over). A
// refusal is the server's *berth.Error.
func (c *Client) dialStream(ctx context.Context, path string) (*websocket.Conn, error) {
	hdr := http.Header{}
	if c.token != "" {
		hdr.Set("Authorization", "Bearer "+c.token)
	}
	round := c.servers.Round()
	var leader string
	var err error
	for server, ok := round.Next(""); ok; server, ok = round.Next(leader) {
		var ws *websocket.Conn
		var resp *http.Response
		ws, resp, err = websocket.Dial(ctx, server+path, &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: hdr})
		if err == nil {
			round.Answered()
			ws.SetReadLimit(2 * wire.MaxStreamMessage)
			return ws, nil
		}
		if resp == nil {
			if ctx.Err() != nil {
				return nil, err
			}
			err, leader = &transportError{msg: "cannot reach the server at " + server, err: err}, ""
			continue
		}
		err = responseError(http.MethodGet, path, resp)
		var standby bool
		if leader, standby = standbyLeader(resp, err); !standby {
			round.Answered()
			return nil, err
		}
	}
	return nil, round.Failed(err)
}
