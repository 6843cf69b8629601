package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/wire"
)

// wsPair returns both ends of a new WebSocket: the server's and the
// dialler's, each reading messages as large as a stream's.
func wsPair(t *testing.T) (server, dialler *websocket.Conn) {
	t.Helper()
	accepted := make(chan *websocket.Conn, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c.SetReadLimit(streamReadLimit)
		accepted <- c
		<-release
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	d, _, err := websocket.Dial(context.Background(), srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.CloseNow() })
	d.SetReadLimit(streamReadLimit)
	return <-accepted, d
}

// startRelay relays between two new WebSocket pairs and returns the far
// ends (the client's and the agent's) and a channel closed once relay has
// returned.
func startRelay(t *testing.T) (client, agent *websocket.Conn, done <-chan struct{}) {
	t.Helper()
	clientSide, client := wsPair(t)
	agentSide, agent := wsPair(t)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		relay(context.Background(), clientSide, agentSide)
	}()
	return client, agent, ended
}

func awaitRelay(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not return after one side ended")
	}
}

// TestRelayPassesMessagesAndCloses: messages cross both ways unchanged; a
// normal close from the agent reaches the client with its status, and
// relay returns with both of its goroutines.
func TestRelayPassesMessagesAndCloses(t *testing.T) {
	t.Parallel()
	client, agent, done := startRelay(t)
	ctx := context.Background()
	for _, m := range []struct {
		from, to *websocket.Conn
		data     string
	}{{client, agent, "\x00to the agent"}, {agent, client, "\x01to the client"}} {
		if err := m.from.Write(ctx, websocket.MessageBinary, []byte(m.data)); err != nil {
			t.Fatal(err)
		}
		typ, got, err := m.to.Read(ctx)
		if err != nil || typ != websocket.MessageBinary || string(got) != m.data {
			t.Fatalf("relayed %v %q %v, want binary %q", typ, got, err, m.data)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- agent.Close(websocket.StatusNormalClosure, "done") }()
	_, _, err := client.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("client read %v, want the agent's normal close", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("agent's close: %v", err)
	}
	awaitRelay(t, done)
}

// TestRelayEndsWhenAClientDrops: a client that drops its connection
// without a close ends the agent's side too, and relay returns.
func TestRelayEndsWhenAClientDrops(t *testing.T) {
	t.Parallel()
	client, agent, done := startRelay(t)
	client.CloseNow()
	if _, _, err := agent.Read(context.Background()); err == nil {
		t.Fatal("the agent's side still reads after the client dropped")
	}
	awaitRelay(t, done)
}

// TestRelayHoldsBackASlowClient: an agent writing to a client that does
// not read is held back once the connections' buffers are full: the
// server keeps one message in hand, not the stream. It goes on once the
// client reads, and a client that leaves ends the stream.
func TestRelayHoldsBackASlowClient(t *testing.T) {
	t.Parallel()
	client, agent, done := startRelay(t)
	const size, total = wire.MaxStreamMessage, 1024 // 32 MiB in all
	var written atomic.Int64
	wrote := make(chan error, 1)
	go func() {
		msg := make([]byte, 1+size)
		for range total {
			if err := agent.Write(context.Background(), websocket.MessageBinary, msg); err != nil {
				wrote <- err
				return
			}
			written.Add(1)
		}
		wrote <- nil
	}()
	// Nothing announces that the writer is held back: wait until it has
	// made no progress for a while (and fail if it finishes first).
	for last, still := int64(-1), 0; still < 10; {
		select {
		case err := <-wrote:
			t.Fatalf("the agent wrote all %d MiB to a client that reads nothing (%v)", total*size>>20, err)
		case <-time.After(50 * time.Millisecond):
		}
		if n := written.Load(); n == last {
			still++
		} else {
			last, still = n, 0
		}
	}
	held := written.Load() * size
	if held > 24<<20 {
		t.Fatalf("%d MiB went out to a client that reads nothing, want no more than the sockets' buffers", held>>20)
	}
	// Reading lets it go on.
	for stalled := written.Load(); written.Load() == stalled; {
		if _, _, err := client.Read(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	client.CloseNow()
	awaitRelay(t, done)
	if err := <-wrote; err == nil {
		t.Fatal("the agent wrote everything to a client that left")
	}
}

// TestStreamsAwaitOnlyTheirAgent: a stream is claimed once, and only by
// the agent of the host it was asked of (or an admin); giving up on it
// hangs up on an agent that dialled meanwhile.
func TestStreamsAwaitOnlyTheirAgent(t *testing.T) {
	t.Parallel()
	var st streams
	id, arrived, abandon := st.expect("a1")
	if st.claim(id, "a2") != nil {
		t.Fatal("another host's agent claimed the stream")
	}
	ch := st.claim(id, "a1")
	if ch == nil || st.claim(id, "a1") != nil {
		t.Fatal("the stream's own agent could not claim it exactly once")
	}
	server, _ := wsPair(t)
	dialled := make(chan struct{})
	ch <- agentStream{conn: server, done: dialled}
	abandon()
	select {
	case <-dialled:
	default:
		t.Fatal("giving up left the agent's request waiting")
	}
	if len(arrived) != 0 {
		t.Fatal("the abandoned stream is still queued")
	}
	id, _, abandon = st.expect("a1")
	abandon()
	if st.claim(id, "") != nil {
		t.Fatal("an abandoned stream can still be claimed")
	}
}
