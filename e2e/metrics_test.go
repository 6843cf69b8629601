package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// TestMetricsCountWhatHappened: the server's /metrics counts jobs
// submitted and finished by state, attempts started and ended, retries
// and requeues as counters that only grow, and the whole scrape is valid
// Prometheus text exposition by Prometheus's own promtool.
func TestMetricsCountWhatHappened(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("m1")
	text, before := cl.scrape()
	checkExposition(t, text)
	for _, series := range []string{"berth_jobs_submitted_total", `berth_jobs_finished_total{state="succeeded"}`,
		`berth_attempts_ended_total{state="failed"}`, "berth_job_retries_total", `berth_swaps_total{outcome="ready"}`,
		`berth_webhook_delivery_attempts_total{outcome="delivered"}`} {
		if v, ok := before[series]; !ok || v != 0 {
			t.Errorf("before any job: %s = %v (present %v), want 0", series, v, ok)
		}
	}

	ok := cl.submit(shellJob("true"))[0]
	flaky := shellJob("exit 3")
	flaky.Retries = 1
	failed := cl.submit(flaky)[0]
	held := shellJob("true")
	held.Resources.GPUs, held.HoldUntilFits = 4, true // never fits: stays pending
	waiting := cl.submit(held)[0]
	cl.awaitState(ok.ID, time.Minute, berth.JobSucceeded)
	cl.awaitState(failed.ID, time.Minute, berth.JobFailed)
	if _, err := cl.c.Cancel(context.Background(), waiting.ID); err != nil {
		t.Fatal(err)
	}
	text, after := cl.scrape()
	checkExposition(t, text)
	for series, delta := range map[string]float64{
		"berth_jobs_submitted_total":                    3,
		`berth_jobs_finished_total{state="succeeded"}`:  1,
		`berth_jobs_finished_total{state="failed"}`:     1,
		`berth_jobs_finished_total{state="cancelled"}`:  1,
		"berth_attempts_started_total":                  3,
		`berth_attempts_ended_total{state="succeeded"}`: 1,
		`berth_attempts_ended_total{state="failed"}`:    2,
		"berth_job_retries_total":                       1,
		"berth_jobs_requeued_total":                     1,
		"berth_service_restarts_total":                  0,
	} {
		if got := after[series] - before[series]; got != delta {
			t.Errorf("%s grew by %v, want %v", series, got, delta)
		}
	}
	// Monotonic: nothing that ends a job takes from a counter.
	for series, v := range before {
		if strings.Contains(series, "_total") && after[series] < v {
			t.Errorf("counter %s went down: %v then %v", series, v, after[series])
		}
	}
}

// scrape reads the server's /metrics: the text and each series' value.
func (cl *cluster) scrape() (string, map[string]float64) {
	cl.t.Helper()
	resp, err := http.Get(cl.url + "/metrics")
	if err != nil {
		cl.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		cl.t.Fatalf("GET /metrics: %d, %v: %s", resp.StatusCode, err, data)
	}
	values := map[string]float64{}
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			cl.t.Fatalf("metrics line %q is not SERIES VALUE", line)
		}
		values[line[:i]] = v
	}
	return string(data), values
}

// checkExposition runs Prometheus's promtool check metrics over text: the
// format is Prometheus's, its names and types follow its conventions.
// Without promtool the test is skipped, or, under CI, fails (.ci/run
// installs Debian's prometheus package, which has it).
func checkExposition(t *testing.T, text string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no promtool on PATH: install Debian's prometheus package (.ci/run does)")
		}
		t.Skip("no promtool on PATH: checking the exposition format needs it (apt-get install prometheus)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s\nof:\n%s", err, out.String(), text)
	}
}
