package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/gateway"
)

// fakeUpstream starts the fake vLLM (agent/testdata/fakevllm) as a process
// on loopback serving model, and returns its URL.
func fakeUpstream(b *testing.B, model string) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "fakevllm")
	if out, err := exec.Command("go", "build", "-o", bin, "../agent/testdata/fakevllm").CombinedOutput(); err != nil {
		b.Fatalf("build fakevllm: %v: %s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--model", model, "--markers", "--warmup", "0s")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.Contains(sc.Text(), "Application startup complete") {
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// benchTargets are where a benchmark sends its requests: the replica
// itself, or the gateway in front of it.
func benchTargets(b *testing.B) (direct, through string) {
	b.Helper()
	direct = fakeUpstream(b, "m")
	cl := &cluster{}
	cl.set([]*berth.Endpoint{{AttemptID: "a", Host: "h", URL: direct, Model: "m", ReadySince: time.Now()}})
	gw := gateway.New(gateway.Config{Cluster: cl, Authenticate: keys(map[string]*gateway.Caller{"k": {Name: "bench", TokenID: "t"}})})
	srv := httptest.NewServer(gw)
	b.Cleanup(srv.Close)
	return direct, srv.URL
}

// benchChat is the request of the benchmarks: a short chat completion.
const benchChat = `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":8}`

// chatOnce sends benchChat to url and reads the answer.
func chatOnce(c *http.Client, url string) error {
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url+"/v1/chat/completions", strings.NewReader(benchChat))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// BenchmarkGatewayLatency sends chat completions one at a time to the fake
// vLLM directly and through the gateway, and reports each path's p50 and
// p99 per request (docs/performance.md: the gateway's overhead is the
// difference).
func BenchmarkGatewayLatency(b *testing.B) {
	direct, through := benchTargets(b)
	for _, tc := range []struct{ name, url string }{{"direct", direct}, {"gateway", through}} {
		b.Run(tc.name, func(b *testing.B) {
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			if err := chatOnce(c, tc.url); err != nil { // a connection, warm
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if err := chatOnce(c, tc.url); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkGatewayThroughput sends chat completions from parallel clients
// (GOMAXPROCS×8) to the fake vLLM directly and through the gateway, and
// reports requests per second.
func BenchmarkGatewayThroughput(b *testing.B) {
	direct, through := benchTargets(b)
	for _, tc := range []struct{ name, url string }{{"direct", direct}, {"gateway", through}} {
		b.Run(tc.name, func(b *testing.B) {
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
			b.SetParallelism(8)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := chatOnce(c, tc.url); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}
