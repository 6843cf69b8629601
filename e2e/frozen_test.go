package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// frozenPeer registers as an agent over a WebSocket and then neither reads
// nor writes again: a peer that never answers the server's close.
func frozenPeer(t *testing.T, cl *cluster, host string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(cl.url, "http") + "/api/v1/agent"
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{}})
	if err != nil {
		t.Fatalf("dial %s: %v", host, err)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	frame, err := wire.AppendFrame(nil, wire.TypeRegister, &wire.Register{Version: wire.Version, WorkerID: "w-" + host,
		Host: host, Queues: []string{"frozen"}, CPUs: 1, Memory: 1 << 30, Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageText, frame); err != nil {
		t.Fatalf("register %s: %v", host, err)
	}
}

// TestFrozenAgentsDoNotStallServer freezes many agents at once — real
// agents SIGSTOPped and WebSocket peers that stop reading — while two
// healthy agents run jobs under a short lease. Closing the frozen sessions
// must not hold up the controller: submissions stay fast, and the healthy
// agents never go unheard long enough to fence their own attempts.
func TestFrozenAgentsDoNotStallServer(t *testing.T) {
	const peers, stopped = 20, 4
	cl := newCluster(t, "--lease", "2s", "--heartbeat", "200ms")
	healthy := []*proc{cl.addAgent("healthy-0", "--gpus", "0"), cl.addAgent("healthy-1", "--gpus", "0")}
	var frozen []string
	for i := range stopped {
		host := fmt.Sprintf("stopped-%d", i)
		p := cl.addAgent(host, "--gpus", "0", "--queues", "frozen")
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		frozen = append(frozen, host)
	}
	for i := range peers {
		host := fmt.Sprintf("silent-%d", i)
		frozenPeer(t, cl, host)
		frozen = append(frozen, host)
	}

	// Submit steadily until every frozen worker is lost, and a while after.
	var (
		mu        sync.Mutex
		latencies []time.Duration
		ids       []string
	)
	stop := make(chan struct{})
	submitted := make(chan error, 1)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				submitted <- nil
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			t0 := time.Now()
			jobs, err := cl.c.Submit(ctx, shellJob("true"))
			d := time.Since(t0)
			cancel()
			if err != nil {
				submitted <- err
				return
			}
			mu.Lock()
			latencies = append(latencies, d)
			ids = append(ids, jobs[0].ID)
			mu.Unlock()
		}
	}()
	cl.eventually(2*time.Minute, "every frozen worker lost", func() bool {
		ws, err := cl.c.Workers(context.Background())
		if err != nil {
			return false
		}
		lost := 0
		for _, w := range ws {
			if slices.Contains(frozen, w.Host) && w.State == berth.WorkerLost {
				lost++
			}
		}
		return lost == len(frozen)
	})
	time.Sleep(time.Second) // keep submitting past the lease checks that followed
	close(stop)
	if err := <-submitted; err != nil {
		t.Fatalf("submit: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if d := cl.awaitState(id, time.Minute, berth.JobSucceeded, berth.JobFailed); d.State != berth.JobSucceeded {
			t.Errorf("job %s ended %s (%s), want succeeded", id, d.State, d.Reason)
		}
	}
	for i, p := range healthy {
		if l, ok := p.out.await("self-fencing", 0); ok {
			t.Errorf("healthy agent %d fenced its own work: %s", i, l)
		}
	}
	slices.Sort(latencies)
	p99 := latencies[len(latencies)*99/100]
	t.Logf("%d frozen agents (%d stopped processes, %d silent peers): %d submissions, p50 %s, p99 %s, max %s",
		len(frozen), stopped, peers, len(latencies), latencies[len(latencies)/2], p99, latencies[len(latencies)-1])
	if p99 > time.Second {
		t.Errorf("p99 submit latency %s while frozen agents were cut off; want well under the 5 s a close used to stall", p99)
	}
}
