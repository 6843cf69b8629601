package agent

import (
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// TestEnvironmentGPUShare: an attempt holding half of GPU 1 sees that GPU
// and its share; with an MPS daemon configured it is an MPS client limited
// to half the threads and its memory, which a job's own env cannot undo;
// without one it is told its share only.
func TestEnvironmentGPUShare(t *testing.T) {
	t.Parallel()
	gpus := []berth.GPU{{Index: 0, Model: "H100", Memory: 80 << 30}, {Index: 1, Model: "H100", Memory: 80 << 30}}
	m := &wire.JobAssign{GPUs: []int{1}, GPUMilli: 500}
	const script = `echo "cuda=$CUDA_VISIBLE_DEVICES frac=$BERTH_GPU_FRACTION pipe=${CUDA_MPS_PIPE_DIRECTORY-unset} pct=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE-unset} mem=${CUDA_MPS_PINNED_DEVICE_MEM_LIMIT-unset}"`
	for _, tc := range []struct {
		name, mps string
		memory    berth.Bytes
		want      string
	}{
		{"time-slicing", "", 0, "cuda=1 frac=0.5 pipe=unset pct=unset mem=unset\n"},
		{"mps", "/run/mps", 0, "cuda=1 frac=0.5 pipe=/run/mps pct=50 mem=0=40960M\n"},
		{"mps with gpu_memory", "/run/mps", 24 << 30, "cuda=1 frac=0.5 pipe=/run/mps pct=50 mem=0=24576M\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mm := *m
			mm.GPUMemory = tc.memory
			s := testSpec(t, "sh", "-c", script)
			s.GPUs, s.GPUShare = mm.GPUs, gpuShare(&mm, gpus, tc.mps)
			s.Env = map[string]string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}
			if tc.mps == "" {
				s.Env = nil
			}
			ex, out := run(t, s)
			checkExit(t, ex, berth.AttemptSucceeded, intp(0), "")
			if out != tc.want {
				t.Fatalf("child saw %q, want %q", out, tc.want)
			}
		})
	}
	if gpuShare(&wire.JobAssign{GPUs: []int{0, 1}}, gpus, "/run/mps") != nil {
		t.Error("whole GPUs got a share")
	}
}
