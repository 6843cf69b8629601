package scheduler

import (
	"cmp"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"

	"github.com/berth-dev/berth"
)

// NeverFits returns an ECodeUnsatisfiable *berth.Error when fewer than
// nodes of ws (at least one) could take one member of a job asking r,
// whatever ran on them: none has that many GPUs of the type and memory
// asked for, or the CPUs, or the memory, or all of them at once. The error
// names the first field at fault and what the workers have ("8 requested;
// the largest worker has 4xH100:80GiB"). Only the workers' totals count:
// what runs, whether they are on and which queues, hosts and labels they
// serve are left to the scheduler. It returns nil when enough fit, and
// when ws is empty (nothing known to check against). It stops at the
// first nodes workers that fit; a refusal walks ws twice.
func NeverFits(ws iter.Seq[*Worker], r *berth.Resources, nodes int) *berth.Error {
	m := &matcher{r: r}
	fit, n := 0, 0
	for w := range ws {
		n++
		if m.count(w) >= r.GPUDevices() && w.CPUs >= r.CPUs && w.Memory >= r.Memory {
			if fit++; fit >= max(nodes, 1) {
				return nil // the common case: stop at the first workers that fit
			}
		}
	}
	if n == 0 {
		return nil
	}
	field, why := shortOf(ws, m)
	if field == "" {
		if fit == 0 {
			field, why = "resources", fmt.Sprintf("%s requested on one worker; no worker has them all", asked(r))
		} else {
			field, why = "nodes", fmt.Sprintf("%d requested; %s", nodes, fitCount(fit, r))
		}
	}
	return &berth.Error{Code: berth.ECodeUnsatisfiable, Field: field, Message: why}
}

// matcher counts the GPUs of a worker that match r, deciding once for
// each kind (model and memory) of GPU: with many alike workers, the type
// is matched a few times rather than once per GPU, and the kinds are
// looked up only where one differs from the GPU before.
type matcher struct {
	r     *berth.Resources
	kinds map[berth.GPU]bool // GPUs by model and memory only
	last  berth.GPU          // the kind decided last
	ok    bool               // whether it matches
}

// count returns how many of w's GPUs match the matcher's resources.
func (m *matcher) count(w *Worker) int {
	n := 0
	for _, g := range w.GPUs {
		if kind := (berth.GPU{Model: g.Model, Memory: g.Memory}); kind != m.last || m.kinds == nil {
			ok, seen := m.kinds[kind]
			if !seen {
				ok = gpuMatches(g, m.r)
				if m.kinds == nil {
					m.kinds = map[berth.GPU]bool{}
				}
				m.kinds[kind] = ok
			}
			m.last, m.ok = kind, ok
		}
		if m.ok {
			n++
		}
	}
	return n
}

// shortOf names the first resource of m's that no worker of ws has enough
// of on its own, and what the workers have; "" when each alone fits
// somewhere.
func shortOf(ws iter.Seq[*Worker], m *matcher) (field, why string) {
	r := m.r
	var best *Worker // the most matching GPUs
	bestN := -1
	var cpus float64
	var memory berth.Bytes
	var models []string
	var typedMemory berth.Bytes  // the most memory of a GPU of r's type
	typed, sized := false, false // some GPU of r's type; of r's type and memory
	for w := range ws {
		if n := m.count(w); n > bestN {
			best, bestN = w, n
		}
		cpus, memory = max(cpus, w.CPUs), max(memory, w.Memory)
	}
	kinds := slices.Collect(maps.Keys(m.kinds)) // count saw every kind
	slices.SortFunc(kinds, func(a, b berth.GPU) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), cmp.Compare(a.Memory, b.Memory))
	})
	for _, k := range kinds {
		if !slices.Contains(models, k.Model) {
			models = append(models, k.Model)
		}
		if k.HasType(r.GPUType) {
			typed, typedMemory = true, max(typedMemory, k.Memory)
		}
		sized = sized || m.kinds[k] // count saw every kind
	}
	switch {
	case r.WantsGPUs() && r.GPUType != "" && !typed:
		return "resources.gpu_type", fmt.Sprintf("%q requested; %s", r.GPUType, modelsDesc(models))
	case r.WantsGPUs() && r.GPUMemory > 0 && !sized:
		return "resources.gpu_memory", fmt.Sprintf("%s per GPU requested; the largest GPU%s has %s",
			r.GPUMemory, gpuDesc(&berth.Resources{GPUType: r.GPUType}), typedMemory)
	case bestN < r.GPUDevices():
		have := "no GPUs"
		if len(best.GPUs) > 0 {
			have = berth.GPUSpec(best.GPUs)
		}
		if r.GPUType != "" || r.GPUMemory > 0 {
			have = fmt.Sprintf("%d%s (%s)", bestN, gpuDesc(r), have)
		}
		return "resources.gpus", fmt.Sprintf("%s requested; the largest worker has %s", berth.FormatGPUs(r.GPUsMilli()), have)
	case cpus < r.CPUs:
		return "resources.cpus", fmt.Sprintf("%g requested; the largest worker has %g", r.CPUs, cpus)
	case memory < r.Memory:
		return "resources.memory", fmt.Sprintf("%s requested; the largest worker has %s", r.Memory, memory)
	}
	return "", ""
}

// modelsDesc says which GPU models the workers have.
func modelsDesc(models []string) string {
	if len(models) == 0 {
		return "no worker has GPUs"
	}
	return "the workers have " + strings.Join(models, ", ")
}

// asked lists what r asks of one worker: "8 GPUs of type H100, 16 CPUs,
// 64GiB of memory".
func asked(r *berth.Resources) string {
	var parts []string
	for i := needGPUs; i <= needMemory; i++ {
		if what := requirement(i, &Task{TaskSpec: &TaskSpec{Resources: *r}}); what != "" {
			parts = append(parts, what)
		}
	}
	return strings.Join(parts, ", ")
}

// fitCount says that only n workers could take one member of a job
// asking r: "only 1 worker has 4 GPUs", "only 3 workers exist".
func fitCount(n int, r *berth.Resources) string {
	what := asked(r)
	switch {
	case what == "" && n == 1:
		return "only 1 worker exists"
	case what == "":
		return fmt.Sprintf("only %d workers exist", n)
	case n == 1:
		return "only 1 worker has " + what
	}
	return fmt.Sprintf("only %d workers have %s", n, what)
}
