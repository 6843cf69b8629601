package scheduler

import (
	"cmp"
	"slices"
	"strings"

	"github.com/berth-dev/berth"
)

// Demand is one kind of request of the expected mix: whole GPUs, a share
// of one GPU, or none, with the CPUs and memory that go with it.
type Demand struct {
	GPUs      int         // GPUs it takes; a share of one GPU takes 1
	Milli     int         // of each GPU it takes: berth.WholeGPU for whole GPUs, less for a share; 0 when GPUs is 0
	GPUType   string      // as berth.Resources.GPUType
	GPUMemory berth.Bytes // per GPU, at least
	CPUs      float64
	Memory    berth.Bytes
}

// MixEntry is a demand and how often it occurs: its share of the requests.
type MixEntry struct {
	Demand
	Weight float64
}

// FragNode is what the fragmentation measure reads of a worker: its GPUs
// with what is free of each, and its free CPUs and memory.
type FragNode struct {
	GPUs       []berth.GPU
	FreeMilli  []int // aligned with GPUs: 0 (given out) to berth.WholeGPU (idle)
	FreeCPUs   float64
	FreeMemory berth.Bytes
}

// Fragmentation is the measure of Weng et al., "Beware of Fragmentation"
// (USENIX ATC '23): the GPU capacity of n, in milli-GPUs, that the tasks
// of the mix could not use, each demand weighted by its share of the mix.
// For one demand it is all of n's free GPU capacity when the demand asks
// for no GPU or cannot run on n now (too few CPUs, too little memory, too
// few GPUs of its type with the share free), and otherwise the free
// capacity of the GPUs it could not take (of another type, or with less
// than its share free). Placing each task where this grows least is
// fragmentation gradient descent (FGD).
func Fragmentation(n *FragNode, mix []MixEntry) float64 {
	idle := 0
	for _, f := range n.FreeMilli {
		idle += f
	}
	if idle == 0 {
		return 0
	}
	frag := 0.0
	for i := range mix {
		frag += mix[i].Weight * float64(unusable(n, &mix[i].Demand, idle))
	}
	return frag
}

// unusable returns the free GPU capacity of n that d could not use.
func unusable(n *FragNode, d *Demand, idle int) int {
	if d.GPUs == 0 || n.FreeCPUs < d.CPUs || n.FreeMemory < d.Memory {
		return idle
	}
	usable, fit := 0, 0
	share := berth.Resources{GPUMilli: d.Milli % berth.WholeGPU, GPUMemory: d.GPUMemory}
	for g, f := range n.FreeMilli {
		need := d.Milli
		if share.GPUMilli > 0 {
			need = share.MilliOn(n.GPUs[g]) // a fraction takes more of a GPU with less memory
		}
		if f >= need && f > 0 && gpuFits(n.GPUs[g], d) {
			usable += f
			fit++
		}
	}
	if fit < d.GPUs {
		return idle
	}
	return idle - usable
}

func gpuFits(g berth.GPU, d *Demand) bool {
	return (d.GPUMemory == 0 || g.Memory >= d.GPUMemory) && g.HasType(d.GPUType)
}

// compareDemands orders demands totally, for deterministic mixes.
func compareDemands(a, b *Demand) int {
	return cmp.Or(cmp.Compare(a.GPUs, b.GPUs), cmp.Compare(a.Milli, b.Milli),
		strings.Compare(a.GPUType, b.GPUType), cmp.Compare(a.GPUMemory, b.GPUMemory),
		cmp.Compare(a.CPUs, b.CPUs), cmp.Compare(a.Memory, b.Memory))
}

// Mix defaults.
const (
	// DefaultMixWindow is how many recent submissions a Mix learns from.
	DefaultMixWindow = 1000
	// MixEntries bounds the demands a mix weighs: the most frequent ones.
	// Each placement weighs every demand on every GPU of every fitting
	// worker, so the bound keeps FGD's cost in proportion to the cluster.
	MixEntries = 32
)

// Mix learns the expected mix of requests from recent submissions: the
// last Window demands observed. It is not safe for concurrent use.
type Mix struct {
	window  int
	ring    []Demand
	next    int
	counts  map[Demand]int
	entries []MixEntry // cached; nil when stale
}

// NewMix returns a mix that learns from the last window demands (at least
// 1).
func NewMix(window int) *Mix {
	return &Mix{window: max(window, 1), counts: map[Demand]int{}}
}

// Observe adds one submission's demand, forgetting the oldest once the
// window is full.
func (m *Mix) Observe(d Demand) {
	if len(m.ring) < m.window {
		m.ring = append(m.ring, d)
	} else {
		old := m.ring[m.next]
		if m.counts[old]--; m.counts[old] == 0 {
			delete(m.counts, old)
		}
		m.ring[m.next] = d
		m.next = (m.next + 1) % m.window
	}
	m.counts[d]++
	m.entries = nil
}

// Len returns how many demands the window holds.
func (m *Mix) Len() int { return len(m.ring) }

// Entries returns the MixEntries most frequent demands of the window,
// each weighted by its share of the window, most frequent first (ties in
// compareDemands order). The caller must not change the result.
func (m *Mix) Entries() []MixEntry {
	if m.entries != nil || len(m.ring) == 0 {
		return m.entries
	}
	all := make([]MixEntry, 0, len(m.counts))
	for d, n := range m.counts {
		all = append(all, MixEntry{Demand: d, Weight: float64(n)})
	}
	slices.SortFunc(all, func(a, b MixEntry) int {
		return cmp.Or(cmp.Compare(b.Weight, a.Weight), compareDemands(&a.Demand, &b.Demand))
	})
	all = all[:min(len(all), MixEntries)]
	for i := range all {
		all[i].Weight /= float64(len(m.ring))
	}
	m.entries = all
	return all
}
