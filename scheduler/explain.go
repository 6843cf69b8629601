package scheduler

import (
	"fmt"
	"strings"

	"github.com/berth-dev/berth"
)

// whyNot says why t found no place in this pass.
func (p *pass) whyNot(t *Task) Reason {
	if r := p.staticFor(t); r.Code != "" {
		return r
	}
	if p.sawRes != nil {
		return Reason{ReasonReserved, fmt.Sprintf("the resources it fits are reserved for job %s", p.sawRes.task.JobID)}
	}
	if t.Resources.GPUMilli > 0 {
		if most, ok := p.mostFree(t); ok {
			return Reason{ReasonCapacity, fractionWait(t) + fmt.Sprintf("; the most free on one that fits is %d", most)}
		}
	}
	return capacityReason(t)
}

// mostFree returns the most milli-GPUs free on one GPU matching a fraction
// t on the workers that could take it now but for their GPUs (on, with a
// slot, CPUs and memory for it), and whether t waits for GPU share there:
// none of those GPUs has room for it.
func (p *pass) mostFree(t *Task) (most int, short bool) {
	r := &t.Resources
	most, seen := 0, false
	for _, c := range p.eligibleClasses(t) {
		for _, wk := range c.workers {
			if wk.w.Off || wk.slots <= 0 || wk.cpus < r.CPUs || wk.mem < r.Memory {
				continue
			}
			for i, g := range wk.w.GPUs {
				if !gpuMatches(g, r) {
					continue
				}
				free := berth.WholeGPU - wk.gpuUsed[i]
				if free >= r.MilliOn(g) {
					return 0, false // share is there: something else holds t back
				}
				most, seen = max(most, free), true
			}
		}
	}
	return most, seen
}

// fractionWait says what a fraction t waits for: "no GPU with 500 milli
// free (0.5 of a GPU)".
func fractionWait(t *Task) string {
	r := &t.Resources
	return fmt.Sprintf("no GPU with %d milli free (%s of a GPU%s)", r.GPUMilli, berth.FormatGPUs(r.GPUMilli), gpuDesc(r))
}

// staticFor returns the static reason of t's shape on the pass's workers
// (see staticReason), worked out once a pass.
func (p *pass) staticFor(t *Task) Reason {
	r, ok := p.statics[t.shape]
	if !ok {
		r = staticReason(p.groups(t), t)
		p.statics[t.shape] = r
	}
	return r
}

// groups returns the pass's workers as groups: one per class, or one per
// worker of t's host when t names one.
func (p *pass) groups(t *Task) []group {
	var out []group
	if t.shape.host != "" {
		for _, wk := range p.byHost[t.shape.host] {
			out = append(out, group{w: wk.w, n: 1, on: onCount(wk.w)})
		}
		return out
	}
	for _, c := range p.classOrder {
		g := group{w: c.rep, n: len(c.workers)}
		for _, wk := range c.workers {
			g.on += onCount(wk.w)
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
	if t.Resources.GPUMilli > 0 {
		return Reason{ReasonCapacity, fmt.Sprintf("waiting for free resources (%s of a GPU%s: %d milli free on one GPU)",
			berth.FormatGPUs(t.Resources.GPUMilli), gpuDesc(&t.Resources), t.Resources.GPUMilli)}
	}
	return Reason{ReasonCapacity, "waiting for free resources"}
}

// group is n alike workers, on of them on.
type group struct {
	w     *Worker
	n, on int
}

// The requirements a worker must meet to take one member of a task, in the
// order reasons name them.
const (
	needHost = iota
	needQueue
	needLabels
	needGPUs
	needCPUs
	needMemory
	needs
)

// tally counts the workers that meet requirements: all of them, and on
// those that could take work now (on, with the task's queue not turned off).
type tally struct{ all, on int }

// staticReason says why no worker of groups could take t regardless of
// what runs: none has its host, serves its queue, has its labels, GPUs,
// CPUs or memory (or not enough distinct ones for a gang), or every such
// worker is off. The zero Reason means enough workers could.
func staticReason(groups []group, t *Task) Reason {
	var met [needs]tally // met[i]: workers meeting requirements 0 to i
	for _, g := range groups {
		on := g.on
		if g.w.offFor(t.Queue) {
			on = 0
		}
		for i := range requirementsMet(g.w, t) {
			met[i].all += g.n
			met[i].on += on
		}
	}
	return shortfall(&met, t)
}

// requirementsMet counts the requirements w meets for t before the first
// it fails.
func requirementsMet(w *Worker, t *Task) int {
	r := &t.Resources
	switch {
	case t.Constraints.Host != "" && t.Constraints.Host != w.Host:
		return needHost
	case !w.serves(t.Queue):
		return needQueue
	case !hasLabels(w, t.Constraints.Labels):
		return needLabels
	case matchingGPUs(w, r) < r.GPUDevices():
		return needGPUs
	case w.CPUs < r.CPUs:
		return needCPUs
	case w.Memory < r.Memory:
		return needMemory
	}
	return needs
}

// shortfall names the first requirement of t too few workers meet, counting
// in a gang's message only the workers that could take work; a requirement
// t does not ask for is never named.
func shortfall(met *[needs]tally, t *Task) Reason {
	need := t.nodes()
	among := "" // the workers counted, when some were left out for not serving t's queue
	if met[needQueue].all < met[needHost].all {
		among = fmt.Sprintf(" serving queue %q", t.Queue)
	}
	for i, m := range met {
		if m.all >= need {
			continue
		}
		if i == needQueue && (m.all == 0 || m.all < met[needHost].all) {
			return queueReason(m, t)
		}
		if what := requirement(i, t); what != "" {
			return unfit(need, m.on, among, what)
		}
	}
	last := met[needs-1]
	switch {
	case last.all < need:
		return unfit(need, last.on, among, "")
	case last.on < need:
		return Reason{ReasonOff, fmt.Sprintf("the workers that fit are off or disconnected (%d of %d on)", last.on, last.all)}
	}
	return Reason{}
}

// requirement names what requirement i asks of each worker for t, or ""
// when t asks nothing of it.
func requirement(i int, t *Task) string {
	r := &t.Resources
	switch {
	case i == needHost && t.Constraints.Host != "":
		return fmt.Sprintf("host %q", t.Constraints.Host)
	case i == needLabels && len(t.Constraints.Labels) > 0:
		return "the required labels"
	case i == needGPUs && r.GPUMilli > 0:
		return "a GPU" + gpuDesc(r) + " to share"
	case i == needGPUs && r.GPUs > 0:
		return berth.Count(r.GPUs, "GPU") + gpuDesc(r)
	case i == needCPUs && r.CPUs > 0:
		return berth.Count(r.CPUs, "CPU")
	case i == needMemory && r.Memory > 0:
		return r.Memory.String() + " of memory"
	}
	return ""
}

// unfit says that too few workers (among: of those, e.g. ` serving queue
// "gpu"`) have what: "no worker has 8 GPUs", or for a gang "needs 4
// workers with 8 GPUs; 3 exist" (what "" names nothing).
func unfit(need, exist int, among, what string) Reason {
	if need > 1 {
		if what != "" {
			what = " with " + what
		}
		return Reason{ReasonUnfit, fmt.Sprintf("needs %d workers%s%s; %d exist", need, among, what, exist)}
	}
	return Reason{ReasonUnfit, "no worker" + among + " has " + what}
}

// queueReason says that too few workers (of t's host) serve t's queue, m
// of them.
func queueReason(m tally, t *Task) Reason {
	if m.all > 0 {
		return Reason{ReasonUnfit, fmt.Sprintf("needs %d workers serving queue %q; %d exist", t.nodes(), t.Queue, m.on)}
	}
	if t.Constraints.Host != "" {
		return Reason{ReasonUnfit, fmt.Sprintf("no worker with host %q serves queue %q", t.Constraints.Host, t.Queue)}
	}
	return Reason{ReasonUnfit, fmt.Sprintf("no worker serves queue %q", t.Queue)}
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
				out[i].Message += " (" + berth.Count(ahead, "job") + " ahead in order)"
			}
			delete(behind, o)
		}
		ahead++
		return true
	})
	return out
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
