package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/client"
)

// FederationBenchResult is what berth bench federation measures: an
// origin with no workers hands Jobs jobs to a peer, over loopback through
// a proxy that watches the peer protocol, and mirrors them to their end.
type FederationBenchResult struct {
	Jobs int `json:"jobs"`
	CPUs int `json:"cpus"`
	// HandoffP50Ms and HandoffP99Ms: submit → the peer's acknowledgement
	// of the job's delivery (its handle handed_off), all jobs submitted at
	// once as one array.
	HandoffP50Ms    float64 `json:"handoff_p50_ms"`
	HandoffP99Ms    float64 `json:"handoff_p99_ms"`
	HandoffsPerSec  float64 `json:"handoffs_per_sec"`
	SyncLagP50Ms    float64 `json:"sync_lag_p50_ms"`
	SyncLagP99Ms    float64 `json:"sync_lag_p99_ms"`  // a peer's change written → first pulled by the origin
	Changes         int     `json:"changes"`          // rows pulled, repeats in full resyncs included
	DistinctChanges int     `json:"distinct_changes"` // the changes the lag is measured over
	Pulls           int     `json:"pulls"`            // changes pulls, empty ones included
	BytesPerPull    float64 `json:"bytes_per_pull"`   // mean body of a pull that carried changes
	BytesPerRow     float64 `json:"bytes_per_row"`
	MirroredSeconds float64 `json:"mirrored_seconds"` // submit → every job ended on the origin
}

func runBenchFederation(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("bench federation", "[flags]")
	jobs := fs.Int("jobs", 10_000, "jobs handed to the peer, submitted as one array")
	output := fs.String("o", "table", "output: table or json")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *jobs < 1 || *jobs > berth.MaxArray:
		return berth.Invalidf("--jobs", "must be between 1 and %d", berth.MaxArray)
	case *output != "table" && *output != "json":
		return berth.Invalidf("-o", "must be table or json")
	}
	dir, err := os.MkdirTemp("", "berth-bench-federation-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	res, err := benchFederation(ctx, dir, *jobs)
	if err != nil {
		return err
	}
	if *output == "json" {
		return printJSON(m.Stdout, res)
	}
	fmt.Fprintf(m.Stdout, "berth bench federation: %d jobs handed from an origin to a peer on loopback, %d CPUs, SQLite stores\n", res.Jobs, res.CPUs)
	fmt.Fprintf(m.Stdout, "  handoff (submit → peer's ack): p50 %.1f ms, p99 %.1f ms; %.0f handoffs/s\n", res.HandoffP50Ms, res.HandoffP99Ms, res.HandoffsPerSec)
	fmt.Fprintf(m.Stdout, "  sync lag (peer change → pulled by the origin): p50 %.1f ms, p99 %.1f ms over %d changes\n", res.SyncLagP50Ms, res.SyncLagP99Ms, res.DistinctChanges)
	fmt.Fprintf(m.Stdout, "  sync pulls: %d, %d rows, %.0f bytes per pull with changes, %.0f bytes per row\n", res.Pulls, res.Changes, res.BytesPerPull, res.BytesPerRow)
	fmt.Fprintf(m.Stdout, "  submit → all %d mirrored as ended on the origin: %.1f s\n", res.Jobs, res.MirroredSeconds)
	return nil
}

// benchFederation runs a peer (with one no-op agent) and an origin (with
// none) in this process, the origin reaching the peer through a watching
// proxy, and hands n jobs to the peer.
func benchFederation(ctx context.Context, dir string, n int) (*FederationBenchResult, error) {
	peer, err := startServer(ctx, &serverConfig{DataDir: filepath.Join(dir, "peer"), Listen: "127.0.0.1:0"})
	if err != nil {
		return nil, err
	}
	defer peer.Close(context.Background())
	actx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	a, err := agent.New(agent.Config{Server: peer.URL, DataDir: filepath.Join(dir, "agent"), Host: "bench-peer",
		Slots: 1024, Executor: agent.NoopExecutor{}})
	if err != nil {
		return nil, err
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.Run(actx) }()
	<-a.Registered()
	tok, err := client.New(peer.URL, "", nil).CreateToken(ctx, berth.TokenRequest{Name: "origin", Role: "peer"})
	if err != nil {
		return nil, err
	}
	w, err := newProtocolWatch(peer.URL)
	if err != nil {
		return nil, err
	}
	defer w.close()

	origin, err := startServer(ctx, &serverConfig{DataDir: filepath.Join(dir, "origin"), Listen: "127.0.0.1:0"})
	if err != nil {
		return nil, err
	}
	defer origin.Close(context.Background())
	c := client.New(origin.URL, "", nil)
	if _, err := c.PutPeer(ctx, &berth.Peer{Name: "peer", URL: w.url, Token: tok.Secret}); err != nil {
		return nil, err
	}

	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec(), Array: n}
	req.Command, req.Cluster = berth.Argv{"true"}, "peer"
	start := time.Now()
	ids, err := c.SubmitIDs(ctx, req)
	if err != nil {
		return nil, err
	}
	var failures []string
	for i := 0; i < len(ids); i += waitChunk {
		res, err := c.Wait(ctx, ids[i:min(i+waitChunk, len(ids))], false, 0)
		if err != nil {
			return nil, err
		}
		failures = append(failures, res.Failures...)
	}
	mirrored := time.Since(start)
	if len(failures) > 0 {
		return nil, fmt.Errorf("%d of %d federated bench jobs did not succeed; the first is %s", len(failures), n, failures[0])
	}
	res := w.result(ids, start)
	res.Jobs, res.CPUs, res.MirroredSeconds = n, runtime.NumCPU(), mirrored.Seconds()
	return res, nil
}

// protocolWatch is a loopback proxy in front of a peer that notes when
// the peer acknowledged each delivery and what each changes pull carried.
type protocolWatch struct {
	url string
	srv *http.Server

	mu     sync.Mutex
	acked  map[string]time.Time // remote id → the peer's first acknowledgement
	pulls  int
	rows   int             // changes pulled, full resyncs' members included
	bodies []int           // bytes of each pull that carried changes
	lags   []time.Duration // per change: first pulled − written
	seen   map[changeKey]bool
}

// changeKey tells a change from a repeat of it (a full resync sends the
// jobs' current rows again).
type changeKey struct {
	remoteID, nonce string
	state           berth.JobState
	attempts        int
	reason          string
}

func newProtocolWatch(peerURL string) (*protocolWatch, error) {
	target, err := url.Parse(peerURL)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &protocolWatch{url: "http://" + ln.Addr().String(), acked: map[string]time.Time{}, seen: map[changeKey]bool{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = w.observe
	w.srv = &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/api/v1/federation/handoffs" {
			// Keep the body: its remote id names the job the answer acknowledges.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				rw.WriteHeader(http.StatusBadGateway)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r = r.WithContext(context.WithValue(r.Context(), handoffBodyKey{}, body))
		}
		rp.ServeHTTP(rw, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = w.srv.Serve(ln) }()
	return w, nil
}

func (w *protocolWatch) close() { _ = w.srv.Close() }

// handoffBodyKey carries a delivery's body to observe.
type handoffBodyKey struct{}

func (w *protocolWatch) observe(resp *http.Response) error {
	now := time.Now()
	switch resp.Request.URL.Path {
	case "/api/v1/federation/handoffs":
		var h berth.HandoffRequest
		body, _ := resp.Request.Context().Value(handoffBodyKey{}).([]byte)
		if (resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK) && json.Unmarshal(body, &h) == nil {
			w.mu.Lock()
			if _, ok := w.acked[h.RemoteID]; !ok {
				w.acked[h.RemoteID] = now
			}
			w.mu.Unlock()
		}
	case "/api/v1/federation/changes":
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			return err
		}
		var ch berth.FederationChanges
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &ch) != nil {
			return nil
		}
		w.mu.Lock()
		w.pulls++
		w.rows += len(ch.Jobs)
		if len(ch.Jobs) > 0 {
			w.bodies = append(w.bodies, len(body))
		}
		for _, j := range ch.Jobs {
			k := changeKey{j.RemoteID, j.Nonce, j.State, j.Attempts, j.Reason}
			if !w.seen[k] && !j.At.IsZero() {
				w.seen[k] = true
				w.lags = append(w.lags, now.Sub(j.At))
			}
		}
		w.mu.Unlock()
	}
	return nil
}

// result turns what the watch saw of the jobs ids, submitted at start,
// into the figures.
func (w *protocolWatch) result(ids []string, start time.Time) *FederationBenchResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	res := &FederationBenchResult{Pulls: w.pulls, Changes: w.rows, DistinctChanges: len(w.lags)}
	handoffs := make([]float64, 0, len(ids))
	var last time.Time
	for _, id := range ids {
		if at, ok := w.acked[id]; ok {
			handoffs = append(handoffs, ms(at.Sub(start)))
			if at.After(last) {
				last = at
			}
		}
	}
	if len(handoffs) > 0 {
		sort.Float64s(handoffs)
		res.HandoffP50Ms, res.HandoffP99Ms = percentile(handoffs, 0.50), percentile(handoffs, 0.99)
		res.HandoffsPerSec = float64(len(handoffs)) / last.Sub(start).Seconds()
	}
	lags := make([]float64, len(w.lags))
	for i, l := range w.lags {
		lags[i] = ms(l)
	}
	if len(lags) > 0 {
		sort.Float64s(lags)
		res.SyncLagP50Ms, res.SyncLagP99Ms = percentile(lags, 0.50), percentile(lags, 0.99)
	}
	total := 0
	for _, b := range w.bodies {
		total += b
	}
	if len(w.bodies) > 0 {
		res.BytesPerPull = float64(total) / float64(len(w.bodies))
	}
	if res.Changes > 0 {
		res.BytesPerRow = float64(total) / float64(res.Changes)
	}
	return res
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
