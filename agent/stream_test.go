package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/wire"
)

// execServer serves one exec of argv into spec on a WebSocket and returns
// the client's end and a channel closed once runExec has returned.
func execServer(t *testing.T, spec *Spec, argv []string) (*websocket.Conn, <-chan struct{}) {
	t.Helper()
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer close(done)
		runExec(context.Background(), spec, argv, c)
	}))
	t.Cleanup(srv.Close)
	c, _, err := websocket.Dial(context.Background(), srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c, done
}

// readUntil reads stream messages until one arrives on channel ch and
// returns everything read on stdout so far and that message's data.
func readUntil(t *testing.T, c *websocket.Conn, ch byte) (stdout, data string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	for {
		_, msg, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read the stream (stdout so far %q): %v", out.String(), err)
		}
		if len(msg) > 0 && msg[0] == wire.StreamStdout {
			out.Write(msg[1:])
		}
		if len(msg) > 0 && msg[0] == ch {
			return out.String(), string(msg[1:])
		}
	}
}

// awaitGone waits until process pid no longer exists.
func awaitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestExecEndsItsGroupWithItsLeader: an exec's exit code reaches the
// client once its leader exits, although a child it left in the
// background held stdout; that child is killed, as an attempt's group is.
func TestExecEndsItsGroupWithItsLeader(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := &Spec{JobID: "j1", AttemptID: "att-1", Dir: dir, Env: map[string]string{"GREETING": "hi"}}
	c, done := execServer(t, spec, []string{"sh", "-c", `echo "$BERTH_JOB_ID $GREETING $(pwd)"; sleep 100 & echo $!; exit 3`})
	out, code := readUntil(t, c, wire.StreamExit)
	if code != "3" {
		t.Fatalf("exit code %q, want 3 (stdout %q)", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != "j1 hi "+dir {
		t.Fatalf("stdout %q, want the job's env and working directory, then a pid", out)
	}
	pid, err := strconv.Atoi(lines[1])
	if err != nil {
		t.Fatal(err)
	}
	awaitGone(t, pid)
	<-done
}

// TestExecEndsWhenTheClientLeaves: a client that hangs up mid-command
// kills the exec's whole group, and runExec returns with every goroutine
// it started.
func TestExecEndsWhenTheClientLeaves(t *testing.T) {
	t.Parallel()
	spec := &Spec{JobID: "j1", AttemptID: "att-1", Dir: t.TempDir()}
	c, done := execServer(t, spec, []string{"sh", "-c", `sleep 100 & echo $!; cat`})
	_, data, err := c.Read(context.Background())
	if err != nil || len(data) < 2 || data[0] != wire.StreamStdout {
		t.Fatalf("first message %q, %v; want the background pid on stdout", data, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data[1:])))
	if err != nil {
		t.Fatal(err)
	}
	// cat echoes stdin: the stream carries it both ways.
	if err := c.Write(context.Background(), websocket.MessageBinary, append([]byte{wire.StreamStdin}, "ping\n"...)); err != nil {
		t.Fatal(err)
	}
	if _, data, err = c.Read(context.Background()); err != nil || string(data[1:]) != "ping\n" {
		t.Fatalf("echo %q, %v; want ping", data, err)
	}
	c.CloseNow()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("runExec did not return after its client left")
	}
	awaitGone(t, pid)
}
