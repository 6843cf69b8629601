package scheduler

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/berth-dev/berth"
)

// whyNot says why t found no place in this pass.
func (p *pass) whyNot(t *Task) Reason {
	r, ok := p.statics[t.shape]
	if !ok {
		r = staticReason(p.groups(t), t)
		p.statics[t.shape] = r
	}
	if r.Code != "" {
		return r
	}
	if p.sawRes != nil {
		return Reason{ReasonReserved, fmt.Sprintf("the resources it fits are reserved for job %s", p.sawRes.task.JobID)}
	}
	return capacityReason(t)
}

// groups returns the pass's workers as groups: one per class, or one per
// worker of t's host when t names one.
func (p *pass) groups(t *Task) []group {
	var out []group
	if t.shape.host != "" {
		for _, n := range p.byHost[t.shape.host] {
			out = append(out, group{w: n.w, n: 1, on: onCount(n.w)})
		}
		return out
	}
	for _, c := range p.classOrder {
		g := group{w: c.rep, n: len(c.nodes)}
		for _, n := range c.nodes {
			g.on += onCount(n.w)
		}
		out = append(out, g)
	}
	return out
}

func onCount(w *Worker) int {
	if w.Off {
		return 0
	}
	return 1
}

func capacityReason(t *Task) Reason {
	if n := t.nodes(); n > 1 {
		return Reason{ReasonCapacity, fmt.Sprintf("waiting for %d workers to be free at once", n)}
	}
	return Reason{ReasonCapacity, "waiting for free resources"}
}

// group is n alike workers, on of them on.
type group struct {
	w     *Worker
	n, on int
}

// staticReason says why no worker of groups could take t regardless of
// what runs: none serves its queue, has its host, labels, GPUs, CPUs or
// memory (or not enough distinct ones for a gang), or every such worker is
// off. The zero Reason means enough workers could.
func staticReason(groups []group, t *Task) Reason {
	r := &t.Resources
	need := t.nodes()
	var serving, hostOK, labelsOK, gpuOK, cpuOK, memOK, on int
	for _, g := range groups {
		w := g.w
		if !w.serves(t.Queue) {
			continue
		}
		serving += g.n
		if t.Constraints.Host != "" && t.Constraints.Host != w.Host {
			continue
		}
		hostOK += g.n
		if !hasLabels(w, t.Constraints.Labels) {
			continue
		}
		labelsOK += g.n
		matching := 0
		for _, gpu := range w.GPUs {
			if gpuMatches(gpu, r) {
				matching++
			}
		}
		if matching < r.GPUs {
			continue
		}
		gpuOK += g.n
		if w.CPUs < r.CPUs {
			continue
		}
		cpuOK += g.n
		if w.Memory < r.Memory {
			continue
		}
		memOK += g.n
		if !w.offFor(t.Queue) {
			on += g.on
		}
	}
	workersWith := func(n int, what string) Reason {
		if need > 1 {
			return Reason{ReasonUnfit, fmt.Sprintf("needs %d workers with %s; %d exist", need, what, n)}
		}
		return Reason{ReasonUnfit, "no worker has " + what}
	}
	switch {
	case serving == 0:
		return Reason{ReasonUnfit, fmt.Sprintf("no worker serves queue %q", t.Queue)}
	case hostOK < need && t.Constraints.Host != "":
		if need > 1 {
			return Reason{ReasonUnfit, fmt.Sprintf("a gang of %d cannot run on the one host %q", need, t.Constraints.Host)}
		}
		return Reason{ReasonUnfit, fmt.Sprintf("no worker with host %q serves queue %q", t.Constraints.Host, t.Queue)}
	case labelsOK < need:
		return workersWith(labelsOK, "the required labels")
	case gpuOK < need:
		return workersWith(gpuOK, count(float64(r.GPUs), "GPU")+gpuDesc(r))
	case cpuOK < need:
		return workersWith(cpuOK, count(r.CPUs, "CPU"))
	case memOK < need:
		return workersWith(memOK, r.Memory.String()+" of memory")
	case on < need:
		return Reason{ReasonOff, fmt.Sprintf("the workers that fit are off or disconnected (%d of %d on)", on, memOK)}
	}
	return Reason{}
}

// ExplainAll says why each of ts is pending on the snapshot's workers: no
// worker could ever take it (and which requirement fails), they are off, or
// it waits for capacity behind the tasks ahead of it. It walks the queue's
// order once for all of them.
func ExplainAll(q *Queue, ts []*Task, s *Snapshot) []Reason {
	groups := make([]group, len(s.Workers))
	for i, w := range s.Workers {
		groups[i] = group{w: w, n: 1, on: onCount(w)}
	}
	out := make([]Reason, len(ts))
	behind := map[*Task]int{} // index in ts of each task that waits for capacity
	for i, t := range ts {
		if out[i] = staticReason(groups, t); out[i].Code == "" {
			out[i] = capacityReason(t)
			behind[t] = i
		}
	}
	ahead := 0
	q.Ordered(s.Now, func(o *Task) bool {
		if len(behind) == 0 {
			return false
		}
		if i, ok := behind[o]; ok {
			if ahead > 0 {
				out[i].Message += " (" + count(float64(ahead), "job") + " ahead in order)"
			}
			delete(behind, o)
		}
		ahead++
		return true
	})
	return out
}

// count writes n of noun: "1 GPU", "2 GPUs", "0.5 CPUs".
func count(n float64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatFloat(n, 'g', -1, 64) + " " + noun + "s"
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
