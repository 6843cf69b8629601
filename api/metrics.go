package api

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/controller"
)

// metrics writes the Prometheus text exposition format.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	m, err := s.ctl.Metrics(r.Context())
	if err != nil {
		writeError(w, err)
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
	fmt.Fprintln(w, "# HELP berth_capacity_gpus GPUs of workers taking work (parked, disconnected and lost workers and faulty GPUs excluded).")
	fmt.Fprintln(w, "# TYPE berth_capacity_gpus gauge")
	fmt.Fprintf(w, "berth_capacity_gpus %d\n", m.CapacityGPUs)
	writeHistogram(w, "berth_scheduling_latency_seconds", "Submit to placement on a worker.", m.PlaceLatency)
	writeHistogram(w, "berth_start_latency_seconds", "Submit to process started.", m.StartLatency)
	writeHistogram(w, "berth_scheduler_pass_seconds", "Duration of one scheduling pass.", m.ScheduleLength)
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
