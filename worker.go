package berth

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// WorkerState is a worker's observed state.
type WorkerState string

// Worker states.
const (
	WorkerReady        WorkerState = "ready"        // connected, has free capacity
	WorkerBusy         WorkerState = "busy"         // connected, full: every slot, or every GPU that is not faulty, in use
	WorkerDraining     WorkerState = "draining"     // turned off (drain): takes no work, running attempts finishing
	WorkerParked       WorkerState = "parked"       // turned off: takes no work
	WorkerDisconnected WorkerState = "disconnected" // no session, within its lease
	WorkerLost         WorkerState = "lost"         // missed heartbeats past its lease
)

// GPU is one device on a worker.
type GPU struct {
	Index  int    `json:"index"`
	UUID   string `json:"uuid,omitempty"`
	Model  string `json:"model"`
	Memory Bytes  `json:"memory"`
	// Parent is, for a MIG device (a GPU instance its agent schedules as
	// a GPU of its own: Model is its profile, "1g.10gb"), the UUID of the
	// GPU it is part of; empty for a whole GPU.
	Parent string `json:"parent,omitempty"`
}

// HasType reports whether g's model is of the type a job asks for
// (gpu_type): the type appears in the model, case-insensitively, as a
// whole word — the characters around it are not letters or digits — so
// that "A100" matches "NVIDIA A100-SXM4-80GB" but "A10" does not, nor
// "L4" "L40S". An empty type matches every model.
func (g GPU) HasType(gpuType string) bool {
	if gpuType == "" {
		return true
	}
	model, typ := strings.ToLower(g.Model), strings.ToLower(gpuType)
	for from := 0; ; {
		i := strings.Index(model[from:], typ)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(typ)
		if (i == 0 || !isAlphanumeric(model[i-1])) && (end == len(model) || !isAlphanumeric(model[end])) {
			return true
		}
		from = i + 1
	}
}

func isAlphanumeric(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// GPUKind is a number of alike GPUs: of one model and memory.
type GPUKind struct {
	Model  string
	Memory Bytes
	Count  int
}

// GPUKinds groups gpus by model and memory, in the order each kind first
// appears.
func GPUKinds(gpus []GPU) []GPUKind {
	var kinds []GPUKind
	for _, g := range gpus {
		i := slices.IndexFunc(kinds, func(k GPUKind) bool { return k.Model == g.Model && k.Memory == g.Memory })
		if i < 0 {
			i = len(kinds)
			kinds = append(kinds, GPUKind{Model: g.Model, Memory: g.Memory})
		}
		kinds[i].Count++
	}
	return kinds
}

// GPUSpec writes gpus as ParseGPUSpec reads them, by kind:
// "2xA100:40GiB,1xT4:16GiB" ("" for none).
func GPUSpec(gpus []GPU) string {
	var parts []string
	for _, k := range GPUKinds(gpus) {
		parts = append(parts, fmt.Sprintf("%dx%s:%s", k.Count, k.Model, k.Memory))
	}
	return strings.Join(parts, ",")
}

// GPUStat is a GPU's load as its agent last read it (nvidia-smi), sent
// with heartbeats.
type GPUStat struct {
	Index       int   `json:"index"`
	Utilization int   `json:"utilization"` // percent
	MemoryUsed  Bytes `json:"memory_used"`
}

// Isolation modes: how a worker's agent confines its attempts
// (Worker.Isolation).
const (
	IsolationCgroupV1 = "cgroup-v1" // each attempt in a cgroup (v1) of its own: cpus and memory enforced, every process killed at its end
	IsolationCgroupV2 = "cgroup-v2" // the same with cgroup v2
	IsolationNone     = "none"      // process groups only: no limits, and a process that leaves the group outlives its attempt
)

// ValidIsolation reports whether s is an isolation mode, or empty (an
// agent that does not say).
func ValidIsolation(s string) bool {
	return s == "" || s == IsolationCgroupV1 || s == IsolationCgroupV2 || s == IsolationNone
}

// Worker is a machine running a berth agent. Advertise is the address (an
// IP or a host name) others reach it at: its services' endpoints and, for
// rank 0 of a gang, MASTER_ADDR; its agent's --advertise, by default the
// address the agent reaches the server from; empty for an agent that sent
// none.
type Worker struct {
	ID        string            `json:"id"`
	Host      string            `json:"host"`
	Advertise string            `json:"advertise,omitempty"`
	Queues    []string          `json:"queues,omitempty"` // empty: every queue
	GPUs      []GPU             `json:"gpus,omitempty"`
	GPUStats  []GPUStat         `json:"gpu_stats,omitempty"` // the GPUs' load at the last heartbeat
	CPUs      float64           `json:"cpus"`
	Memory    Bytes             `json:"memory"`
	Slots     int               `json:"slots"` // most attempts at once
	Labels    map[string]string `json:"labels,omitempty"`
	Version   string            `json:"version,omitempty"`
	Isolation string            `json:"isolation,omitempty"` // Isolation*, as its agent reports
	State     WorkerState       `json:"state"`
	Running   int               `json:"running"`
	GPUsInUse int               `json:"gpus_in_use"` // GPUs its running attempts hold, whole or a share of them
	// GPUMilliShared is what fractions leave free on the GPUs they share
	// (not faulty), in milli-GPUs: room for more fractions, not for a
	// whole GPU.
	GPUMilliShared int       `json:"gpu_milli_shared,omitempty"`
	LastHeartbeat  time.Time `json:"last_heartbeat"`
	RegisteredAt   time.Time `json:"registered_at"`
	ReservedFor    string    `json:"reserved_for,omitempty"` // job the scheduler holds this worker for
	FaultyGPUs     []int     `json:"faulty_gpus,omitempty"`  // GPUs the agent's health check found missing or faulted
	Models         []string  `json:"models,omitempty"`       // models warm on it, as its agent reports
	// Controls is the desired state of its host's queues (absent: on).
	Controls []*WorkerControl `json:"controls,omitempty"`
}

// Address returns where others reach w: its advertised address, else
// its host label.
func (w *Worker) Address() string {
	if w.Advertise != "" {
		return w.Advertise
	}
	return w.Host
}

// Serves reports whether the worker takes jobs from queue.
func (w *Worker) Serves(queue string) bool {
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

// ParseGPUSpec parses a --gpus declaration such as "4xH100:80GiB",
// "2xA100:40GiB,1xT4:16GiB" or "0" (none) into GPUs indexed from 0. Its
// errors say what is wrong, not where: the caller names the flag or field.
func ParseGPUSpec(spec string) ([]GPU, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "0" || spec == "none" {
		return nil, nil
	}
	var gpus []GPU
	for _, part := range strings.Split(spec, ",") {
		countStr, rest, ok := strings.Cut(strings.TrimSpace(part), "x")
		if !ok {
			return nil, fmt.Errorf("%q is not COUNTxMODEL:MEMORY (e.g. 4xH100:80GiB)", part)
		}
		count, err := strconv.Atoi(countStr)
		if err != nil || count < 1 || count > MaxGPUsPerWorker {
			return nil, fmt.Errorf("count %q must be between 1 and %d", countStr, MaxGPUsPerWorker)
		}
		model, memStr, ok := strings.Cut(rest, ":")
		if !ok || model == "" {
			return nil, fmt.Errorf("%q is not COUNTxMODEL:MEMORY (e.g. 4xH100:80GiB)", part)
		}
		mem, err := ParseBytes(memStr)
		if err != nil || mem == 0 {
			return nil, fmt.Errorf("memory %q is not a size such as 80GiB", memStr)
		}
		for i := 0; i < count; i++ {
			gpus = append(gpus, GPU{Index: len(gpus), Model: model, Memory: mem,
				UUID: fmt.Sprintf("GPU-fake-%s-%d", strings.ToLower(model), len(gpus))})
		}
	}
	if len(gpus) > MaxGPUsPerWorker {
		return nil, fmt.Errorf("at most %d GPUs per worker", MaxGPUsPerWorker)
	}
	return gpus, nil
}
