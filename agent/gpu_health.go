package agent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
		f, ok := byUUID[g.UUID]
		if !ok { // its uuid may be unreadable: "[GPU requires reset]"
			if f, ok = byIndex[strconv.Itoa(g.Index)]; ok && !smiError(f[1]) {
				ok = false
			}
		}
		if !ok {
			faults[g.Index] = name + " disappeared"
			continue
		}
		if what := h.fault(g.UUID, f); what != "" {
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
