package scheduler

import (
	"math"
	"testing"

	"github.com/berth-dev/berth"
)

func fragNode(cpus float64, free ...int) *FragNode {
	n := &FragNode{FreeMilli: free, FreeCPUs: cpus, FreeMemory: 64 << 30}
	for i := range free {
		n.GPUs = append(n.GPUs, berth.GPU{Index: i, Model: "NVIDIA A100"})
	}
	return n
}

func TestFragmentationWorkedExample(t *testing.T) {
	whole := Demand{GPUs: 1, Milli: berth.WholeGPU, CPUs: 4}
	half := Demand{GPUs: 1, Milli: 500, CPUs: 4}
	cpuOnly := Demand{CPUs: 4}
	mix := []MixEntry{{whole, 0.5}, {half, 0.3}, {cpuOnly, 0.2}}
	cases := []struct {
		name string
		n    *FragNode
		want float64
	}{
		// whole: GPU 1's 300 is unusable (0.5×300); half: likewise
		// (0.3×300); CPU-only: all 1300 (0.2×1300).
		{"partly shared", fragNode(16, 1000, 300), 150 + 90 + 260},
		{"idle", fragNode(16, 1000, 1000), 0 + 0 + 400},
		{"nothing free", fragNode(16, 0, 0), 0},
		// Too few CPUs: no demand of the mix can run, all is fragmented.
		{"no CPUs", fragNode(2, 1000, 300), 1300},
		// Two 600s: whole cannot use them, half can.
		{"two shares", fragNode(16, 600, 600), 0.5*1200 + 0 + 0.2*1200},
	}
	for _, c := range cases {
		if got := Fragmentation(c.n, mix); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: Fragmentation = %v, want %v", c.name, got, c.want)
		}
	}
	two := []MixEntry{{Demand{GPUs: 2, Milli: berth.WholeGPU}, 1}}
	if got := Fragmentation(fragNode(16, 1000, 300), two); got != 1300 {
		t.Errorf("a 2-GPU demand on one idle GPU: %v, want 1300", got)
	}
	typed := []MixEntry{{Demand{GPUs: 1, Milli: 500, GPUType: "H100"}, 1}}
	if got := Fragmentation(fragNode(16, 1000), typed); got != 1000 {
		t.Errorf("a demand of another GPU type: %v, want 1000", got)
	}
}

func TestMixLearnsFromAWindow(t *testing.T) {
	m := NewMix(4)
	a := Demand{GPUs: 1, Milli: 500}
	b := Demand{GPUs: 1, Milli: berth.WholeGPU}
	for _, d := range []Demand{a, a, a, b} {
		m.Observe(d)
	}
	got := m.Entries()
	if len(got) != 2 || got[0].Demand != a || got[0].Weight != 0.75 || got[1].Demand != b || got[1].Weight != 0.25 {
		t.Fatalf("entries = %+v, want a 0.75, b 0.25", got)
	}
	m.Observe(b) // forgets the first a
	m.Observe(b) // and the second
	got = m.Entries()
	if m.Len() != 4 || got[0].Demand != b || got[0].Weight != 0.75 || got[1].Weight != 0.25 {
		t.Fatalf("after the window moved: entries = %+v, want b 0.75, a 0.25", got)
	}
	// Ties go in a fixed order, whatever the order of observation.
	x, y := NewMix(10), NewMix(10)
	x.Observe(a)
	x.Observe(b)
	y.Observe(b)
	y.Observe(a)
	if ex, ey := x.Entries(), y.Entries(); ex[0] != ey[0] || ex[1] != ey[1] || ex[0].Demand != a {
		t.Fatalf("tied entries differ: %+v and %+v", ex, ey)
	}
}

func TestMixKeepsTheMostFrequentDemands(t *testing.T) {
	m := NewMix(DefaultMixWindow)
	for i := range MixEntries + 10 {
		for range i + 1 {
			m.Observe(Demand{CPUs: float64(i)})
		}
	}
	got := m.Entries()
	if len(got) != MixEntries {
		t.Fatalf("%d entries, want %d", len(got), MixEntries)
	}
	if got[0].CPUs != MixEntries+9 || got[len(got)-1].CPUs != 10 {
		t.Fatalf("kept %v … %v, want the most frequent", got[0], got[len(got)-1])
	}
}
