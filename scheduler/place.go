package scheduler

import (
	"fmt"
	"math"
	"slices"

	"github.com/berth-dev/berth"
)

// Placements: how a pass chooses among the workers a task fits now
// (Config.Placement).
const (
	// PlacementDefault is Berth's best fit: the worker with the fewest
	// free GPUs, the earlier one among equals.
	PlacementDefault = ""
	// PlacementBestFit is the best fit of Weng et al.'s baseline (and of
	// Kubernetes' MostAllocated): the worker with the least capacity left
	// once the task is placed, GPUs, CPUs and memory each as a share of
	// the worker's, summed.
	PlacementBestFit = "bestfit"
	// PlacementFGD is fragmentation gradient descent (Weng et al., USENIX
	// ATC '23): the worker and GPU where the fragmentation measured
	// against the mix of recent requests (Fragmentation, Mix) grows
	// least.
	PlacementFGD = "fgd"
)

// demandOf returns what one member of t asks for, as a demand of the mix.
func demandOf(t *Task) Demand {
	r := &t.Resources
	d := Demand{GPUs: r.GPUs, GPUType: r.GPUType, GPUMemory: r.GPUMemory, CPUs: r.CPUs, Memory: r.Memory}
	switch {
	case r.GPUMilli > 0:
		d.GPUs, d.Milli = 1, r.GPUMilli
	case d.GPUs > 0:
		d.Milli = berth.WholeGPU
	}
	return d
}

// scoredFit returns the fitting worker, with the GPUs one member of t
// would take there, that the placement scores lowest; ties go to the
// worker with the fewest free GPUs, then the earlier one. It sets the
// placement's note (p.why, Assignment.Why).
func (p *pass) scoredFit(t *Task) (*worker, []int) {
	var best *worker
	var bestGPUs []int
	bestScore, fitting := math.Inf(1), 0
	var mix []MixEntry
	if p.cfg.Placement == PlacementFGD {
		mix = p.q.mix.Entries()
	}
	for _, c := range p.eligibleClasses(t) {
		for _, wk := range c.workers {
			g, _, ok := p.fits(wk, t)
			if !ok {
				continue
			}
			fitting++
			p.loadFree(wk)
			before := 0.0
			if mix != nil {
				before = Fragmentation(&FragNode{GPUs: wk.w.GPUs, FreeMilli: p.free, FreeCPUs: wk.cpus, FreeMemory: wk.mem}, mix)
			}
			for _, g := range p.choices(wk, t, g) {
				var s float64
				if mix != nil {
					s = p.fragAfter(wk, t, g, mix) - before
				} else {
					s = p.leftAfter(wk, t, g)
				}
				if best == nil || s < bestScore-1e-9 || (s < bestScore+1e-9 &&
					(wk.freeGPUs < best.freeGPUs || (wk.freeGPUs == best.freeGPUs && wk.order < best.order))) {
					best, bestGPUs, bestScore = wk, g, s
				}
			}
		}
	}
	if best != nil {
		p.why = p.placementNote(bestScore, fitting)
	}
	return best, bestGPUs
}

// placementNote explains the choice of scoredFit.
func (p *pass) placementNote(score float64, fitting int) string {
	if p.cfg.Placement == PlacementFGD {
		return fmt.Sprintf("fgd: fragmentation grows by %.3f GPU here, the least of the %d workers it fits (mix of %d recent requests)",
			score/berth.WholeGPU, fitting, p.q.mix.Len())
	}
	return fmt.Sprintf("bestfit: %.3f of this worker's capacity is left after it (GPUs, CPUs and memory, each a share), the least of the %d workers it fits",
		score, fitting)
}

// choices returns the GPUs one member of t may take on wk, where it fits
// (fits chose fit): for a fraction, each GPU with room for it (where all
// GPUs are alike, one of each amount free, the lowest index); else fit
// alone.
func (p *pass) choices(wk *worker, t *Task, fit []int) [][]int {
	r := &t.Resources
	if r.GPUMilli == 0 {
		return [][]int{fit}
	}
	out := p.choice[:0]
	seen := p.seen[:0]
	for i, g := range wk.w.GPUs {
		alike := wk.cls.homogeneous && slices.Contains(seen, wk.gpuUsed[i])
		if alike || (!wk.cls.homogeneous && !gpuMatches(g, r)) || wk.gpuUsed[i]+r.MilliOn(g) > berth.WholeGPU {
			continue
		}
		seen = append(seen, wk.gpuUsed[i])
		out = append(out, []int{g.Index})
	}
	p.choice, p.seen = out, seen
	return out
}

// loadFree fills p.free with wk's free milli-GPUs per GPU.
func (p *pass) loadFree(wk *worker) {
	p.free = p.free[:0]
	for _, used := range wk.gpuUsed {
		p.free = append(p.free, berth.WholeGPU-used)
	}
}

// fragAfter returns wk's fragmentation against mix once one member of t
// takes gpus there (p.free holds wk's free GPUs).
func (p *pass) fragAfter(wk *worker, t *Task, gpus []int, mix []MixEntry) float64 {
	p.after = append(p.after[:0], p.free...)
	p.take(wk, t, gpus, p.after)
	return Fragmentation(&FragNode{GPUs: wk.w.GPUs, FreeMilli: p.after, FreeCPUs: wk.cpus - t.Resources.CPUs,
		FreeMemory: wk.mem - t.Resources.Memory}, mix)
}

// take subtracts what one member of t takes on gpus from free, per GPU of
// wk.
func (p *pass) take(wk *worker, t *Task, gpus []int, free []int) {
	milli := wk.milliFor(t, gpus)
	for _, idx := range gpus {
		if i := wk.gpuAt(idx); i >= 0 {
			free[i] = max(free[i]-milli, 0)
		}
	}
}

// leftAfter returns the capacity wk has left once one member of t takes
// gpus there: free GPUs, CPUs and memory, each as a share of wk's, summed.
func (p *pass) leftAfter(wk *worker, t *Task, gpus []int) float64 {
	p.after = append(p.after[:0], p.free...)
	p.take(wk, t, gpus, p.after)
	left := 0.0
	if n := len(wk.w.GPUs); n > 0 {
		sum := 0
		for _, f := range p.after {
			sum += f
		}
		left += float64(sum) / float64(n*berth.WholeGPU)
	}
	if wk.w.CPUs > 0 {
		left += (wk.cpus - t.Resources.CPUs) / wk.w.CPUs
	}
	if wk.w.Memory > 0 {
		left += float64(wk.mem-t.Resources.Memory) / float64(wk.w.Memory)
	}
	return left
}
