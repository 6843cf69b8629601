package sim

import (
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
)

// Result is what one replay measured. Times are in seconds of virtual
// time, except WallSeconds.
//
//   - Makespan: from the first submission to the last completion.
//   - GPUUtilization: busy GPU-seconds ÷ (GPUs in the cluster × makespan); a
//     GPU is busy while an attempt holds it, including attempts later
//     preempted, and a fraction's share of it while the fraction runs.
//   - JCT (job completion time): completion − submission, of completed jobs.
//   - Wait: time pending, summed over every time a job waited (preempted
//     jobs wait again), of completed jobs.
//   - Fragmentation: after Weng et al., "Beware of Fragmentation" (USENIX
//     ATC '23), for whole GPUs. The target workload M is the per-node
//     requests (GPUs, GPU type and memory, CPUs, memory) of the trace's GPU
//     jobs, each shape m weighted by its share p_m of them. Worker n's
//     fragmented GPUs are F_n = Σ_m p_m · free_m(n) · [m fits n idle ∧ m
//     does not fit n now], free_m(n) being n's free GPUs of the type and
//     memory m asks for. At an instant the cluster's fragmentation is
//     Σ_n F_n ÷ Σ_n free GPUs (0 when none is free): the share of free GPUs
//     a job drawn from the workload could not use because of what runs
//     beside them. Fragmentation is its time average over the makespan.
//   - LongestStarvation: the largest Wait, and the job that waited it.
//   - Passes: scheduler.RunPass calls; Examined: pending tasks those passes
//     looked at.
type Result struct {
	Policy                   string         `json:"policy"`
	Jobs                     int            `json:"jobs"`
	Completed                int            `json:"completed"`
	Unschedulable            int            `json:"unschedulable"`
	UnschedulableReasons     map[string]int `json:"unschedulable_reasons,omitempty"` // reason → jobs
	TimedOut                 int            `json:"timed_out"`                       // completed jobs stopped at max_runtime
	Workers                  int            `json:"workers"`
	GPUs                     int            `json:"gpus"`
	MakespanSeconds          float64        `json:"makespan_s"`
	GPUUtilization           float64        `json:"gpu_utilization"`
	JCT                      Stats          `json:"jct_s"`
	Wait                     Stats          `json:"wait_s"`
	Fragmentation            float64        `json:"fragmentation"`
	Preemptions              int            `json:"preemptions"`
	LongestStarvationSeconds float64        `json:"longest_starvation_s"`
	LongestStarvationJob     string         `json:"longest_starvation_job,omitempty"`
	Passes                   int            `json:"passes"`
	Examined                 int            `json:"examined"`
	WallSeconds              float64        `json:"wall_s"`
	// Outcomes is each job's fate, in submission order.
	Outcomes []Outcome `json:"-"`
}

// Stats summarises a distribution of seconds. Percentiles are nearest-rank:
// the smallest value with at least p% of the values at or below it.
type Stats struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// Outcome is what happened to one job. Start is the start of its last
// attempt; Start and End are zero for a dropped job, Reason says why it
// was dropped.
type Outcome struct {
	ID          string
	Submit      time.Duration // after virtual time zero
	Start       time.Duration
	End         time.Duration
	Wait        time.Duration
	Preemptions int
	Completed   bool
	Reason      string
}

// Outcome returns the outcome of the job with id (a linear search), and
// false if there is none.
func (r *Result) Outcome(id string) (Outcome, bool) {
	for _, o := range r.Outcomes {
		if o.ID == id {
			return o, true
		}
	}
	return Outcome{}, false
}

// result gathers the metrics once the replay has ended.
func (e *engine) result() Result {
	res := Result{Jobs: len(e.jobs), Workers: len(e.workers), GPUs: e.meter.gpus, Passes: e.passes,
		Examined: e.examined, Outcomes: make([]Outcome, 0, len(e.jobs))}
	var jct, wait []float64
	var first, last time.Time
	for i, j := range e.jobs {
		if i == 0 {
			first = j.task.Submitted
		}
		o := Outcome{ID: j.spec.ID, Submit: j.spec.Submit, Wait: j.waited, Preemptions: j.preempt, Reason: j.reason}
		switch j.state {
		case finished:
			o.Completed, o.Start, o.End = true, j.started.Sub(epoch), j.ended.Sub(epoch)
			res.Completed++
			if j.spec.MaxRuntime > 0 && j.spec.MaxRuntime < j.spec.Duration {
				res.TimedOut++
			}
			jct = append(jct, j.ended.Sub(j.task.Submitted).Seconds())
			wait = append(wait, j.waited.Seconds())
			if j.ended.After(last) {
				last = j.ended
			}
			if s := j.waited.Seconds(); res.LongestStarvationJob == "" || s > res.LongestStarvationSeconds {
				res.LongestStarvationSeconds, res.LongestStarvationJob = s, j.spec.ID
			}
		case dropped:
			res.Unschedulable++
			if res.UnschedulableReasons == nil {
				res.UnschedulableReasons = map[string]int{}
			}
			res.UnschedulableReasons[j.reason]++
		}
		res.Outcomes = append(res.Outcomes, o)
		res.Preemptions += j.preempt
	}
	if res.Completed > 0 {
		res.MakespanSeconds = last.Sub(first).Seconds()
	}
	if span := res.MakespanSeconds; span > 0 && e.meter.gpus > 0 {
		res.GPUUtilization = e.meter.busySeconds / (float64(e.meter.gpus*berth.WholeGPU) * span)
		res.Fragmentation = e.meter.fragSeconds / span
	}
	res.JCT, res.Wait = stats(jct), stats(wait)
	return res
}

// stats summarises values (seconds); it sorts them.
func stats(values []float64) Stats {
	if len(values) == 0 {
		return Stats{}
	}
	sort.Float64s(values)
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(values)))) - 1
		return values[min(max(i, 0), len(values)-1)]
	}
	return Stats{Mean: sum / float64(len(values)), P50: rank(0.50), P95: rank(0.95), P99: rank(0.99), Max: values[len(values)-1]}
}

// fragShape is the per-node request of the workload's GPU jobs of one
// kind, with its share of those jobs.
type fragShape struct {
	gpus    int
	gpuType string
	gpuMem  berth.Bytes
	cpus    float64
	mem     berth.Bytes
	weight  float64
}

// meter integrates busy GPUs and fragmentation (as Result defines it)
// over virtual time, recomputing F_n only for the workers whose free
// resources changed since the last instant.
type meter struct {
	workers     []*scheduler.Worker
	gpus        int
	shapes      []fragShape
	capable     [][]int32 // per worker, the shapes an idle worker fits
	frag        []float64 // per worker, F_n
	free        []int     // per worker, free GPUs
	sumFrag     float64
	sumFree     int
	dirty       []int
	isDirty     []bool
	busy        int // milli-GPUs held now
	busySeconds float64
	fragSeconds float64
}

func newMeter(workers []*scheduler.Worker, jobs []*job) *meter {
	m := &meter{workers: workers, capable: make([][]int32, len(workers)), frag: make([]float64, len(workers)),
		free: make([]int, len(workers)), isDirty: make([]bool, len(workers))}
	m.shapes = workloadShapes(jobs)
	for i, w := range workers {
		m.gpus += len(w.GPUs)
		m.free[i] = len(w.GPUs)
		m.sumFree += len(w.GPUs)
		for s := range m.shapes {
			if m.fits(w, &m.shapes[s], true) {
				m.capable[i] = append(m.capable[i], int32(s))
			}
		}
	}
	return m
}

// workloadShapes returns the distinct per-node requests of the GPU jobs,
// weighted by their share of them, in a fixed order.
func workloadShapes(jobs []*job) []fragShape {
	count := map[fragShape]int{}
	total := 0
	for _, j := range jobs {
		r := &j.task.Resources
		if r.GPUs == 0 {
			continue
		}
		count[fragShape{gpus: r.GPUs, gpuType: strings.ToLower(r.GPUType), gpuMem: r.GPUMemory, cpus: r.CPUs, mem: r.Memory}]++
		total++
	}
	shapes := make([]fragShape, 0, len(count))
	for s, n := range count {
		s.weight = float64(n) / float64(total)
		shapes = append(shapes, s)
	}
	slices.SortFunc(shapes, func(a, b fragShape) int {
		switch {
		case a.gpus != b.gpus:
			return a.gpus - b.gpus
		case a.gpuType != b.gpuType:
			return strings.Compare(a.gpuType, b.gpuType)
		case a.gpuMem != b.gpuMem:
			return int(min(max(a.gpuMem-b.gpuMem, -1), 1))
		case a.cpus != b.cpus:
			return int(math.Copysign(1, a.cpus-b.cpus))
		}
		return int(min(max(a.mem-b.mem, -1), 1))
	})
	return shapes
}

// fits reports whether one member of s fits w, idle or as it is now, and
// returns with it the GPUs of w that s could use.
func (m *meter) fits(w *scheduler.Worker, s *fragShape, idle bool) bool {
	_, ok := m.usable(w, s, idle)
	return ok
}

func (m *meter) usable(w *scheduler.Worker, s *fragShape, idle bool) (int, bool) {
	gpus := 0
	for g, gpu := range w.GPUs {
		if (idle || w.GPUMilliUsed[g] == 0) && matches(gpu, s) {
			gpus++
		}
	}
	cpus, mem := w.FreeCPUs, w.FreeMemory
	if idle {
		cpus, mem = w.CPUs, w.Memory
	}
	return gpus, gpus >= s.gpus && cpus >= s.cpus && mem >= s.mem
}

// matches mirrors the scheduler's rule: the model is of the type
// (berth.GPU.HasType), and the GPU has the memory asked for.
func matches(g berth.GPU, s *fragShape) bool {
	return (s.gpuMem == 0 || g.Memory >= s.gpuMem) && g.HasType(s.gpuType)
}

// changed notes that worker i's free resources changed.
func (m *meter) changed(i int) {
	if !m.isDirty[i] {
		m.isDirty[i] = true
		m.dirty = append(m.dirty, i)
	}
}

// refresh recomputes F_n of the workers that changed.
func (m *meter) refresh() {
	for _, i := range m.dirty {
		m.isDirty[i] = false
		w := m.workers[i]
		free := 0
		for _, used := range w.GPUMilliUsed {
			if used == 0 {
				free++
			}
		}
		f := 0.0
		if free > 0 {
			for _, s := range m.capable[i] {
				sh := &m.shapes[s]
				if usable, ok := m.usable(w, sh, false); !ok {
					f += sh.weight * float64(usable)
				}
			}
		}
		m.sumFrag += f - m.frag[i]
		m.sumFree += free - m.free[i]
		m.frag[i], m.free[i] = f, free
	}
	m.dirty = m.dirty[:0]
}

// advance adds dt of the current state to the integrals.
func (m *meter) advance(dt time.Duration) {
	m.refresh()
	if dt <= 0 {
		return
	}
	s := dt.Seconds()
	m.busySeconds += float64(m.busy) * s
	if m.sumFree > 0 {
		m.fragSeconds += max(m.sumFrag, 0) / float64(m.sumFree) * s
	}
}
