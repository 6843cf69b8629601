package api

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/controller"
)

// metrics writes the Prometheus text exposition format.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	m, err := s.ctl.Metrics(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	fmt.Fprintln(w, "# HELP berth_queue_depth Pending jobs by queue.")
	fmt.Fprintln(w, "# TYPE berth_queue_depth gauge")
	for _, q := range sortedKeys(m.QueueDepth) {
		fmt.Fprintf(w, "berth_queue_depth{queue=%q} %d\n", q, m.QueueDepth[q])
	}
	fmt.Fprintln(w, "# HELP berth_jobs Jobs by state.")
	fmt.Fprintln(w, "# TYPE berth_jobs gauge")
	for _, st := range []berth.JobState{berth.JobPending, berth.JobRunning, berth.JobSucceeded, berth.JobFailed, berth.JobCancelled} {
		fmt.Fprintf(w, "berth_jobs{state=%q} %d\n", st, m.Jobs[st])
	}
	fmt.Fprintln(w, "# HELP berth_workers Workers by observed state.")
	fmt.Fprintln(w, "# TYPE berth_workers gauge")
	for _, st := range []berth.WorkerState{berth.WorkerReady, berth.WorkerBusy, berth.WorkerDraining, berth.WorkerParked,
		berth.WorkerDisconnected, berth.WorkerLost} {
		fmt.Fprintf(w, "berth_workers{state=%q} %d\n", st, m.Workers[st])
	}
	writeSeries(w, "berth_capacity_gpus", "gauge",
		"GPUs of workers taking work (parked, disconnected and lost workers and faulty GPUs excluded).", float64(m.CapacityGPUs))
	inUse := 0
	for _, n := range m.GPUsInUse {
		inUse += n
	}
	writeSeries(w, "berth_gpus_in_use", "gauge", "GPUs that running attempts hold.", float64(inUse))
	writeHistogram(w, "berth_scheduling_latency_seconds", "Submit to placement on a worker.", m.PlaceLatency)
	writeHistogram(w, "berth_start_latency_seconds", "Submit to process started.", m.StartLatency)
	writeHistogram(w, "berth_scheduler_pass_seconds", "Duration of one scheduling pass.", m.PassLength)
	s.writeTotals(w, &m.Totals)
	if s.Gateway != nil {
		s.Gateway.WriteMetrics(w)
	}
	if s.Contracts != nil {
		s.Contracts.WriteMetrics(w)
	}
	writeProcessMetrics(w)
}

// writeTotals writes the counters: totals since the server started.
func (s *Server) writeTotals(w io.Writer, t *controller.Totals) {
	writeSeries(w, "berth_jobs_submitted_total", "counter", "Jobs submitted since the server started; an array of N counts N.",
		float64(t.JobsSubmitted))
	writeLabeled(w, "berth_jobs_finished_total", "Jobs ended since the server started, by final state.", "state",
		[]berth.JobState{berth.JobSucceeded, berth.JobFailed, berth.JobCancelled}, t.JobsFinished)
	writeSeries(w, "berth_jobs_requeued_total", "counter",
		"Moves of a job back to pending since the server started: retries, service restarts, preemptions, operators' stops.",
		float64(t.JobsRequeued))
	writeSeries(w, "berth_job_retries_total", "counter", "Failed batch attempts run again since the server started, each spending a retry.",
		float64(t.JobRetries))
	writeSeries(w, "berth_service_restarts_total", "counter", "Services restarted after their attempt ended, since the server started.",
		float64(t.ServiceRestarts))
	writeSeries(w, "berth_attempts_started_total", "counter", "Attempts whose process started, since the server started.",
		float64(t.AttemptsStarted))
	writeLabeled(w, "berth_attempts_ended_total", "Attempts ended since the server started, by state (preempted: the preemptions).", "state",
		[]berth.AttemptState{berth.AttemptSucceeded, berth.AttemptFailed, berth.AttemptCancelled, berth.AttemptLost,
			berth.AttemptPreempted, berth.AttemptStopped}, t.AttemptsEnded)
	if s.Swapper != nil {
		writeLabeled(w, "berth_swaps_total", "Model swaps ended since the server started, by outcome.", "outcome",
			[]string{berth.SwapStateReady, berth.SwapStateFailed}, s.Swapper.Outcomes())
	}
	if s.Webhooks != nil {
		writeLabeled(w, "berth_webhook_delivery_attempts_total",
			"Webhook delivery attempts since the server started, by outcome (retrying: failed, to be tried again).", "outcome",
			[]string{"delivered", "retrying", "failed"}, s.Webhooks.Outcomes())
	}
}

// writeLabeled writes a counter with one label: a series for each of
// known, 0 when values lacks it, then for the other keys of values, in
// order.
func writeLabeled[K ~string](w io.Writer, name, help, label string, known []K, values map[K]uint64) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
	keys := slices.Clone(known)
	for _, k := range slices.Sorted(maps.Keys(values)) {
		if !slices.Contains(known, k) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		fmt.Fprintf(w, "%s{%s=%q} %d\n", name, label, k, values[k])
	}
}

// processStart is when this process started, near enough: when the
// package was initialised.
var processStart = time.Now()

// writeProcessMetrics writes the process_ and go_ series that Prometheus
// client libraries export, under the same names: CPU time, resident
// memory, open files and start time of the server's process, and its
// goroutines, heap and garbage collections.
func writeProcessMetrics(w io.Writer) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		writeSeries(w, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", cpu.Seconds())
	}
	if statm, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(statm)); len(f) > 1 {
			if pages, err := strconv.ParseFloat(f[1], 64); err == nil {
				writeSeries(w, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", pages*float64(os.Getpagesize()))
			}
		}
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		writeSeries(w, "process_open_fds", "gauge", "Number of open file descriptors.", float64(len(fds)))
	}
	writeSeries(w, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
		float64(processStart.UnixNano())/1e9)
	writeSeries(w, "go_goroutines", "gauge", "Number of goroutines that currently exist.", float64(runtime.NumGoroutine()))
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(samples)
	if samples[0].Value.Kind() == metrics.KindUint64 {
		writeSeries(w, "go_memstats_heap_alloc_bytes", "gauge", "Number of heap bytes allocated and still in use.", float64(samples[0].Value.Uint64()))
	}
	if samples[1].Value.Kind() == metrics.KindUint64 {
		writeSeries(w, "go_gc_cycles_total", "counter", "Completed garbage collection cycles.", float64(samples[1].Value.Uint64()))
	}
}

// writeSeries writes a metric of one series without labels, of type typ.
func writeSeries(w io.Writer, name, typ, help string, v float64) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", name, help, name, typ, name, strconv.FormatFloat(v, 'g', -1, 64))
}

func writeHistogram(w io.Writer, name, help string, h controller.Histogram) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	for i, b := range h.Bounds {
		fmt.Fprintf(w, "%s_bucket{le=%q} %d\n", name, strconv.FormatFloat(b, 'g', -1, 64), h.Counts[i])
	}
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, h.Count, name, h.Sum, name, h.Count)
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
