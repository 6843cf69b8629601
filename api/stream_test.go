package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsPair returns both ends of a new WebSocket: the server's and the
// dialler's.
func wsPair(t *testing.T) (server, dialler *websocket.Conn) {
	t.Helper()
	accepted := make(chan *websocket.Conn, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		accepted <- c
		<-release
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	d, _, err := websocket.Dial(context.Background(), srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.CloseNow() })
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
