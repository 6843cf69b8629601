package scheduler

import (
	"slices"
	"testing"

	"github.com/berth-dev/berth"
)

func TestNeverFitsNamesTheFieldAndWhatTheClusterHas(t *testing.T) {
	t.Parallel()
	const gib = berth.Bytes(1 << 30)
	h100 := newWorker("h", gpus(4, "NVIDIA H100", 80*gib))
	a100 := newWorker("a", gpus(2, "NVIDIA A100", 40*gib))
	a100.CPUs, a100.Memory = 128, 2048*gib // more CPUs and memory, fewer GPUs
	cpu := newWorker("c", nil)
	cluster := []*Worker{h100, a100, cpu}
	for _, tc := range []struct {
		name  string
		r     berth.Resources
		nodes int
		field string // "" when it fits
		msg   string
	}{
		{"fits", berth.Resources{GPUs: 4}, 1, "", ""},
		{"a gang that fits", berth.Resources{GPUs: 2}, 2, "", ""},
		{"too many GPUs", berth.Resources{GPUs: 8}, 1, "resources.gpus", "8 requested; the largest worker has 4xNVIDIA H100:80GiB"},
		{"a type nobody has", berth.Resources{GPUs: 1, GPUType: "B200"}, 1, "resources.gpu_type",
			`"B200" requested; the workers have NVIDIA A100, NVIDIA H100`},
		{"too many of a type", berth.Resources{GPUs: 3, GPUType: "A100"}, 1, "resources.gpus",
			"3 requested; the largest worker has 2 of type A100 (2xNVIDIA A100:40GiB)"},
		{"GPUs too small", berth.Resources{GPUs: 1, GPUType: "A100", GPUMemory: 80 * gib}, 1, "resources.gpu_memory",
			"80GiB per GPU requested; the largest GPU of type A100 has 40GiB"},
		{"too many CPUs", berth.Resources{CPUs: 256}, 1, "resources.cpus", "256 requested; the largest worker has 128"},
		{"too much memory", berth.Resources{Memory: 4096 * gib}, 1, "resources.memory", "4TiB requested; the largest worker has 2TiB"},
		{"not all on one worker", berth.Resources{GPUs: 4, CPUs: 100}, 1, "resources",
			"4 GPUs, 100 CPUs requested on one worker; no worker has them all"},
		{"a gang larger than what fits", berth.Resources{GPUs: 4}, 2, "nodes", "2 requested; only 1 worker has 4 GPUs"},
		{"a gang larger than the cluster", berth.Resources{}, 5, "nodes", "5 requested; only 3 workers exist"},
	} {
		err := NeverFits(slices.Values(cluster), &tc.r, tc.nodes)
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: NeverFits = %v, want nil", tc.name, err)
		case tc.field == "":
		case err == nil:
			t.Errorf("%s: NeverFits = nil, want %s: %s", tc.name, tc.field, tc.msg)
		case err.Code != berth.ECodeUnsatisfiable || err.Field != tc.field || err.Message != tc.msg:
			t.Errorf("%s: NeverFits = %s %s: %q, want unsatisfiable %s: %q", tc.name, err.Code, err.Field, err.Message, tc.field, tc.msg)
		}
	}
	if err := NeverFits(slices.Values([]*Worker(nil)), &berth.Resources{GPUs: 64}, 1); err != nil {
		t.Errorf("NeverFits(no workers) = %v, want nil: nothing to check against", err)
	}
}

// BenchmarkNeverFits checks jobs against 1,000 workers of 8 H100s, as
// every submission is checked on the controller's loop: a gang of 4 that
// fits (the check stops at the 4th worker that fits) and a job of 16 GPUs
// that never fits (every worker is looked at, and the message built).
func BenchmarkNeverFits(b *testing.B) {
	ws := make([]*Worker, 1000)
	for i := range ws {
		ws[i] = newWorker("w", gpus(8, "NVIDIA H100", 80<<30))
	}
	for _, bc := range []struct {
		name  string
		gpus  int
		nodes int
		fits  bool
	}{{"fits", 8, 4, true}, {"refused", 16, 1, false}} {
		b.Run(bc.name, func(b *testing.B) {
			r := &berth.Resources{GPUs: bc.gpus, GPUType: "H100", CPUs: 32, Memory: 256 << 30}
			for b.Loop() {
				if err := NeverFits(slices.Values(ws), r, bc.nodes); (err == nil) != bc.fits {
					b.Fatal(err)
				}
			}
		})
	}
}
