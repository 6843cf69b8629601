package scheduler

import (
	"fmt"
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
// when ws is empty (nothing known to check against).
func NeverFits(ws []*Worker, r *berth.Resources, nodes int) *berth.Error {
	if len(ws) == 0 {
		return nil
	}
	fit := 0
	for _, w := range ws {
		if matchingGPUs(w, r) >= r.GPUs && w.CPUs >= r.CPUs && w.Memory >= r.Memory {
			fit++
		}
	}
	if fit >= max(nodes, 1) {
		return nil
	}
	field, why := shortOf(ws, r)
	if field == "" {
		if fit == 0 {
			field, why = "resources", fmt.Sprintf("%s requested on one worker; no worker has them all", asked(r))
		} else {
			field, why = "nodes", fmt.Sprintf("%d requested; %s", nodes, fitCount(fit, r))
		}
	}
	return &berth.Error{Code: berth.ECodeUnsatisfiable, Field: field, Message: why}
}

// shortOf names the first resource of r that no worker of ws has enough of
// on its own, and what the workers have; "" when each alone fits somewhere.
func shortOf(ws []*Worker, r *berth.Resources) (field, why string) {
	var best *Worker // the most matching GPUs
	var cpus float64
	var memory berth.Bytes
	var models []string
	var typedMemory berth.Bytes  // the most memory of a GPU of r's type
	typed, sized := false, false // some GPU of r's type; of r's type and memory
	for _, w := range ws {
		if best == nil || matchingGPUs(w, r) > matchingGPUs(best, r) {
			best = w
		}
		cpus, memory = max(cpus, w.CPUs), max(memory, w.Memory)
		for _, g := range w.GPUs {
			if !slices.Contains(models, g.Model) {
				models = append(models, g.Model)
			}
			if g.HasType(r.GPUType) {
				typed, typedMemory = true, max(typedMemory, g.Memory)
			}
			sized = sized || gpuMatches(g, r)
		}
	}
	switch {
	case r.GPUs > 0 && r.GPUType != "" && !typed:
		return "resources.gpu_type", fmt.Sprintf("%q requested; %s", r.GPUType, modelsDesc(models))
	case r.GPUs > 0 && r.GPUMemory > 0 && !sized:
		return "resources.gpu_memory", fmt.Sprintf("%s per GPU requested; the largest GPU%s has %s",
			r.GPUMemory, gpuDesc(&berth.Resources{GPUType: r.GPUType}), typedMemory)
	case matchingGPUs(best, r) < r.GPUs:
		have := "no GPUs"
		if len(best.GPUs) > 0 {
			have = berth.GPUSpec(best.GPUs)
		}
		if r.GPUType != "" || r.GPUMemory > 0 {
			have = fmt.Sprintf("%d%s (%s)", matchingGPUs(best, r), gpuDesc(r), have)
		}
		return "resources.gpus", fmt.Sprintf("%d requested; the largest worker has %s", r.GPUs, have)
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
		if what := requirement(i, &Task{Resources: *r}); what != "" {
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
