package scheduler

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// Worker is a worker's free capacity as the scheduler sees it.
type Worker struct {
	ID         string
	Host       string
	Queues     []string // empty: every queue
	Labels     map[string]string
	GPUs       []berth.GPU
	GPUUsed    []bool  // aligned with GPUs
	CPUs       float64 // total
	Memory     berth.Bytes
	FreeCPUs   float64
	FreeMemory berth.Bytes
	FreeSlots  int
	Off        bool // takes no new work (disconnected, parked, off)
}

func (w *Worker) serves(queue string) bool {
	if len(w.Queues) == 0 {
		return true
	}
	for _, q := range w.Queues {
		if q == queue {
			return true
		}
	}
	return false
}

// Assignment places a task on a worker with the listed GPU indexes.
type Assignment struct {
	Task     *Task
	WorkerID string
	GPUs     []int
}

// Plan is what one scheduling pass decided. Later policies add preemptions
// and reservations beside Assignments.
type Plan struct {
	Assignments []Assignment
}

// Schedule places queued tasks on workers in effective-priority order, each
// on the feasible worker it fits best (fewest GPUs left free, then fewest
// CPUs), never overcommitting GPUs, CPUs, memory or slots. It reads q and
// workers and changes neither.
func Schedule(q *Queue, workers []*Worker, now time.Time) Plan {
	free := make([]workerFree, len(workers))
	open := 0
	for i, w := range workers {
		free[i] = workerFree{w: w, gpuUsed: append([]bool(nil), w.GPUUsed...), cpus: w.FreeCPUs, mem: w.FreeMemory, slots: w.FreeSlots}
		if !w.Off && w.FreeSlots > 0 {
			open++
		}
	}
	var plan Plan
	if open == 0 {
		return plan
	}
	full := map[shape]bool{} // shapes that found no worker this pass
	q.Ordered(now, func(t *Task) bool {
		sh := shapeOf(t)
		if full[sh] {
			return true
		}
		best, bestGPUs := -1, []int(nil)
		var bestScore [2]float64
		for i := range free {
			f := &free[i]
			if f.w.Off || f.slots == 0 {
				continue
			}
			gpus, ok := f.fit(t)
			if !ok {
				continue
			}
			score := [2]float64{float64(f.freeGPUs() - len(gpus)), f.cpus - t.Resources.CPUs}
			if best < 0 || score[0] < bestScore[0] || (score[0] == bestScore[0] && score[1] < bestScore[1]) {
				best, bestGPUs, bestScore = i, gpus, score
			}
		}
		if best < 0 {
			full[sh] = true
			return true
		}
		f := &free[best]
		f.take(t, bestGPUs)
		plan.Assignments = append(plan.Assignments, Assignment{Task: t, WorkerID: f.w.ID, GPUs: bestGPUs})
		if f.slots == 0 {
			open--
		}
		return open > 0
	})
	return plan
}

type workerFree struct {
	w       *Worker
	gpuUsed []bool
	cpus    float64
	mem     berth.Bytes
	slots   int
}

func (f *workerFree) freeGPUs() int {
	n := 0
	for _, u := range f.gpuUsed {
		if !u {
			n++
		}
	}
	return n
}

// fit returns the GPUs t would take on f, lowest index first, if t fits now.
func (f *workerFree) fit(t *Task) ([]int, bool) {
	r := &t.Resources
	if !eligible(f.w, t) || r.CPUs > f.cpus || r.Memory > f.mem {
		return nil, false
	}
	if r.GPUs == 0 {
		return nil, true
	}
	gpus := make([]int, 0, r.GPUs)
	for i, g := range f.w.GPUs {
		if !f.gpuUsed[i] && gpuMatches(g, r) {
			gpus = append(gpus, g.Index)
			if len(gpus) == r.GPUs {
				return gpus, true
			}
		}
	}
	return nil, false
}

func (f *workerFree) take(t *Task, gpus []int) {
	for _, idx := range gpus {
		for i, g := range f.w.GPUs {
			if g.Index == idx {
				f.gpuUsed[i] = true
			}
		}
	}
	f.cpus -= t.Resources.CPUs
	f.mem -= t.Resources.Memory
	f.slots--
}

// eligible checks what does not depend on current use: queue, host, labels.
func eligible(w *Worker, t *Task) bool {
	if !w.serves(t.Queue) {
		return false
	}
	if t.Constraints.Host != "" && t.Constraints.Host != w.Host {
		return false
	}
	for k, v := range t.Constraints.Labels {
		if w.Labels[k] != v {
			return false
		}
	}
	return true
}

func gpuMatches(g berth.GPU, r *berth.Resources) bool {
	if r.GPUMemory > 0 && g.Memory < r.GPUMemory {
		return false
	}
	return r.GPUType == "" || strings.Contains(strings.ToLower(g.Model), strings.ToLower(r.GPUType))
}

// shape is what makes two tasks interchangeable for feasibility: if one
// found no worker in a pass, the next of the same shape won't either.
type shape struct {
	queue, host, gpuType, labels string
	gpus                         int
	gpuMem, mem                  berth.Bytes
	cpus                         float64
}

func shapeOf(t *Task) shape {
	s := shape{queue: t.Queue, host: t.Constraints.Host, gpuType: t.Resources.GPUType, gpus: t.Resources.GPUs,
		gpuMem: t.Resources.GPUMemory, mem: t.Resources.Memory, cpus: t.Resources.CPUs}
	if len(t.Constraints.Labels) > 0 {
		keys := make([]string, 0, len(t.Constraints.Labels))
		for k, v := range t.Constraints.Labels {
			keys = append(keys, k+"="+v)
		}
		sort.Strings(keys)
		s.labels = strings.Join(keys, ",")
	}
	return s
}

// Explain says why t is still pending on these workers: no worker could ever
// take it (and which requirement fails), or it waits for capacity, or for
// tasks ahead of it.
func Explain(q *Queue, t *Task, workers []*Worker, now time.Time) string {
	r := &t.Resources
	var serving, hostOK, labelsOK, gpuOK, cpuOK, memOK, on int
	for _, w := range workers {
		if !w.serves(t.Queue) {
			continue
		}
		serving++
		if t.Constraints.Host != "" && t.Constraints.Host != w.Host {
			continue
		}
		hostOK++
		if !eligible(w, t) {
			continue
		}
		labelsOK++
		matching := 0
		for _, g := range w.GPUs {
			if gpuMatches(g, r) {
				matching++
			}
		}
		if matching < r.GPUs {
			continue
		}
		gpuOK++
		if !w.Off {
			on++
		}
		if w.CPUs >= r.CPUs {
			cpuOK++
		}
		if w.Memory >= r.Memory {
			memOK++
		}
	}
	switch {
	case serving == 0:
		return fmt.Sprintf("no worker serves queue %q", t.Queue)
	case hostOK == 0:
		return fmt.Sprintf("no worker with host %q serves queue %q", t.Constraints.Host, t.Queue)
	case labelsOK == 0:
		return "no worker has the required labels"
	case gpuOK == 0:
		return fmt.Sprintf("no worker has %d GPUs%s", r.GPUs, gpuDesc(r))
	case cpuOK == 0:
		return fmt.Sprintf("no worker has %g CPUs", r.CPUs)
	case memOK == 0:
		return fmt.Sprintf("no worker has %s of memory", r.Memory)
	case on == 0:
		return "every worker that fits is off or disconnected"
	}
	ahead := 0
	q.Ordered(now, func(o *Task) bool {
		if o == t {
			return false
		}
		ahead++
		return true
	})
	if ahead > 0 {
		return fmt.Sprintf("waiting for free resources (%d tasks ahead in order)", ahead)
	}
	return "waiting for free resources"
}

func gpuDesc(r *berth.Resources) string {
	var parts []string
	if r.GPUType != "" {
		parts = append(parts, "of type "+r.GPUType)
	}
	if r.GPUMemory > 0 {
		parts = append(parts, "with "+r.GPUMemory.String()+" each")
	}
	if len(parts) == 0 {
		return ""
	}
	return " " + strings.Join(parts, " ")
}
