package web

import (
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/controller"
)

// queueRow is the capacity and backlog of one queue (or, for the total,
// of the whole cluster).
type queueRow struct {
	Queue   string
	Workers int // workers that serve it and take work from it
	GPUs    int // their GPUs, faulty ones left out
	Busy    int // of those, held by active attempts (any queue's)
	Free    int
	Off     int // GPUs of workers that serve it but take nothing from it: parked, draining, disconnected, lost, turned off for it, or faulty
	Depth   int // pending jobs
	Oldest  time.Time
}

// overviewData is the overview page.
type overviewData struct {
	Queues        []queueRow
	Total         queueRow
	WorkerStates  []stateCount
	Jobs          []stateCount
	Throughput5m  string
	Throughput1h  string
	Ranges        []string
	Range         string
	BusyPlot      template.HTML
	UtilPlot      template.HTML // mean utilization of the GPUs that report it; none for declared GPUs
	DepthPlot     template.HTML
	SampleEvery   string
	SamplesKept   string
	QueuesVisible bool // the identity sees every user's jobs: backlog and throughput shown
}

type stateCount struct {
	State string
	N     int
}

// plotRanges are the spans the overview's plots may cover.
var plotRanges = map[string]time.Duration{"1h": time.Hour, "6h": 6 * time.Hour, "24h": 24 * time.Hour}

func (h *Handler) overview(r *http.Request) (string, any, error) {
	ctx := r.Context()
	m, err := h.cfg.Ctl.Metrics(ctx)
	if err != nil {
		return "", nil, err
	}
	workers, err := h.cfg.Ctl.Workers(ctx)
	if err != nil {
		return "", nil, err
	}
	who := api.IdentityOf(r)
	d := &overviewData{QueuesVisible: who.SeesAllJobs(), Ranges: []string{"1h", "6h", "24h"}, Range: "6h",
		SampleEvery: formatDuration(h.cfg.SampleEvery), SamplesKept: formatDuration(SampleWindow)}
	if v := r.URL.Query().Get("range"); v != "" {
		if _, ok := plotRanges[v]; !ok {
			return "", nil, berth.Invalidf("range", "%q is not a plot range (1h, 6h, 24h)", v)
		}
		d.Range = v
	}
	d.Queues, d.Total = capacity(workers, m)
	d.WorkerStates = workerStates(workers) // the table's snapshot: ready + busy is its workers taking work

	now := h.cfg.Now()
	samples := h.samples.since(now.Add(-plotRanges[d.Range]))
	from := now.Add(-plotRanges[d.Range])
	d.BusyPlot = plot("plot-busy", "Busy GPUs", "GPUs", samples, func(s sample) int { return s.Busy }, from, now)
	if reported := slices.DeleteFunc(slices.Clone(samples), func(s sample) bool { return s.Util < 0 }); len(reported) > 0 {
		d.UtilPlot = plot("plot-util", "GPU utilization", "%", reported, func(s sample) int { return s.Util }, from, now)
	}
	if d.QueuesVisible {
		for _, st := range []berth.JobState{berth.JobPending, berth.JobRunning, berth.JobSucceeded, berth.JobFailed, berth.JobCancelled} {
			d.Jobs = append(d.Jobs, stateCount{string(st), m.Jobs[st]})
		}
		d.DepthPlot = plot("plot-depth", "Queue depth", "pending jobs", samples, func(s sample) int { return s.Depth }, from, now)
		recent := h.samples.since(now.Add(-time.Hour))
		d.Throughput5m, d.Throughput1h = "not enough samples yet", "not enough samples yet"
		if v, ok := throughput(recent, now, finished(m.Jobs), 5*time.Minute); ok {
			d.Throughput5m = fmt.Sprintf("%.1f jobs/min", v)
		}
		if v, ok := throughput(recent, now, finished(m.Jobs), time.Hour); ok {
			d.Throughput1h = fmt.Sprintf("%.1f jobs/min", v)
		}
	}
	return "", d, nil
}

// capacity sums the GPUs of workers per queue they serve, and for the
// whole cluster. A worker takes work when it is ready or busy (parked,
// draining, disconnected and lost workers are not capacity) and, for one
// queue, when its host's controls leave that queue on. Queues are those
// workers name, those with pending jobs, and the default queue when a
// worker serves every queue.
func capacity(workers []*berth.Worker, m *controller.Metrics) (rows []queueRow, total queueRow) {
	names := map[string]bool{}
	for _, w := range workers {
		if len(w.Queues) == 0 {
			names[berth.DefaultQueue] = true
		}
		for _, q := range w.Queues {
			names[q] = true
		}
	}
	for q := range m.QueueDepth {
		names[q] = true
	}
	queues := make([]string, 0, len(names))
	for q := range names {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	byQueue := map[string]*queueRow{}
	rows = make([]queueRow, len(queues))
	for i, q := range queues {
		rows[i] = queueRow{Queue: q, Depth: m.QueueDepth[q], Oldest: m.OldestPending[q]}
		byQueue[q] = &rows[i]
	}
	total.Queue = "all queues"
	for _, w := range workers {
		usable := max(len(w.GPUs)-len(w.FaultyGPUs), 0)
		busy := min(m.GPUsInUse[w.ID], usable)
		working := w.State == berth.WorkerReady || w.State == berth.WorkerBusy
		add := func(row *queueRow, on bool) {
			if on {
				row.Workers++
				row.GPUs += usable
				row.Busy += busy
				row.Off += len(w.GPUs) - usable
			} else {
				row.Off += len(w.GPUs)
			}
		}
		add(&total, working)
		for _, q := range queues {
			if w.Serves(q) {
				add(byQueue[q], working && !queueOff(w.Controls, q))
			}
		}
	}
	for i := range rows {
		rows[i].Free = rows[i].GPUs - rows[i].Busy
	}
	total.Free = total.GPUs - total.Busy
	for q, n := range m.QueueDepth {
		total.Depth += n
		if t := m.OldestPending[q]; !t.IsZero() && (total.Oldest.IsZero() || t.Before(total.Oldest)) {
			total.Oldest = t
		}
	}
	return rows, total
}

// queueOff reports whether controls turn queue off: the control naming
// the queue wins over the host's every-queue control; none means on.
func queueOff(controls []*berth.WorkerControl, queue string) bool {
	var all *berth.WorkerControl
	for _, c := range controls {
		switch c.Queue {
		case queue:
			return c.Off()
		case berth.AllQueues:
			all = c
		}
	}
	return all != nil && all.Off()
}
