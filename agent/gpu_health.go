package agent

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
)

// gpuHealth checks an agent's GPUs with nvidia-smi. A GPU is faulty while
// nvidia-smi does not list it (it fell off the bus), while a field of its
// row reads as an error (how Xid faults surface: "[GPU requires reset]",
// "ERR!", "[Unknown Error]"), or while its count of uncorrected volatile
// ECC errors is above the lowest it was seen at.
type gpuHealth struct {
	smi  string
	gpus []berth.GPU
	ecc  map[string]int64 // uuid → lowest uncorrected ECC count seen
}

func newGPUHealth(nvidiaSMI string, gpus []berth.GPU) *gpuHealth {
	return &gpuHealth{smi: nvidiaSMI, gpus: gpus, ecc: map[string]int64{}}
}

// check runs nvidia-smi once and returns what is wrong with each faulty
// GPU, by index, e.g. "GPU 1 (GPU-abc) disappeared". It returns an error,
// and changes nothing, when nvidia-smi fails or answers with too few
// fields.
func (h *gpuHealth) check(ctx context.Context) (map[int]string, error) {
	rows, err := healthQuery.run(ctx, h.smi)
	if err != nil {
		return nil, err
	}
	byUUID := map[string][]string{}
	byIndex := map[string][]string{}
	for _, r := range rows {
		byUUID[r.fields[1]] = r.fields
		byIndex[r.fields[0]] = r.fields
	}
	faults := map[int]string{}
	for _, g := range h.gpus {
		name := fmt.Sprintf("GPU %d (%s)", g.Index, g.UUID)
		uuid := cmp.Or(g.Parent, g.UUID) // a MIG device is as healthy as its GPU
		f, ok := byUUID[uuid]
		if !ok && g.Parent == "" { // its uuid may be unreadable: "[GPU requires reset]"
			if f, ok = byIndex[strconv.Itoa(g.Index)]; ok && !smiError(f[1]) {
				ok = false
			}
		}
		if !ok {
			faults[g.Index] = name + " disappeared"
			continue
		}
		if what := h.fault(uuid, f); what != "" {
			faults[g.Index] = name + " " + what
		}
	}
	return faults, nil
}

// fault says what is wrong with the GPU of row f ("" for nothing) and
// lowers the GPU's ECC baseline when its count went down (a reset).
func (h *gpuHealth) fault(uuid string, f []string) string {
	for _, v := range f {
		if smiError(v) {
			return "reported an error: " + v
		}
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil { // "[N/A]": no ECC on this GPU
		return ""
	}
	base, seen := h.ecc[uuid]
	switch {
	case !seen || n < base:
		h.ecc[uuid] = n
	case n > base:
		return fmt.Sprintf("reported uncorrected ECC errors (%d → %d)", base, n)
	}
	return ""
}

// gpuStats asks nvidia-smi for each GPU's utilization and memory in use;
// rows it cannot read ("[N/A]") are left out.
func gpuStats(ctx context.Context, nvidiaSMI string) ([]berth.GPUStat, error) {
	rows, err := statsQuery.run(ctx, nvidiaSMI)
	if err != nil {
		return nil, err
	}
	var stats []berth.GPUStat
	for _, r := range rows {
		idx, err1 := strconv.Atoi(r.fields[0])
		util, err2 := strconv.Atoi(r.fields[1])
		mib, err3 := strconv.ParseInt(r.fields[2], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil {
			stats = append(stats, berth.GPUStat{Index: idx, Utilization: util, MemoryUsed: berth.Bytes(mib << 20)})
		}
	}
	return stats, nil
}

// smiError reports whether a field of nvidia-smi's output reports an error
// rather than a value: "ERR!", or a bracketed message other than those
// saying the value is not available.
func smiError(v string) bool {
	if v == "ERR!" {
		return true
	}
	if !strings.HasPrefix(v, "[") || !strings.HasSuffix(v, "]") {
		return false
	}
	switch v {
	case "[N/A]", "[Not Supported]", "[Insufficient Permissions]":
		return false
	}
	return true
}

// releasePoll is how often a hard stop asks nvidia-smi whether the
// attempt's GPU memory was released.
const releasePoll = 100 * time.Millisecond

// awaitGPURelease asks nvidia-smi until no compute app is on gpus, for at
// most timeout (and while ctx lasts), and says how that went: "GPU memory
// released on GPU 0,1", "GPU memory still held on GPU 1 (pid 123, 500
// MiB) after 30s", or that nvidia-smi could not tell.
func awaitGPURelease(ctx context.Context, nvidiaSMI string, gpus []berth.GPU, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		held, err := computeApps(ctx, nvidiaSMI, gpus)
		if err == nil && len(held) == 0 {
			return "GPU memory released on GPU " + gpuIndexes(gpus)
		}
		wait := min(releasePoll, time.Until(deadline))
		if wait <= 0 || ctx.Err() != nil {
			if err != nil {
				return fmt.Sprintf("GPU memory release on GPU %s unconfirmed: %v", gpuIndexes(gpus), err)
			}
			return fmt.Sprintf("GPU memory still held on %s after %v", strings.Join(held, ", "), timeout)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// computeApps lists the compute apps nvidia-smi shows on gpus, one entry
// per GPU holding any: "GPU 1 (pid 123, 500 MiB; pid 124, 20 MiB)".
func computeApps(ctx context.Context, nvidiaSMI string, gpus []berth.GPU) ([]string, error) {
	rows, err := appsQuery.run(ctx, nvidiaSMI)
	if err != nil {
		return nil, err
	}
	var held []string
	for _, g := range gpus {
		var apps []string
		for _, r := range rows {
			if r.fields[0] != g.UUID {
				continue
			}
			app := "pid " + r.fields[1]
			if _, err := strconv.ParseInt(r.fields[2], 10, 64); err == nil {
				app += ", " + r.fields[2] + " MiB"
			}
			apps = append(apps, app)
		}
		if len(apps) > 0 {
			held = append(held, fmt.Sprintf("GPU %d (%s)", g.Index, strings.Join(apps, "; ")))
		}
	}
	return held, nil
}

// gpuIndexes lists the indexes of gpus: "0,1".
func gpuIndexes(gpus []berth.GPU) string {
	s := make([]string, len(gpus))
	for i, g := range gpus {
		s[i] = strconv.Itoa(g.Index)
	}
	return strings.Join(s, ",")
}

// gpuState is what the agent last learnt of its GPUs: which are faulty,
// and their load.
type gpuState struct {
	mu     sync.Mutex
	faults map[int]string  // faulty GPUs by index: what is wrong with each
	stats  []berth.GPUStat // the GPUs' load, as nvidia-smi last said
}

// snapshot returns the faulty GPUs' indexes, sorted, and the GPUs' load.
func (g *gpuState) snapshot() (faulty []int, stats []berth.GPUStat) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.faults)), g.stats
}

// watchGPUs checks the GPUs' health now and every HealthEvery until ctx
// ends; a failed check is logged and changes nothing.
func (s *supervisor) watchGPUs(ctx context.Context) {
	health := newGPUHealth(s.cfg.NvidiaSMI, s.cfg.GPUs)
	t := time.NewTicker(s.cfg.HealthEvery)
	defer t.Stop()
	for {
		faults, err := health.check(ctx)
		switch {
		case err == nil:
			s.setFaults(faults)
		case ctx.Err() == nil:
			s.log.Warn("GPU health check failed; ignored", "err", err)
		}
		if stats, err := gpuStats(ctx, s.cfg.NvidiaSMI); err == nil {
			s.gpus.mu.Lock()
			s.gpus.stats = stats
			s.gpus.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// setFaults records which GPUs are faulty, logging changes, and stops the
// attempts on them.
func (s *supervisor) setFaults(faults map[int]string) {
	s.gpus.mu.Lock()
	for idx, what := range faults {
		if _, was := s.gpus.faults[idx]; !was {
			s.log.Error("GPU faulty", "gpu", idx, "fault", what)
		}
	}
	for idx := range s.gpus.faults {
		if _, still := faults[idx]; !still {
			s.log.Info("GPU healthy again", "gpu", idx)
		}
	}
	s.gpus.faults = faults
	s.gpus.mu.Unlock()
	var stops []stopRequest
	s.mu.Lock()
	for _, at := range s.attempts {
		for _, g := range at.gpus {
			if what, faulty := faults[g]; faulty {
				stops = append(stops, stopRequest{at, "gpu health: " + what})
				break
			}
		}
	}
	s.mu.Unlock()
	s.stopFor(berth.CauseGPUHealth, "stopping attempt: its GPU is faulty", stops)
}

// confirmStopped checks what a hard stop must have freed, once the attempt
// has ended: no process of its group is left (lingering lists those that
// are) and, when the agent has nvidia-smi, no compute app holds memory on
// its GPUs any more. It says what it found: "processes gone; GPU memory
// released on GPU 0,1".
func (s *supervisor) confirmStopped(ctx context.Context, gpus, lingering []int) string {
	found := "processes gone"
	if len(lingering) > 0 {
		pids := make([]string, len(lingering))
		for i, pid := range lingering {
			pids[i] = strconv.Itoa(pid)
		}
		found = "processes still alive after SIGKILL: pid " + strings.Join(pids, ", ")
	}
	var held []berth.GPU
	for _, g := range s.cfg.GPUs {
		if slices.Contains(gpus, g.Index) {
			held = append(held, g)
		}
	}
	if s.cfg.NvidiaSMI == "" || len(held) == 0 {
		return found
	}
	return found + "; " + awaitGPURelease(ctx, s.cfg.NvidiaSMI, held, s.cfg.ReleaseTimeout)
}
