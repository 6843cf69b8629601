package web

import (
	"net/http"
	"slices"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
)

// workerRow is one worker: what it is and does (observed) beside what
// people asked of its host (desired).
type workerRow struct {
	*berth.Worker
	GPUsInUse int
	Desired   []*berth.WorkerControl // its host's stored controls; none: every queue on
	Choices   []string               // the queues a control may name: "*" (every queue), then those it serves
}

// workersData is the workers page.
type workersData struct {
	Workers  []workerRow
	Orphans  []*berth.WorkerControl // controls of hosts with no known worker
	States   []stateCount
	Policies []string
	Operator bool
}

// workers lists every worker with its observed state, GPUs and running
// attempts, and its host's desired state, from three reads in all (the
// controller's workers and metrics, the store's controls), whatever the
// number of workers.
func (h *Handler) workers(r *http.Request) (string, any, error) {
	ctx := r.Context()
	list, err := h.cfg.Ctl.Workers(ctx)
	if err != nil {
		return "", nil, err
	}
	m, err := h.cfg.Ctl.Metrics(ctx)
	if err != nil {
		return "", nil, err
	}
	controls, err := h.cfg.Store.WorkerControls(ctx)
	if err != nil {
		return "", nil, err
	}
	byHost := map[string][]*berth.WorkerControl{}
	for _, c := range controls {
		byHost[c.Host] = append(byHost[c.Host], c)
	}
	d := &workersData{Policies: []string{berth.StopDrain, berth.StopPause, berth.StopHard}, Operator: api.IdentityOf(r).ActsOnAllJobs()}
	// A worker serving every queue may have any queue turned off: offer
	// those that other workers name, and the default queue.
	every := []string{berth.DefaultQueue}
	for _, w := range list {
		for _, q := range w.Queues {
			if !slices.Contains(every, q) {
				every = append(every, q)
			}
		}
	}
	slices.Sort(every)
	known := map[string]bool{}
	for _, w := range list {
		known[w.Host] = true
		row := workerRow{Worker: w, GPUsInUse: m.GPUsInUse[w.ID], Desired: byHost[w.Host]}
		queues := w.Queues
		if len(queues) == 0 {
			queues = every
		}
		row.Choices = append([]string{berth.AllQueues}, queues...)
		d.Workers = append(d.Workers, row)
	}
	for _, c := range controls {
		if !known[c.Host] {
			d.Orphans = append(d.Orphans, c)
		}
	}
	d.States = workerStates(list)
	return "", d, nil
}

// workerStates counts workers by observed state, every state listed.
func workerStates(workers []*berth.Worker) []stateCount {
	count := map[berth.WorkerState]int{}
	for _, w := range workers {
		count[w.State]++
	}
	var out []stateCount
	for _, st := range []berth.WorkerState{berth.WorkerReady, berth.WorkerBusy, berth.WorkerDraining, berth.WorkerParked,
		berth.WorkerDisconnected, berth.WorkerLost} {
		out = append(out, stateCount{string(st), count[st]})
	}
	return out
}
