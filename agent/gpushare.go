package agent

import (
	"strconv"
	"strings"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// GPUShare is what an attempt holding a fraction of one GPU is told, and
// held to where the machine can: its share (BERTH_GPU_FRACTION) always;
// with an MPS daemon, the MPS client limits of that share.
type GPUShare struct {
	Milli int // its share of the GPU in milli-GPUs (1..999)
	// MPSPipeDir is the MPS daemon's pipe directory; empty: no MPS, the
	// share is advisory (time-slicing).
	MPSPipeDir string
	// PinnedMemory is the GPU memory the MPS client may allocate.
	PinnedMemory berth.Bytes
}

// env returns the variables that tell the attempt its share and, with
// MPS, limit it: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (its share of the
// GPU's threads, rounded up) and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (its
// memory, on device 0: the only one it sees). None for a nil share.
func (g *GPUShare) env() []string {
	if g == nil {
		return nil
	}
	env := []string{"BERTH_GPU_FRACTION=" + berth.FormatGPUs(g.Milli)}
	if g.MPSPipeDir == "" {
		return env
	}
	pct := max(1, (g.Milli+9)/10)
	return append(env, "CUDA_MPS_PIPE_DIRECTORY="+g.MPSPipeDir,
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+strconv.Itoa(pct),
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0="+strconv.FormatInt(int64(g.PinnedMemory>>20), 10)+"M")
}

// gpuShare returns the share of m's attempt on gpus (the agent's GPUs),
// nil for whole GPUs: the memory it may pin is its gpu_memory, or its
// share of its GPU's memory.
func gpuShare(m *wire.JobAssign, gpus []berth.GPU, mpsPipeDir string) *GPUShare {
	if m.GPUMilli == 0 || len(m.GPUs) != 1 {
		return nil
	}
	share := &GPUShare{Milli: m.GPUMilli, MPSPipeDir: mpsPipeDir, PinnedMemory: m.GPUMemory}
	if share.PinnedMemory == 0 {
		for _, g := range gpus {
			if g.Index == m.GPUs[0] {
				share.PinnedMemory = g.Memory * berth.Bytes(m.GPUMilli) / berth.WholeGPU
			}
		}
	}
	return share
}

// gpuDevices returns the CUDA_VISIBLE_DEVICES entry of each of indexes,
// among the agent's gpus: a MIG device's UUID (CUDA names MIG devices so),
// else the index; nil when every entry is its index.
func gpuDevices(indexes []int, gpus []berth.GPU) []string {
	var out []string
	for i, idx := range indexes {
		for _, g := range gpus {
			if g.Index == idx && strings.HasPrefix(g.UUID, "MIG-") {
				if out == nil {
					out = make([]string, len(indexes))
					for j := range i {
						out[j] = strconv.Itoa(indexes[j])
					}
				}
				out[i] = g.UUID
			}
		}
		if out != nil && out[i] == "" {
			out[i] = strconv.Itoa(idx)
		}
	}
	return out
}
