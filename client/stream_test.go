package client_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/wire"
)

// joined runs JoinStream on the server's end of a new WebSocket and one
// end of a new TCP connection, as the agent does for a forwarded port, and
// returns the WebSocket's other end (the client's), the TCP connection's
// other end (the port's) and JoinStream's result once it returns.
func joined(t *testing.T) (ws *websocket.Conn, port net.Conn, result <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	res := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		tcp, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			res <- err
			return
		}
		res <- client.JoinStream(context.Background(), c, tcp, wire.StreamStdout, wire.StreamStdin)
	}))
	t.Cleanup(srv.Close)
	ws, _, err = websocket.Dial(context.Background(), srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	port, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { port.Close() })
	return ws, port, res
}

func awaitResult(t *testing.T, result <-chan error) error {
	t.Helper()
	select {
	case err := <-result:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("JoinStream did not return")
		return nil
	}
}

// TestJoinStreamCarriesBothWaysAndHalfCloses: bytes cross both ways; each
// side's end of output reaches the other as an end, not a close, so the
// other direction goes on; once both have ended JoinStream returns nil and
// closes the stream normally.
func TestJoinStreamCarriesBothWaysAndHalfCloses(t *testing.T) {
	t.Parallel()
	ws, port, result := joined(t)
	ctx := context.Background()
	if err := ws.Write(ctx, websocket.MessageBinary, append([]byte{wire.StreamStdin}, "request"...)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := port.Read(buf); err != nil || string(buf[:n]) != "request" {
		t.Fatalf("the port read %q, %v; want request", buf[:n], err)
	}
	// The client ends its output: the port reads EOF, and may still answer.
	if err := ws.Write(ctx, websocket.MessageBinary, []byte{wire.StreamStdin}); err != nil {
		t.Fatal(err)
	}
	if n, err := port.Read(buf); err != io.EOF {
		t.Fatalf("the port read %q, %v after the client's end; want EOF", buf[:n], err)
	}
	if _, err := port.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	if _, data, err := ws.Read(ctx); err != nil || string(data) != "\x01response" {
		t.Fatalf("the client read %q, %v; want the response on stdout", data, err)
	}
	port.(*net.TCPConn).CloseWrite()
	if _, data, err := ws.Read(ctx); err != nil || string(data) != "\x01" {
		t.Fatalf("the client read %q, %v; want the port's end", data, err)
	}
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after both ends the client read %v, want a normal close", err)
	}
	if err := awaitResult(t, result); err != nil {
		t.Fatalf("JoinStream: %v", err)
	}
}

// TestJoinStreamEndsWhenTheClientDrops: a client that drops the stream
// mid-way closes the port's connection, and JoinStream returns.
func TestJoinStreamEndsWhenTheClientDrops(t *testing.T) {
	t.Parallel()
	ws, port, result := joined(t)
	ws.CloseNow()
	if err := awaitResult(t, result); err == nil {
		t.Fatal("JoinStream returned nil for a dropped stream")
	}
	_ = port.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := port.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the port read %d bytes, %v; want EOF once the stream dropped", n, err)
	}
}
