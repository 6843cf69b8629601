package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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
	const peers, stopped = 46, 4
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
	if p99 > 2*time.Second {
		t.Errorf("p99 submit latency %s while frozen agents were cut off; want well under the 5 s a close used to stall", p99)
	}
}

// TestAFrozenAgentsAttemptChecksInvalidOnceItsWorkerIsLost: a job's
// attempt checks valid (berth attempt check, with $BERTH_ATTEMPT_ID) while
// its agent is heard; once the agent is frozen and its worker declared
// lost, the same process — still running, as a frozen agent's children do
// — checks invalid and can skip its side effect.
func TestAFrozenAgentsAttemptChecksInvalidOnceItsWorkerIsLost(t *testing.T) {
	cl := newCluster(t, "--lease", "1s", "--heartbeat", "200ms")
	agent := cl.addAgent("freezes", "--gpus", "0")
	dir := t.TempDir()
	check := func(n string) string {
		return fmt.Sprintf(`%q attempt check --server %s > %s/check%s 2>&1; echo "exit $?" >> %s/check%s; `, berthBin, cl.url, dir, n, dir, n)
	}
	req := shellJob(check("1") + `touch ` + dir + `/checked1; while [ ! -e ` + dir + `/go ]; do sleep 0.05; done; ` +
		check("2") + `touch ` + dir + `/checked2; exec sleep 1000`)
	j := cl.submit(req)[0]
	// read returns what check n wrote, once the job has made it.
	read := func(n string) string {
		cl.eventually(time.Minute, "check "+n, func() bool {
			_, err := os.Stat(filepath.Join(dir, "checked"+n))
			return err == nil
		})
		data, err := os.ReadFile(filepath.Join(dir, "check"+n))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if out := read("1"); !strings.Contains(out, "is valid") || !strings.HasSuffix(out, "exit 0\n") {
		t.Fatalf("while running, berth attempt check said %q; want valid, exit 0", out)
	}
	attempt := cl.job(j.ID).AttemptList[0].ID
	if v, err := cl.c.AttemptValidity(context.Background(), attempt); err != nil || !v.Valid || v.JobID != j.ID {
		t.Fatalf("validity while running: %+v, %v; want valid for job %s", v, err, j.ID)
	}

	if err := agent.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cl.awaitWorker("freezes", berth.WorkerLost)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := read("2"); !strings.Contains(out, "not valid") || !strings.Contains(out, "lost") || !strings.HasSuffix(out, "exit 1\n") {
		t.Fatalf("after its worker was lost, berth attempt check said %q; want not valid (lost), exit 1", out)
	}
	if v, err := cl.c.AttemptValidity(context.Background(), attempt); err != nil || v.Valid || v.Reason == "" {
		t.Fatalf("validity after the worker was lost: %+v, %v; want invalid with a reason", v, err)
	}
	if _, err := cl.c.AttemptValidity(context.Background(), "no-such-attempt"); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("unknown attempt: %v; want not found", err)
	}
}
