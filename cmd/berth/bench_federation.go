package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
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
// origin with no workers hands jobs to a peer, over loopback through a
// proxy that watches the peer protocol, and mirrors them to their end;
// first Jobs jobs submitted at once as one array (a backlog), then
// Samples jobs one at a time (an idle federation).
type FederationBenchResult struct {
	Jobs    int                    `json:"jobs"`
	Samples int                    `json:"samples"`
	CPUs    int                    `json:"cpus"`
	Backlog FederationBenchFigures `json:"backlog"`
	Idle    FederationBenchFigures `json:"idle,omitzero"`
}

// FederationBenchFigures are one phase's figures.
type FederationBenchFigures struct {
	// HandoffP50Ms and HandoffP99Ms: submit → the peer's acknowledgement
	// of the job's delivery (its handle handed_off).
	HandoffP50Ms   float64 `json:"handoff_p50_ms"`
	HandoffP99Ms   float64 `json:"handoff_p99_ms"`
	HandoffsPerSec float64 `json:"handoffs_per_sec"`
	// SyncLagP50Ms and SyncLagP99Ms: a peer's change written → first
	// pulled by the origin, over each distinct change (a repeat in a full
	// resync is not one).
	SyncLagP50Ms    float64 `json:"sync_lag_p50_ms"`
	SyncLagP99Ms    float64 `json:"sync_lag_p99_ms"`
	Changes         int     `json:"changes"`          // rows pulled, repeats in full resyncs included
	DistinctChanges int     `json:"distinct_changes"` // the changes the lag is measured over
	Pulls           int     `json:"pulls"`            // changes pulls, empty ones included
	FullPulls       int     `json:"full_pulls"`       // of them, full resyncs
	BytesPerPull    float64 `json:"bytes_per_pull"`   // mean body of a pull that carried changes
	BytesPerRow     float64 `json:"bytes_per_row"`
	MirroredSeconds float64 `json:"mirrored_seconds"` // submit → every job ended on the origin
}

func runBenchFederation(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("bench federation", "[flags]")
	jobs := fs.Int("jobs", 10_000, "jobs handed to the peer, submitted as one array")
	samples := fs.Int("latency", 20, "jobs then handed over one at a time, each once the last was mirrored as ended")
	output := fs.String("o", "table", "output: table or json")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *jobs < 1 || *jobs > berth.MaxArray:
		return berth.Invalidf("--jobs", "must be between 1 and %d", berth.MaxArray)
	case *samples < 0 || *samples > 10_000:
		return berth.Invalidf("--latency", "must be between 0 and 10000")
	case *output != "table" && *output != "json":
		return berth.Invalidf("-o", "must be table or json")
	}
	dir, err := os.MkdirTemp("", "berth-bench-federation-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	res, err := benchFederation(ctx, dir, *jobs, *samples)
	if err != nil {
		return err
	}
	if *output == "json" {
		return printJSON(m.Stdout, res)
	}
	fmt.Fprintf(m.Stdout, "berth bench federation: an origin hands jobs to a peer on loopback, %d CPUs, SQLite stores\n", res.CPUs)
	printFederationFigures(m, fmt.Sprintf("%d jobs submitted at once", res.Jobs), res.Backlog)
	if res.Samples > 0 {
		printFederationFigures(m, fmt.Sprintf("%d jobs one at a time", res.Samples), res.Idle)
	}
	return nil
}

func printFederationFigures(m *Main, what string, f FederationBenchFigures) {
	fmt.Fprintf(m.Stdout, "  %s: all mirrored as ended on the origin %.1f s after the first submit\n", what, f.MirroredSeconds)
	fmt.Fprintf(m.Stdout, "    handoff (submit → peer's ack): p50 %.1f ms, p99 %.1f ms; %.1f handoffs/s\n", f.HandoffP50Ms, f.HandoffP99Ms, f.HandoffsPerSec)
	fmt.Fprintf(m.Stdout, "    sync lag (peer change → pulled by the origin): p50 %.1f ms, p99 %.1f ms over %d changes\n", f.SyncLagP50Ms, f.SyncLagP99Ms, f.DistinctChanges)
	fmt.Fprintf(m.Stdout, "    changes pulls: %d (%d full), %d rows, %.0f bytes per pull with changes, %.0f bytes per row\n",
		f.Pulls, f.FullPulls, f.Changes, f.BytesPerPull, f.BytesPerRow)
}

// benchFederation runs a peer (with one no-op agent) and an origin (with
// none) in this process, the origin reaching the peer through a watching
// proxy, and hands n jobs to the peer at once, then samples jobs one at a
// time.
func benchFederation(ctx context.Context, dir string, n, samples int) (*FederationBenchResult, error) {
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
	res := &FederationBenchResult{Jobs: n, Samples: samples, CPUs: runtime.NumCPU()}
	w.phase()
	start := time.Now()
	submitted, err := handOffAndWait(ctx, c, n)
	if err != nil {
		return nil, err
	}
	res.Backlog = w.figures(submitted, start)
	if samples == 0 {
		return res, nil
	}
	w.phase()
	start = time.Now()
	sampled := map[string]time.Time{}
	for range samples {
		one, err := handOffAndWait(ctx, c, 1)
		if err != nil {
			return nil, err
		}
		maps.Copy(sampled, one)
	}
	res.Idle = w.figures(sampled, start)
	return res, nil
}

// handOffAndWait submits n true jobs for the peer (an array when n > 1)
// and waits until the origin mirrored them all as ended; all must have
// succeeded. It returns when each was submitted, by id.
func handOffAndWait(ctx context.Context, c *client.Client, n int) (map[string]time.Time, error) {
	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Command, req.Cluster = berth.Argv{"true"}, "peer"
	if n > 1 {
		req.Array = n
	}
	at := time.Now()
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
	if len(failures) > 0 {
		return nil, fmt.Errorf("%d of %d federated bench jobs did not succeed; the first is %s", len(failures), len(ids), failures[0])
	}
	submitted := make(map[string]time.Time, len(ids))
	for _, id := range ids {
		submitted[id] = at
	}
	return submitted, nil
}

// protocolWatch is a loopback proxy in front of a peer that notes when
// the peer acknowledged each delivery and what each changes pull carried.
type protocolWatch struct {
	url string
	srv *http.Server

	mu    sync.Mutex
	acked map[string]time.Time // remote id → the peer's first acknowledgement
	seen  map[changeKey]bool
	// This phase's:
	pulls, fulls int
	rows         int             // changes pulled, full resyncs' members included
	bodies       []int           // bytes of each pull that carried changes
	lags         []time.Duration // per change: first pulled − written
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
		if ch.Full {
			w.fulls++
		}
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

// phase starts counting pulls afresh.
func (w *protocolWatch) phase() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pulls, w.fulls, w.rows, w.bodies, w.lags = 0, 0, 0, nil, nil
}

// figures turns what the watch saw in this phase, begun at start, and of
// the jobs submitted (when each was, by id), into the phase's figures.
func (w *protocolWatch) figures(submitted map[string]time.Time, start time.Time) FederationBenchFigures {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := FederationBenchFigures{Pulls: w.pulls, FullPulls: w.fulls, Changes: w.rows, DistinctChanges: len(w.lags),
		MirroredSeconds: time.Since(start).Seconds()}
	handoffs := make([]float64, 0, len(submitted))
	var last time.Time
	for id, sent := range submitted {
		if at, ok := w.acked[id]; ok {
			handoffs = append(handoffs, ms(at.Sub(sent)))
			if at.After(last) {
				last = at
			}
		}
	}
	if len(handoffs) > 0 {
		sort.Float64s(handoffs)
		f.HandoffP50Ms, f.HandoffP99Ms = percentile(handoffs, 0.50), percentile(handoffs, 0.99)
		f.HandoffsPerSec = float64(len(handoffs)) / last.Sub(start).Seconds()
	}
	lags := make([]float64, len(w.lags))
	for i, l := range w.lags {
		lags[i] = ms(l)
	}
	if len(lags) > 0 {
		sort.Float64s(lags)
		f.SyncLagP50Ms, f.SyncLagP99Ms = percentile(lags, 0.50), percentile(lags, 0.99)
	}
	total := 0
	for _, b := range w.bodies {
		total += b
	}
	if len(w.bodies) > 0 {
		f.BytesPerPull = float64(total) / float64(len(w.bodies))
	}
	if f.Changes > 0 {
		f.BytesPerRow = float64(total) / float64(f.Changes)
	}
	return f
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
